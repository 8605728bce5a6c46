"""Attacks on the risk gate: an adversary chosen to flatter the figure, and one budget split across
programmes that count the same units."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
import yaml
from support.paths import PROJECT_ROOT

from spatial_release.release.record import RiskRecord
from spatial_release.risk.landscape import LandscapeError, load_landscape


def _landscape(tmp_path, **fields) -> Path:
    data = {"version": 1, "points": 4, "population": {"table": "population.csv"}, **fields}
    path = tmp_path / "landscape.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("panel, adversary", [("whole", "journalist"), ("sample", "prosecutor")])
def test_an_adversary_that_does_not_fit_the_panel_is_refused(tmp_path, panel, adversary):
    """Negative control: a whole fleet gated with a journalist figure (the census crowd a bike does not hide
    in) made 0.0043 out of prosecutor figures of 0.17 to 0.91; the landscape now refuses that pairing."""
    path = _landscape(tmp_path, panel=panel, adversary=adversary)
    with pytest.raises(LandscapeError, match=f"{path}.*panel '{panel}'"):
        load_landscape(path)


def test_a_landscape_must_say_who_is_in_the_panel(tmp_path):
    path = _landscape(tmp_path, adversary="prosecutor")
    with pytest.raises(LandscapeError, match="field 'panel'"):
        load_landscape(path)


def test_the_shipped_landscapes_fit_their_panels():
    bikes, _ = load_landscape(PROJECT_ROOT / "policies/landscapes/jersey-city.yaml")
    assert (bikes.panel, bikes.adversary) == ("whole", "prosecutor")  # every bike of the fleet is in the trips
    demo, _ = load_landscape(PROJECT_ROOT / "policies/landscapes/demo.yaml")
    assert (demo.panel, demo.adversary) == ("sample", "journalist")  # subscribers among residents


def _two_programmes(tmp_path, shared: bool, same_files: bool = True) -> tuple[RiskRecord, RiskRecord]:
    """A monthly and a quarterly programme over the same devices, published into one ledger; with
    `same_files` False, the quarterly reads its own export of them (other bytes: the ids renamed)."""
    from support.fixture import fixture_pings, uniqueness_policy_dict, write_policy

    from spatial_release import cli

    traces, other = tmp_path / "traces.csv", tmp_path / "other-export.csv"
    fixture_pings().to_csv(traces, index=False)
    fixture_pings().assign(device=lambda f: "x-" + f["device"]).to_csv(other, index=False)
    extra = {"population": "fixture-devices"} if shared else {}
    monthly = write_policy(
        tmp_path,
        {**uniqueness_policy_dict(str(traces), name="fixture-monthly", period="month"), **extra},
        name="monthly.yaml",
    )
    quarterly = write_policy(
        tmp_path, {**uniqueness_policy_dict(str(traces if same_files else other)), **extra}, name="quarterly.yaml"
    )
    ledger = str(tmp_path / "ledger")
    ok, messages, first = cli.run_release(str(monthly), "2018-01", out=str(tmp_path / "out"), ledger=ledger)
    assert ok, messages
    ok, messages, second = cli.run_release(str(quarterly), "2018-Q1", out=str(tmp_path / "out"), ledger=ledger)
    assert ok, messages
    return first.risk, second.risk


@pytest.mark.slow
def test_programmes_of_one_population_spend_one_cumulative_budget(tmp_path):
    """The quarterly Citi Bike programme reported 0.0043 after the monthly programme had reached 0.0093 on
    the same bikes. With a shared `population`, the quarterly's cumulative figure includes the monthly's."""
    from spatial_release.risk import cumulative_risk

    monthly, quarterly = _two_programmes(tmp_path, shared=True)
    assert monthly.release_figure is not None and quarterly.release_figure is not None
    assert quarterly.cumulative is not None
    assert quarterly.cumulative == pytest.approx(
        cumulative_risk([monthly.release_figure, quarterly.release_figure]), rel=5e-3
    )  # 3 digits, up
    assert quarterly.cumulative >= cumulative_risk([monthly.release_figure, quarterly.release_figure])
    assert quarterly.window_periods == ["2018-01", "2018-Q1"]
    assert quarterly.cumulative > quarterly.release_figure > 0


@pytest.mark.slow
def test_without_a_shared_population_or_shared_files_the_budgets_stay_apart(tmp_path):
    """Control: programmes that neither say they share units nor read one file keep their own budgets."""
    _, quarterly = _two_programmes(tmp_path, shared=False, same_files=False)
    assert quarterly.cumulative == pytest.approx(quarterly.release_figure)


@pytest.mark.slow
def test_a_copy_of_a_programme_without_its_population_line_spends_the_same_budget(tmp_path):
    """A copy of a policy under a new name and with no `population:` line, over the same files and into the
    same ledger, must not start a fresh risk budget. The population is keyed on the input files' contents
    too: the copy's cumulative figure includes the first programme's."""
    from spatial_release.risk import cumulative_risk

    monthly, quarterly = _two_programmes(tmp_path, shared=False, same_files=True)
    assert quarterly.window_periods == ["2018-01", "2018-Q1"]
    assert monthly.release_figure is not None and quarterly.release_figure is not None
    assert quarterly.cumulative is not None
    assert quarterly.cumulative == pytest.approx(
        cumulative_risk([monthly.release_figure, quarterly.release_figure]), rel=5e-3
    )  # 3 digits, up
    assert quarterly.cumulative >= cumulative_risk([monthly.release_figure, quarterly.release_figure])


@pytest.mark.slow
def test_renaming_the_population_does_not_reset_the_budget(tmp_path):
    """Q1 under `population: pop-one`, then Q2 of the same dataset under `pop-two`, must not report a
    cumulative figure of Q2 alone. A dataset's own releases always count."""
    from support.fixture import fixture_pings, uniqueness_policy_dict, write_policy

    from spatial_release import cli
    from spatial_release.risk import cumulative_risk

    for quarter, population in (("2018-Q1", "pop-one"), ("2018-Q2", "pop-two")):
        traces = tmp_path / f"traces-{quarter}.csv"
        frame = fixture_pings()
        if quarter == "2018-Q2":
            frame["when"] = frame["when"].str.replace("2018-01-10", "2018-04-10")
        frame.to_csv(traces, index=False)
        policy = write_policy(tmp_path, {**uniqueness_policy_dict(str(traces)), "population": population})
        ok, messages, record = cli.run_release(
            str(policy), quarter, out=str(tmp_path / "out"), ledger=str(tmp_path / "ledger")
        )
        assert ok, messages
        if quarter == "2018-Q1":
            first = record.risk.release_figure
    assert record.risk.window_periods == ["2018-Q1", "2018-Q2"]
    assert record.risk.cumulative == pytest.approx(cumulative_risk([first, record.risk.release_figure]), rel=5e-3)
    assert record.risk.cumulative >= cumulative_risk([first, record.risk.release_figure])  # rounded up, never down


