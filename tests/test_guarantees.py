"""Each publication guarantee passes on the protected fixture and fails on a release that breaks it.

The fixture has a cell with exactly k devices (published: the boundary is inclusive), a cell with 2 (below k)
and one device with 40 pings alone in a cell. Negative controls edit the candidate files the way a buggy
suppressor would, and each check must reject them by re-deriving the truth from the counts.
"""

import threading
from dataclasses import replace

import geopandas as gpd
import pandas as pd
import pytest
from shapely import box
from support.fixture import CELL_A, CELL_B, CELL_C, CELL_D, CELL_E, K, cell_id

from spatial_release import stages
from spatial_release.fileio import sha256_file
from spatial_release.ledger import Ledger
from spatial_release.period import Period
from spatial_release.release import RELEASE_FILES

PERIOD = Period.parse("2018-Q1")
BUCKET = pd.Timestamp("2018-01-10T05:00:00Z")


@pytest.fixture
def protected(tmp_path, fixture_policy):
    ctx = stages.ReleaseContext(fixture_policy, PERIOD, tmp_path / "work")
    stages.run_ingest(ctx)
    stages.run_counts(ctx)
    stages.run_protect(ctx)
    return ctx


def _with(ctx: stages.ReleaseContext, policy) -> stages.ReleaseContext:
    """The same release under another version of its policy."""
    return stages.ReleaseContext(policy, ctx.period, ctx.work_root)


def _tamper(area: stages.WorkArea, cells=None, margins=None) -> None:
    """Rewrite the candidate as a buggy suppressor would, and re-sign the manifest so only the checks can tell."""
    if cells is not None:
        cells.to_parquet(area.candidate / "cells.parquet", index=False)
    if margins is not None:
        margins.to_parquet(area.candidate / "margins.parquet", index=False)
    manifest = stages.read_manifest(area)
    replace(manifest, sha256={n: sha256_file(area.candidate / n) for n in RELEASE_FILES}).write(area.candidate)


def _cells(area):
    return gpd.read_parquet(area.candidate / "cells.parquet")


def _margins(area):
    return pd.read_parquet(area.candidate / "margins.parquet")


def _row(cell, n):
    corner = [int(v) for v in cell.removeprefix("1000mE").split("N")]
    return gpd.GeoDataFrame(
        {"cell_id": [cell], "bucket_start": [BUCKET], "n_devices": [n]},
        geometry=[box(corner[0], corner[1], corner[0] + 1000, corner[1] + 1000)],
        crs="EPSG:32618",
    )


@pytest.mark.slow
def test_all_guarantees_pass_on_the_protected_fixture(protected):
    ctx = protected
    area = ctx.area
    outcomes = stages.run_guarantees(ctx)
    assert [(o.name, o.passed) for o in outcomes] == [
        ("rejected_share", True),
        ("outside_share", True),
        ("k_floor", True),
        ("structural_zeros_hold", True),
        ("withheld_absent", True),
        ("no_identifiers", True),
        ("suppression_audit", True),
        ("suppression_budget", True),
        ("earlier_work_files", True),
    ]
    published = dict(zip(_cells(area)["cell_id"], _cells(area)["n_devices"]))
    # re-derived from the fixture's construction, not from the suppressor's report
    assert published == {cell_id(CELL_A): K, cell_id(CELL_D): 5, cell_id(CELL_E): 6}


@pytest.mark.slow
def test_k_floor_rejects_a_cell_below_k(protected):
    ctx = protected
    area = ctx.area
    _tamper(area, cells=pd.concat([_cells(area), _row(cell_id(CELL_B), 2)], ignore_index=True))
    outcome = stages.check_k_floor(ctx)
    assert not outcome.passed and outcome.offending[0]["cell_id"] == cell_id(CELL_B)
    assert outcome.offending[0]["failing"] == "below k"
    # the candidate's count and the true one are unpublished figures: the check names the cell and the rule
    assert set(outcome.offending[0]) == {"cell_id", "bucket_start", "failing"}
    assert "smallest_published_cell_true_count" not in outcome.figures
    assert outcome.summary.endswith(f"first: {outcome.offending[0]}")


