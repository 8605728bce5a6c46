"""A DP release end to end through the Dagster job: the DP guarantees block in place of the k floor and the
audit, release.json records the mechanism (never the noise), and the population's privacy budget, spent
across a quarterly and a monthly programme in one ledger, refuses the release that would exceed it."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest
import yaml
from support.dp import dp_pings, dp_policy, failed_checks, publish_by_stages, settings

from spatial_release import cli, guarantees, stages
from spatial_release.defs.catalogue import programme_for
from spatial_release.defs.execution import execute_release
from spatial_release.dp import Sensitivity, calibrate
from spatial_release.ledger import Ledger
from spatial_release.ledger.entries import ReleaseEntry
from spatial_release.levels import LEAF, TOTAL
from spatial_release.period import Period
from spatial_release.policy import RiskSpec, load_policy
from spatial_release.release import read_tables
from spatial_release.report import readable
from spatial_release.stages import GuaranteeFailed
from spatial_release.stages import dp as dp_stage


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> Path:
    """One file per month (the policies read `traces-{month}.csv`): a monthly programme reads its month only."""
    folder = tmp_path_factory.mktemp("dp")
    pings = dp_pings()
    months = pd.to_datetime(pings["when"]).dt.strftime("%Y%m")
    for month in ("201801", "201802", "201803"):
        pings[months == month].to_csv(folder / f"traces-{month}.csv", index=False)
    return folder / "traces-{month}.csv"


@pytest.mark.slow
def test_dp_release_publishes_noisy_consistent_figures_records_the_mechanism_and_spends_one_budget(tmp_path, traces):
    quarterly = dp_policy(tmp_path, traces, "dpq")
    run = execute_release(programme_for(quarterly), "2018-Q1", settings(tmp_path))
    assert run.candidate.success and run.publish is not None and run.publish.success, failed_checks(run)
    folder = tmp_path / "releases" / "dpq" / "2018-Q1"
    record = json.loads((folder / "release.json").read_text())
    privacy = record["privacy"]
    assert privacy["mechanism"] == "make_laplace_threshold" and privacy["epsilon"] <= 2.0 and privacy["delta"] <= 1e-6
    assert privacy["sensitivity"] == {"l0": 6, "l1": 6, "l2": pytest.approx(6**0.5, abs=1e-5), "linf": 1}
    assert "replaced by this guarantee" in privacy["guarantee"]
    assert record["audit"] is None and record["complementary_suppression"].startswith("differential privacy")
    assert set(record["checks"]) >= {"withheld_absent", "no_identifiers", "dp_mechanism", "privacy_budget"}
    assert not {"k_floor", "suppression_audit"} & set(record["checks"])
    assert record["risk"]["privacy"]["spent_with"][0] == pytest.approx(2.0)
    assert record["risk"]["privacy"]["left"][0] == pytest.approx(3.0)
    # re-derived from the files: every key is a key of the data, at or above the threshold, and the bucket
    # totals hold at least the sum of their published cells (presence)
    cells = pd.read_parquet(folder / "cells.parquet")
    margins = pd.read_parquet(folder / "margins.parquet")
    true_cells = pd.read_parquet(tmp_path / "work" / "dpq" / "2018-Q1" / "counts" / "cell_counts.parquet")
    keys = set(zip(cells["cell_id"], cells["bucket_start"]))
    assert len(cells) > 0 and keys <= set(zip(true_cells["cell_id"], true_cells["bucket_start"]))
    assert (cells["n_devices"] >= privacy["threshold"]).all() and (margins["n_devices"] >= privacy["threshold"]).all()
    totals = margins[margins["level"] == TOTAL].set_index("bucket_start")["n_devices"]
    sums = cells.groupby("bucket_start")["n_devices"].sum()
    assert all(totals[b] >= s for b, s in sums.items() if b in totals.index)
    assert set(margins["level"]) <= {"grid_2000m", TOTAL} and LEAF not in set(margins["level"])
    # the report page shows the mechanism and an error bar per published count in place of the audit
    page = (folder / "report.html").read_text()
    assert "Differential privacy" in page and "Suppression audit" not in page
    first = cells.iloc[0]
    low, high = max(0.0, first["n_devices"] - privacy["interval95"]), first["n_devices"] + privacy["interval95"]
    assert f"<td>{readable(round(low, 1))}</td><td>{readable(round(high, 1))}</td>" in page
    # the command line's summary of a DP release names the mechanism and the budget (no audit line)
    summary = cli._summary(
        stages.ReleaseRecord.read(folder),
        stages.read_manifest(stages.WorkArea(tmp_path / "work" / "dpq" / "2018-Q1")).summary,
        folder,
    )
    assert "OpenDP make_laplace_threshold: epsilon 2" in summary and "replaced by the mechanism's guarantee" in summary
    assert "privacy budget: epsilon 2 (delta 1e-06) of 5" in summary and "audit" not in summary.replace("LP audit", "")
    # noise, not the truth: the published figures differ from the true counts somewhere
    merged = cells.merge(true_cells, on=["cell_id", "bucket_start"])
    assert (merged["n_devices"] != merged["n"]).any()

    # the monthly programme of the same devices spends the same budget: 2.0 + 2.0 of 5.0, then refused
    monthly = dp_policy(tmp_path, traces, "dpm", period="month")
    january = json.loads((publish_by_stages(monthly, "2018-01", tmp_path) / "release.json").read_text())
    assert january["risk"]["privacy"]["spent_before"][0] == pytest.approx(2.0)
    with pytest.raises(GuaranteeFailed, match="privacy_budget failed: PrivacyBudgetExceeded"):
        publish_by_stages(monthly, "2018-02", tmp_path)
    assert not (tmp_path / "releases" / "dpm" / "2018-02").exists()

    # the risk review shows what the population spent and what is left; a budget lowered below it is a breach
    ledger = Ledger(tmp_path / "ledger", tmp_path / "releases")
    review = stages.run_review(load_policy(monthly), ledger, tmp_path / "work", tmp_path / "alerts").review
    assert review.privacy is not None and not review.breaches
    assert review.privacy["spent"][0] == pytest.approx(4.0) and review.privacy["left"][0] == pytest.approx(1.0)
    assert [r.period for r in review.releases] == ["2018-Q1", "2018-01"]
    lowered = dp_policy(tmp_path, traces, "dpm", period="month", budget={"epsilon": 3.0, "delta": 1e-5})
    review = stages.run_review(load_policy(lowered), ledger, tmp_path / "work", tmp_path / "alerts").review
    assert review.privacy is not None and review.privacy["over"] and [b.period for b in review.breaches] == ["2018-01"]


@pytest.fixture(scope="module")
def dp_candidate(tmp_path_factory, traces) -> stages.ReleaseContext:
    """A DP candidate of the quarter built by the stages (no Dagster, nothing published)."""
    root = tmp_path_factory.mktemp("dp-candidate")
    ctx = stages.ReleaseContext(load_policy(dp_policy(root, traces, "dpc")), Period.parse("2018-Q1"), root / "work")
    stages.run_ingest(ctx)
    stages.run_counts(ctx)
    stages.run_protect(ctx)
    return ctx


def _rewrite_manifest(ctx: stages.ReleaseContext, **privacy) -> None:
    manifest = stages.ProtectionManifest.read(ctx.area.candidate)
    summary = replace(manifest.summary, privacy={**(manifest.summary.privacy or {}), **privacy})
    replace(manifest, summary=summary).write(ctx.area.candidate)


@pytest.mark.slow
def test_dp_mechanism_check_refuses_a_record_that_differs_from_the_policy(dp_candidate):
    ctx = dp_candidate
    assert stages.check_dp_mechanism(ctx).passed
    recorded = stages.ProtectionManifest.read(ctx.area.candidate).summary.privacy or {}
    try:
        _rewrite_manifest(ctx, scale=recorded["scale"] / 2)  # half the noise the policy calls for
        outcome = stages.check_dp_mechanism(ctx)
        assert not outcome.passed and outcome.offending[0]["parameter"] == "scale"
    finally:
        _rewrite_manifest(ctx, scale=recorded["scale"])
    assert stages.check_dp_mechanism(ctx).passed


def test_dp_withheld_absent_refuses_unselected_and_outside_keys(dp_candidate):
    ctx = dp_candidate
    assert stages.check_dp_withheld_absent(ctx).passed
    tables = read_tables(ctx.area.candidate, geometry=False)
    true_cells, true_margins = stages.read_true_counts(ctx.area)
    threshold = (stages.ProtectionManifest.read(ctx.area.candidate).summary.privacy or {})["threshold"]
    # A key of the data shown below the threshold. Which keys the mechanism selects depends on its noise (drawn
    # from the system's entropy, as a DP release must), so the test does not rely on some key being withheld:
    # it takes a published key and shows it again at threshold - 1, in place of its own row.
    first = tables.cells.head(1)[["cell_id", "bucket_start", "n_devices"]]
    below = first.assign(n_devices=threshold - 1)
    outside = first.assign(cell_id="1000mE570000N4508000")
    assert len(first) == 1 and (true_cells["cell_id"] == "1000mE570000N4508000").sum() == 0
    for extra, problem, keep in (
        (below, "figure below the selection threshold", tables.cells.iloc[1:]),
        (outside, "key outside the data", tables.cells),
    ):
        cells = pd.concat([keep, extra.assign(geometry=tables.cells["geometry"].iloc[0])], ignore_index=True)
        outcome = guarantees.check_dp_withheld_absent(
            cells, tables.margins, true_cells, true_margins, threshold, "n_devices"
        )
        assert not outcome.passed and [o["problem"] for o in outcome.offending] == [problem]


def test_privacy_budget_of_a_release_alone_and_over_the_budget(dp_candidate, tmp_path):
    ctx = dp_candidate
    outcome = stages.check_privacy_budget(ctx, stages.Published(Ledger(tmp_path / "l", tmp_path / "r"), tmp_path / "r"))
    assert outcome.passed and outcome.figures["spent_with"][0] == pytest.approx(2.0)
    # a policy whose own release is within its budget but whose population already spent 4.0 of 5.0
    entries = [
        ReleaseEntry.from_entry(
            {
                "kind": "release",
                "seq": i,
                "hash": "h",
                "dataset": "other",
                "period": p,
                "recorded_at": "2018-04-01T00:00:00+00:00",
                "population": "dp-fleet",
                "risk": {"release_figure": 0.5, "privacy": {"accounting": "approx", "loss": [2.0, 1e-6]}},
            }
        )
        for i, p in enumerate(("2017-Q3", "2017-Q4"))
    ]
    decision = dp_stage.budget_decision(ctx.policy, entries)
    assert decision["over"] and decision["spent_with"][0] == pytest.approx(6.0)
    assert not dp_stage.budget_decision(ctx.policy, entries[:1])["over"]
    zcdp = [replace(entries[0], risk={**entries[0].risk, "privacy": {"accounting": "zcdp", "loss": [0.1, 1e-6]}})]
    with pytest.raises(ValueError, match="do not compose here"):
        dp_stage.budget_decision(ctx.policy, zcdp)


def test_the_map_of_a_release_that_publishes_nothing_renders():
    """Under DP a release may select no figure at all (a small fleet at a small epsilon): its map still renders."""
    from types import SimpleNamespace

    from spatial_release.report import mapping

    empty = pd.DataFrame({c: pd.Series(dtype="str") for c in ("level", "area_id", "bucket_start")}).assign(n_devices=0)
    view = SimpleNamespace(margins=empty.iloc[0:0], buckets_of=lambda level: 13)
    assert mapping._totals_line(view) == ""  # type: ignore[arg-type]


def test_the_dp_protection_logs_no_count_of_the_datas_keys(dp_candidate):
    """How many keys the data holds (selected or not) is no published figure: the progress log names none."""
    messages: list[str] = []
    dp_stage.run_protect_dp(dp_candidate, progress=messages.append)
    assert messages and not any(ch.isdigit() for message in messages for ch in message)


@pytest.mark.slow
def test_a_zcdp_programme_publishes_with_gaussian_noise_and_accounts_rho(tmp_path, traces):
    policy = dp_policy(tmp_path, traces, "dpz", accounting="zcdp", epsilon=None, rho=0.5, budget={"rho": 1.0, "delta": 1e-5})
    record = json.loads((publish_by_stages(policy, "2018-Q1", tmp_path) / "release.json").read_text())
    privacy = record["privacy"]
    assert privacy["mechanism"] == "make_gaussian_threshold" and privacy["rho"] <= 0.5 and "epsilon" not in privacy
    assert record["risk"]["privacy"]["accounting"] == "zcdp" and record["risk"]["privacy"]["left"][0] == pytest.approx(0.5)
    # the gate's figure: the advantage the loss allows, through OpenDP's conversion of zCDP to (epsilon, delta)
    assert 0 < record["risk"]["release_figure"] < 1 and record["risk"]["model"] == "dp"


@pytest.mark.slow
def test_a_dp_programme_without_a_risk_section_is_reviewed_and_its_per_unit_files_kept_for_the_default_retention(
    tmp_path, traces
):
    """A DP policy needs no risk section (its gate is the privacy budget): the review applies the default key
    retention to its per-unit files, and a breach of its budget is alerted without a landscape."""
    path = dp_policy(tmp_path, traces, "dpnorisk", period="month")
    data = yaml.safe_load(path.read_text())
    del data["risk"]
    path.write_text(yaml.safe_dump(data))
    policy = load_policy(path)
    assert policy.risk is None
    publish_by_stages(path, "2018-01", tmp_path)
    ledger = Ledger(tmp_path / "ledger", tmp_path / "releases")
    run = stages.run_review(policy, ledger, tmp_path / "work", tmp_path / "alerts")
    assert run.pruned == [] and run.review.privacy is not None and not run.review.breaches
    area = stages.WorkArea(tmp_path / "work" / "dpnorisk" / "2018-01")
    per_unit = [p for p in area.per_unit_artefacts() if p.exists()]
    assert per_unit  # the membership and key files a DP release keeps are per-unit data
    recorded = ledger.releases("dpnorisk")[0].recorded_at
    default = RiskSpec.model_fields["key_retention_days"].default
    soon = recorded + timedelta(days=default - 1)
    assert stages.prune_per_unit_artefacts(policy, ledger, tmp_path / "work", now=soon) == []
    assert all(p.exists() for p in per_unit)
    late = recorded + timedelta(days=default + 1)
    assert stages.prune_per_unit_artefacts(policy, ledger, tmp_path / "work", now=late) == ["2018-01"]
    assert not any(p.exists() for p in per_unit)
    # a budget lowered below what was spent: a breach, alerted with no landscape to name an adversary
    data["protection"]["budget"] = {"epsilon": 1.5, "delta": 1e-5}
    data["protection"]["epsilon"] = 1.0
    path.write_text(yaml.safe_dump(data))
    run = stages.run_review(load_policy(path), ledger, tmp_path / "work", tmp_path / "alerts")
    assert [b.period for b in run.review.breaches] == ["2018-01"] and len(run.alerts) == 1


@pytest.mark.slow
def test_a_dp_time_ladder_publishes_every_rung_consistent_and_accounts_the_rungs_composed(tmp_path, traces):
    """A DP programme with a time ladder publishes each rung's figures from the same bounded rows: the
    sensitivity is the rungs' summed, the loss stays the policy's (at most the rungs' losses composed), cut
    buckets stay unpublished, and every rung's figure holds at least the finer figures inside it."""
    path = dp_policy(tmp_path, traces, "dpladder")
    data = yaml.safe_load(path.read_text())
    data["time"]["ladder"] = ["4w", "period"]
    data["protection"]["compare"] = [
        {"rung": "4w", "max_buckets": 1},
        {"rung": "period", "max_buckets": 1, "max_areas": 2},
        {"rung": "2w", "max_buckets": 2},  # a rung outside the ladder
    ]
    path.write_text(yaml.safe_dump(data))
    folder = publish_by_stages(path, "2018-Q1", tmp_path)
    record = json.loads((folder / "release.json").read_text())
    privacy = record["privacy"]
    assert privacy["sensitivity"]["l0"] == 3 * 6  # B=2 weeks x (cell, 2 km parent, total), at three rungs
    ladder = privacy["time_ladder"]
    assert ladder["rungs"] == ["1w", "4w", "period"] and ladder["loss"][0] == pytest.approx(2.0)
    assert ladder["loss"][0] <= ladder["composed_loss"][0] * (1 + 1e-9) and ladder["loss"][1] <= ladder["composed_loss"][1]
    cells = pd.read_parquet(folder / "cells.parquet")
    margins = pd.read_parquet(folder / "margins.parquet")
    figures = pd.concat(
        [cells.rename(columns={"cell_id": "area_id"}).assign(level=LEAF), margins], ignore_index=True
    ).rename(columns={"n_devices": "n"})
    rung = figures["level"].map(lambda level: level.split("@")[1] if "@" in level else None)
    assert {"4w", "period"} <= set(rung.dropna())
    start = pd.Timestamp("2018-01-01 05:00", tz="UTC")
    assert (pd.to_datetime(figures["bucket_start"], utc=True) >= start).all()  # the 4 weeks across the start: cut
    period = figures[rung == "period"].assign(level=lambda f: f["level"].str.split("@").str[0])
    finer = figures[rung != "period"].assign(level=lambda f: f["level"].str.split("@").str[0])
    floor = finer.groupby(["level", "area_id"])["n"].max().rename("floor").reset_index()
    both = period.merge(floor, on=["level", "area_id"])
    assert len(both) > 0 and (both["n"] >= both["floor"]).all()
    ctx = stages.ReleaseContext(load_policy(path), Period.parse("2018-Q1"), tmp_path / "work")
    check_the_frontier_at_equal_loss(ctx, record, figures)
    # the mechanism check refuses a record calibrated for the policy's bucket alone (the rungs unaccounted)
    manifest = stages.ProtectionManifest.read(ctx.area.candidate)
    assert stages.check_dp_mechanism(ctx).passed
    one_rung = dp_stage.policy_sensitivity(ctx, rungs=0)
    summary = replace(manifest.summary, privacy={**(manifest.summary.privacy or {}), "sensitivity": one_rung.describe()})
    replace(manifest, summary=summary).write(ctx.area.candidate)
    outcome = stages.check_dp_mechanism(ctx)
    assert not outcome.passed and outcome.offending[0]["parameter"] == "sensitivity"


def record_folder(ctx: stages.ReleaseContext) -> Path:
    return ctx.work_root.parent / "releases" / ctx.policy.name / ctx.period.label


def check_the_frontier_at_equal_loss(ctx: stages.ReleaseContext, record: dict, figures: pd.DataFrame) -> None:
    """release.json's frontier: the policy's configuration (published) and each compared one, at the policy's
    loss, with what follows from the policy alone (re-derived here by OpenDP's calibration); the share shown and
    the median error stay in the internal manifest (the published configuration's share re-derived)."""
    rows = record["risk"]["frontier"]
    assert [r["configuration"] for r in rows] == [
        "1w, B=2, C=1 with rungs ['4w', 'period']",
        "4w, B=1, C=1",
        "period, B=1, C=2",
        "2w, B=2, C=1",
    ]
    assert [r["published"] for r in rows] == [True, False, False, False]
    page = (Path(record_folder(ctx)) / "report.html").read_text()
    assert "configuration at the same loss" in page and "period, B=1, C=2" in page
    assert not {"shown", "error_median"} & {key for row in rows for key in row}
    params = dp_stage.dp_params(ctx.policy)
    levels = ctx.structure.chains[0].levels
    for row in rows[1:]:
        b, c = row["max_buckets"], row["max_areas"]
        calibration = calibrate(replace(params, max_buckets=b, max_areas=c), Sensitivity.of(levels, b, c))
        assert (row["l0"], row["scale"], row["threshold"]) == (
            calibration.sensitivity.l0,
            calibration.scale,
            calibration.threshold,
        )
        assert calibration.spent()[0] == pytest.approx(2.0)  # equal epsilon
    internal = stages.ProtectionManifest.read(ctx.area.candidate).summary.frontier or []
    assert len(internal) == 4 and all(0 <= r.shown <= 1 for r in internal)
    true_cells, _ = stages.read_true_counts(ctx.area)
    cut = {pd.Timestamp(b) for b in ctx.structure.cut}
    true_cells = true_cells[(true_cells["n"] > 0) & ~pd.to_datetime(true_cells["bucket_start"], utc=True).isin(cut)]
    shown = figures[figures["level"] == LEAF][["area_id", "bucket_start"]].rename(columns={"area_id": "cell_id"})
    assert internal[0].shown == pytest.approx(len(shown.merge(true_cells, on=["cell_id", "bucket_start"])) / len(true_cells))


@pytest.mark.slow
def test_a_copy_of_a_dp_programme_under_another_name_and_no_population_spends_the_same_budget(tmp_path, traces):
    """The population is keyed on the data too: a copy of the quarterly programme under another name and
    without `population:` reads the same files, so it spends the first programme's budget (2.0 + 4.0 over 5.0:
    refused by `privacy_budget`); the same copy over other devices' files is a population of its own."""
    publish_by_stages(dp_policy(tmp_path, traces, "dpq"), "2018-Q1", tmp_path)

    def copy(folder: Path, files: Path, name: str) -> Path:
        path = dp_policy(folder, files, name, epsilon=4.0)
        data = yaml.safe_load(path.read_text())
        del data["population"]
        path.write_text(yaml.safe_dump(data))
        return path

    same = copy(tmp_path, traces, "dpcopy")
    assert load_policy(same).population_key != load_policy(tmp_path / "dpq.yaml").population_key
    with pytest.raises(GuaranteeFailed, match="privacy_budget failed: PrivacyBudgetExceeded"):
        publish_by_stages(same, "2018-Q1", tmp_path)
    assert not (tmp_path / "releases" / "dpcopy" / "2018-Q1").exists()
    other = tmp_path / "other"
    other.mkdir()
    # other devices, one of them in March too (a header-only March file, the same bytes as the first
    # programme's, would key the two programmes to one population)
    pings = dp_pings(seed=4)
    pings = pd.concat([pings, pings.head(1).assign(device="march", when="2018-03-05 12:00:00")], ignore_index=True)
    months = pd.to_datetime(pings["when"]).dt.strftime("%Y%m")
    for month in ("201801", "201802", "201803"):
        pings[months == month].to_csv(other / f"traces-{month}.csv", index=False)
    published = publish_by_stages(copy(other, other / "traces-{month}.csv", "dpother"), "2018-Q1", tmp_path)
    privacy = json.loads((published / "release.json").read_text())["risk"]["privacy"]
    assert privacy["spent_before"][0] == 0.0 and privacy["spent_with"][0] == pytest.approx(4.0)