def _conflicting_programmes(tmp_path, shared: bool):
    """A monthly programme over every device, then a quarterly one over traces without one device of cell E
    (6 -> 5 devices, still published at k = 3): the key (E, 2018-01-10) has two values. No `audit_with`."""
    from support.fixture import CELL_E, cell_id, fixture_pings, uniqueness_policy_dict, write_policy

    from spatial_release import cli

    full, fewer = tmp_path / "full.csv", tmp_path / "fewer.csv"
    pings = fixture_pings()
    pings.to_csv(full, index=False)
    pings[pings["device"] != "e0"].to_csv(fewer, index=False)
    extra = {"population": "fixture-devices"} if shared else {}
    monthly = write_policy(
        tmp_path, {**uniqueness_policy_dict(str(full), name="fixture-monthly", period="month"), **extra}, name="monthly.yaml"
    )
    quarterly = write_policy(tmp_path, {**uniqueness_policy_dict(str(fewer)), **extra}, name="quarterly.yaml")
    ledger, out = str(tmp_path / "ledger"), str(tmp_path / "out")
    ok, messages, _ = cli.run_release(str(monthly), "2018-01", out=out, ledger=ledger)
    assert ok, messages
    assert cell_id(CELL_E) in set(
        pd.read_parquet(tmp_path / "out/releases/fixture-monthly/2018-01/cells.parquet")["cell_id"]
    )
    return cli.run_release(str(quarterly), "2018-Q1", out=out, ledger=ledger)


@pytest.mark.slow
def test_programmes_of_one_population_are_audited_together_without_audit_with(tmp_path):
    """A quarterly and a monthly programme of one population, with no `audit_with`, must not publish the same
    key with two values. Every release of a population is audited with the population's earlier releases:
    the quarterly is refused by the audit."""
    ok, messages, _ = _conflicting_programmes(tmp_path, shared=True)
    assert not ok
    conflicts = [m for m in messages if "suppression_audit" in m and "published with two values" in m]
    assert conflicts, messages
    # the candidate's value is unpublished: the refusal names the figure, never its two values
    assert not any(re.search(r"published as \d+ and as \d+", m) for m in messages), messages
    # ...and names it by level, area and bucket, as the check's offending rows do (what an alert lists)
    assert any(
        re.search(r"first: \S+ \S+ at \d{4}-\d\d-\d\dT[\d:+]+ \(published with two values\)", m) for m in conflicts
    ), conflicts


@pytest.mark.slow
def test_programmes_of_different_populations_are_not_compared(tmp_path):
    """Control: without a shared population the two programmes count different units and both publish."""
    ok, messages, _ = _conflicting_programmes(tmp_path, shared=False)
    assert ok, messages