@pytest.mark.slow
def test_k_floor_rejects_the_lonely_device_even_if_inflated(protected):
    ctx = protected
    area = ctx.area
    # the suppressor publishes the 40-ping device's cell with a made-up count >= k: the truth is 1
    _tamper(area, cells=pd.concat([_cells(area), _row(cell_id(CELL_C), 40)], ignore_index=True))
    outcome = stages.check_k_floor(ctx)
    assert not outcome.passed and outcome.offending[0] == {
        "cell_id": cell_id(CELL_C),
        "bucket_start": outcome.offending[0]["bucket_start"],
        "failing": "below k",
    }
    assert outcome.summary.endswith(f"first: {outcome.offending[0]}")


@pytest.mark.slow
def test_k_floor_rejects_a_misreported_count(protected):
    ctx = protected
    area = ctx.area
    cells = _cells(area)
    cells.loc[cells["cell_id"] == cell_id(CELL_D), "n_devices"] = 6
    _tamper(area, cells=cells)
    assert not stages.check_k_floor(ctx).passed


@pytest.mark.slow
def test_k_floor_rejects_a_margin_below_k(protected):
    ctx = protected
    area = ctx.area
    extra = pd.DataFrame(
        {"level": ["grid_2000m"], "area_id": ["2000mE582000N4508000"], "bucket_start": [BUCKET], "n_devices": [1]}
    )
    # that parent holds B, C and D (8 devices), so a 1 is a misreport...
    margins = pd.concat([_margins(area), extra], ignore_index=True)
    _tamper(area, margins=margins)
    assert not stages.check_k_floor(ctx).passed
    # ...and a margin of a bucket that truly holds no unit (0 < k) is rejected too
    small = pd.DataFrame(
        {"level": ["total"], "area_id": ["total"], "bucket_start": [pd.Timestamp("2018-02-01T05:00:00Z")], "n_devices": [0]}
    )
    _tamper(area, margins=pd.concat([_margins(area), small], ignore_index=True))
    assert not stages.check_k_floor(ctx).passed


@pytest.mark.slow
def test_k_floor_boundary_is_inclusive(protected):
    ctx = protected
    policy, area = ctx.policy, ctx.area
    cells = _cells(area)
    assert (cells["n_devices"] == K).any()  # exactly k is published...
    assert stages.check_k_floor(ctx).passed  # ...and passes
    k_plus = policy.model_copy(update={"k": K + 1})
    k_plus._path, k_plus._sha256 = policy._path, policy._sha256
    assert not stages.check_k_floor(_with(ctx, k_plus)).passed  # with k + 1 that same cell is a violation


@pytest.mark.slow
def test_withheld_absent_rejects_a_null_row(protected):
    ctx = protected
    area = ctx.area
    row = _row(cell_id(CELL_B), 0).astype({"n_devices": "Int64"})
    row["n_devices"] = pd.NA
    cells = pd.concat([_cells(area).astype({"n_devices": "Int64"}), row], ignore_index=True)
    _tamper(area, cells=gpd.GeoDataFrame(cells, geometry="geometry", crs="EPSG:32618"))
    outcome = stages.check_withheld_absent(ctx)
    assert not outcome.passed
    assert {p["problem"] for p in outcome.offending} >= {"null value", "withheld key present"}


@pytest.mark.slow
def test_withheld_absent_rejects_a_flag_column(protected):
    ctx = protected
    area = ctx.area
    _tamper(area, cells=_cells(area).assign(suppressed=False))
    outcome = stages.check_withheld_absent(ctx)
    assert not outcome.passed and outcome.offending[0]["column"] == "suppressed"


@pytest.mark.slow
def test_withheld_absent_rejects_a_zero_standing_for_a_gap(protected):
    ctx = protected
    area = ctx.area
    _tamper(area, cells=pd.concat([_cells(area), _row(cell_id(CELL_B), 0)], ignore_index=True))
    outcome = stages.check_withheld_absent(ctx)
    assert not outcome.passed
    assert "zero row that is not a structural zero" in {p["problem"] for p in outcome.offending}


@pytest.mark.slow
def test_withheld_absent_rejects_duplicated_keys(protected):
    ctx = protected
    area = ctx.area
    cells = _cells(area)
    _tamper(area, cells=pd.concat([cells, cells.head(1)], ignore_index=True))
    outcome = stages.check_withheld_absent(ctx)
    assert not outcome.passed and outcome.offending[0]["problem"] == "duplicated key"


@pytest.mark.slow
def test_no_identifiers_rejects_an_identifier_column(protected):
    ctx = protected
    area = ctx.area
    _tamper(area, cells=_cells(area).assign(gender="f"))
    outcome = stages.check_no_identifiers(ctx)
    assert not outcome.passed and outcome.offending[0] == {
        "file": "cells.parquet",
        "column": "gender",
        "problem": "protected input column",
    }


@pytest.mark.slow
def test_no_identifiers_rejects_a_unit_id_value(protected):
    ctx = protected
    area = ctx.area
    margins = _margins(area)
    margins.loc[0, "area_id"] = "lonely"  # the device id of the fixture's lonely device
    _tamper(area, margins=margins)
    outcome = stages.check_no_identifiers(ctx)
    assert not outcome.passed and outcome.offending[0]["column"] == "area_id"
    # the leaked id is named by its column and counted, never quoted (it reaches logs, metadata and alerts)
    assert "lonely" not in repr(outcome)


@pytest.mark.slow
def test_no_identifiers_rejects_a_raw_input_column(protected):
    ctx = protected
    area = ctx.area
    _tamper(area, margins=_margins(area).assign(lat=40.7))
    outcome = stages.check_no_identifiers(ctx)
    assert not outcome.passed and outcome.offending[0]["problem"] == "raw input column"


@pytest.mark.slow
def test_suppression_budget_rejects_too_much_withheld(protected):
    ctx = protected
    policy = ctx.policy
    tight = policy.model_copy(update={"suppression": policy.suppression.model_copy(update={"budget": 0.15})})
    tight._path, tight._sha256 = policy._path, policy._sha256
    # withheld: B (2) + C (1) of 17 device counts = 17.6%
    outcome = stages.check_suppression_budget(_with(ctx, tight))
    assert not outcome.passed and outcome.figures["unit_counts_withheld"] == 3
    assert stages.check_suppression_budget(ctx).passed


@pytest.mark.slow
def test_candidate_changed_after_manifest_is_refused(protected):
    ctx = protected
    area = ctx.area
    _cells(area).head(1).to_parquet(area.candidate / "cells.parquet")  # no re-signed manifest
    with pytest.raises(stages.CandidateChanged):
        stages.check_k_floor(ctx)


@pytest.mark.slow
def test_publish_refuses_a_failing_candidate(protected, tmp_path):
    ctx = protected
    policy, area = ctx.policy, ctx.area
    _tamper(area, cells=pd.concat([_cells(area), _row(cell_id(CELL_B), 2)], ignore_index=True))
    with pytest.raises(stages.GuaranteeFailed, match="k_floor"):
        stages.run_publish(ctx, tmp_path / "releases", Ledger(tmp_path / "ledger"))
    assert not (tmp_path / "releases" / policy.name / PERIOD.label).exists()
    assert not (tmp_path / "ledger" / "entries.jsonl").exists()  # nothing recorded either


@pytest.mark.slow
def test_suppression_audit_rejects_primary_only_suppression(tmp_path, fixture_traces):
    """The classic leak: with k = 4, primary suppression alone withholds A (3) but publishes its 2 km parent
    (9) and sibling E (6), so A + (the parent's absent empty cells) = 3: A is shown to be below k. The
    audit over the candidate files must block it."""
    from support.fixture import policy_dict, write_policy

    from spatial_release.policy import load_policy
    from spatial_release.suppression.rules import publishable

    policy = load_policy(write_policy(tmp_path, policy_dict(str(fixture_traces), k=4)))
    ctx = stages.ReleaseContext(policy, PERIOD, tmp_path / "work")
    area = ctx.area
    stages.run_ingest(ctx)
    stages.run_counts(ctx)
    stages.run_protect(ctx)
    assert stages.check_suppression_audit(ctx).passed  # the real suppressor protects A
    true_cells, true_margins = stages.read_true_counts(area)
    naive_cells = true_cells[publishable(true_cells["n"], policy.k)]  # primary suppression alone
    naive_margins = true_margins[publishable(true_margins["n"], policy.k)].reset_index(drop=True)
    cells = _cells(area)
    leaky = cells[cells["cell_id"].isin(naive_cells["cell_id"])]
    leaky = pd.concat([leaky, _row(cell_id(CELL_E), 6)], ignore_index=True).drop_duplicates("cell_id")
    margins = naive_margins.rename(columns={"n": "n_devices"})
    _tamper(area, cells=leaky, margins=margins)
    assert stages.check_k_floor(ctx).passed  # every published figure is >= k...
    outcome = stages.check_suppression_audit(ctx)
    assert not outcome.passed, outcome.summary  # ...and yet P1 - E shows A holds at most 3 < k
    assert {
        "level": "cell",
        "area_id": cell_id(CELL_A),
        "bucket_start": BUCKET.isoformat(),
        "failing": "upper",
    } in outcome.offending
    # the interval itself stays in the internal work area, never in the check's metadata
    intervals = pd.read_parquet(area.root / "audit_intervals.internal.parquet")
    [a] = intervals[intervals["area_id"] == cell_id(CELL_A)].to_dict("records")
    assert a["attacker_up"] == 3 and not a["passed"]


@pytest.mark.slow
def test_suppression_audit_includes_earlier_releases_of_the_period(protected):
    """An earlier release of the same period that published C's value makes B recoverable now."""
    ctx = protected
    assert stages.check_suppression_audit(ctx).passed
    earlier_cells = pd.DataFrame({"cell_id": [cell_id(CELL_C)], "bucket_start": [BUCKET], "n_devices": [1]})
    earlier_margins = pd.DataFrame(columns=["level", "area_id", "bucket_start", "n_devices"])
    outcome = stages.check_suppression_audit(ctx, earlier=[(earlier_cells, earlier_margins)])
    assert not outcome.passed
    assert {o["area_id"] for o in outcome.offending if "area_id" in o} == {cell_id(CELL_B)}


@pytest.mark.slow
def test_suppression_audit_fails_when_releases_contradict_each_other(protected):
    ctx = protected
    other = pd.DataFrame({"cell_id": [cell_id(CELL_D)], "bucket_start": [BUCKET], "n_devices": [4]})  # truly 5
    empty = pd.DataFrame(columns=["level", "area_id", "bucket_start", "n_devices"])
    outcome = stages.check_suppression_audit(ctx, earlier=[(other, empty)])
    assert not outcome.passed and any(o.get("failing") == "published with two values" for o in outcome.offending)


def _lake_policy(tmp_path, fixture_traces, listed: str):
    """The fixture policy with a public structural-zeros list naming one cell."""
    from support.fixture import policy_dict, write_policy

    from spatial_release.policy import load_policy

    (tmp_path / "zeros.csv").write_text(f"cell_id\n{listed}\n")
    data = policy_dict(str(fixture_traces), suppression={"budget": 0.9, "zeros": "zeros.csv"})
    policy = load_policy(write_policy(tmp_path, data))
    ctx = stages.ReleaseContext(policy, PERIOD, tmp_path / "work")
    stages.run_ingest(ctx)
    stages.run_counts(ctx)
    stages.run_protect(ctx)
    return ctx


@pytest.mark.slow
def test_structural_zeros_hold_blocks_a_listed_zero_that_holds_units(tmp_path, fixture_traces):
    """The lonely device's cell C is listed as a structural zero: the list is wrong. The release is
    blocked naming the cell and bucket (never a unit), the audit sees the gap as >= 1, nothing is
    published and nothing is recorded."""
    ctx = _lake_policy(tmp_path, fixture_traces, cell_id(CELL_C))
    policy = ctx.policy
    outcome = stages.check_structural_zeros(ctx)
    assert not outcome.passed and outcome.name == "structural_zeros_hold"
    assert outcome.offending == [{"cell_id": cell_id(CELL_C), "bucket_start": BUCKET.isoformat()}]
    assert (
        f"{cell_id(CELL_C)} at {BUCKET.isoformat()} is listed as a structural zero but holds at least "
        "one unit; the zeros list is wrong" in outcome.summary
    )
    assert "lonely" not in repr(outcome)
    audit = stages.check_suppression_audit(ctx)
    assert not audit.passed
    # C is known to be >= 1 = its value (pinned from below), and B beside it is shown below k
    assert {(o.get("area_id"), o.get("failing")) for o in audit.offending} >= {(cell_id(CELL_C), "lower")}
    with pytest.raises(stages.GuaranteeFailed, match="structural_zeros_hold"):
        stages.run_publish(ctx, tmp_path / "releases", Ledger(tmp_path / "ledger"))
    assert not (tmp_path / "releases" / policy.name / PERIOD.label).exists()
    assert not (tmp_path / "ledger" / "entries.jsonl").exists()


@pytest.mark.slow
def test_suppression_audit_blocks_a_withheld_figure_proven_to_hold_someone(tmp_path, fixture_traces):
    """B (2 devices) is listed as a structural zero: its absence from the files tells an outsider it holds at
    least 1, and no more than that, so B passes the primary criterion (lo 1 <= v - 1) and yet the release proves
    someone was there by a margin of one unit: "in the data iff B's lower bound is >= 1" tells B's members apart
    from non-members. The audit names B (differencing as membership, `suppression.existence`)."""
    from spatial_release import tasks
    from spatial_release.stages.checks import PROVEN_PRESENT
    from spatial_release.suppression.existence import figures_at_lower_bound_one

    ctx = _lake_policy(tmp_path, fixture_traces, cell_id(CELL_B))
    calls: list[tuple] = []
    real = tasks.start_in_own_process

    def spied(fn, *args, **kwargs):
        calls.append((fn, kwargs.get("name"), threading.current_thread().name))
        return real(fn, *args, **kwargs)

    tasks.start_in_own_process = spied
    try:
        audit = stages.check_suppression_audit(ctx)
    finally:
        tasks.start_in_own_process = real
    # on the certificate's path the existence pass runs beside the verification, in a process of its own (the
    # pass itself is not replaced: the child runs the real one), started from the check's thread, and still blocks
    assert [(fn, name) for fn, name, _ in calls] == [(figures_at_lower_bound_one, "existence")]
    assert calls[0][2] == threading.current_thread().name
    assert not audit.passed
    failing = {(o.get("area_id"), o.get("failing")) for o in audit.offending}
    assert (cell_id(CELL_B), PROVEN_PRESENT) in failing
    assert (cell_id(CELL_B), "lower") not in failing  # the primary criterion alone would have let B through
    assert "1 withheld figures proven to hold someone" in audit.summary


@pytest.mark.slow
def test_suppression_audit_fails_closed_when_the_existence_process_dies(tmp_path, fixture_traces):
    """The existence pass's own process killed without a result (out of memory, a signal): the check raises and
    nothing is published; never a pass for want of the pass's verdict."""
    from support import jobs

    from spatial_release import tasks

    ctx = _lake_policy(tmp_path, fixture_traces, cell_id(CELL_B))
    real = tasks.start_in_own_process

    def killed(fn, *args, **kwargs):
        return real(jobs.killed, name=kwargs.get("name", "job"))  # the same road: a child that dies mid-job

    tasks.start_in_own_process = killed
    try:
        with pytest.raises(tasks.JobProcessEnded, match="existence: its process ended"):
            stages.check_suppression_audit(ctx)
    finally:
        tasks.start_in_own_process = real
    # negative control: with the process left alone the same check runs to its verdict
    assert not stages.check_suppression_audit(ctx).passed


@pytest.mark.slow
def test_structural_zeros_hold_passes_a_true_listed_zero(tmp_path, fixture_traces):
    ctx = _lake_policy(tmp_path, fixture_traces, cell_id((590_000, 4_508_000)))  # nobody there
    outcome = stages.check_structural_zeros(ctx)
    assert outcome.passed and outcome.figures == {"listed_zero_cells": 1, "conflicts": 0}
    assert all(o.passed for o in stages.run_guarantees(ctx))


def test_the_k_floor_summary_counts_structural_zeros_apart():
    """A structural zero published as 0 holds no unit: the passing summary does not count it among the cells
    that hold >= k, and names it. Negative control: the same zero cell with a unit in it fails."""
    from spatial_release.guarantees import check_k_floor

    key = {"bucket_start": pd.Timestamp("2018-01-01", tz="UTC")}
    cells = pd.DataFrame([{**key, "cell_id": "a", "n": 5}, {**key, "cell_id": "z", "n": 0}])
    margins = pd.DataFrame([{**key, "level": "total", "area_id": "total", "n": 5}])
    truth = cells.copy()
    outcome = check_k_floor(cells, margins, truth, margins, 3, ["z"], "n")
    assert outcome.passed
    assert (
        outcome.summary
        == "all 1 published non-zero cells and 1 margins hold >= 3 units; 1 listed structural zeros published as 0"
    )
    occupied = truth.assign(n=[5, 1])
    assert not check_k_floor(cells, margins, occupied, margins, 3, ["z"], "n").passed
