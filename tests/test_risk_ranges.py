"""The risk estimate over key sets held in ranges of units (risk.ranges): the same report, figure for figure,
as the estimate over the whole key sets (and so as the plain in-memory reference, support.key_sets), for
any cut of the units into ranges; through the risk stage when the window is over its row limit; and a
refusal, never a wrong figure, when a range's file is not what was written."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.fixture import uniqueness_policy_dict, write_policy
from support.key_sets import (
    generated_key_sets,
    generated_window,
    in_memory,
    naming_more,
    reference_estimate,
    same_report,
    zone_of_cells,
)
from support.releases import protected_candidate
from support.spies import counted

from spatial_release import stages
from spatial_release.ledger import Ledger
from spatial_release.policy import load_policy
from spatial_release.risk import RiskParams, kernels, ranges
from spatial_release.risk.estimator import KeySets, estimate_key_sets
from spatial_release.risk.keysets import window_key_sets
from spatial_release.stages import keys as keys_stage
from spatial_release.stages import risk as risk_stage


def test_the_uniforms_of_a_row_range_are_those_of_the_whole_stream():
    rows, seed = 1_000, 20180101
    generator = np.random.default_rng(seed)
    whole = [generator.random(rows) for _ in range(4)]
    for j in range(4):
        for start, end in ((0, 1), (0, 1_000), (17, 480), (999, 1_000), (480, 480)):
            np.testing.assert_array_equal(ranges._uniforms(seed, rows, j, start, end), whole[j][start:end])


PARAMS = [
    RiskParams(points=4, draws=8, seed=3),
    RiskParams(points=1, draws=3),
    RiskParams(points=3, draws=20, threshold=0.05),
]


@pytest.mark.slow
@pytest.mark.parametrize("params", PARAMS)
@pytest.mark.parametrize("range_rows", [1, 37, 2_000, 10**9])
def test_a_window_in_ranges_has_the_reference_figures(tmp_path, monkeypatch, params, range_rows):
    """Over the generated window of support.key_sets (three files, text and integer ids, a repeated
    (unit, key)), read into ranges of `range_rows` rows: one unit a range up to all units in one."""
    selects, frames, window, key_zone, population = generated_window(tmp_path, False)
    monkeypatch.setattr(ranges, "RANGE_ROWS", range_rows)
    held = window_key_sets(selects, zone_of_cells, frames, ranges_above=0)
    assert isinstance(held, ranges.KeyRanges)
    expected = min(window["unit"].nunique(), -(-len(window) // range_rows))
    assert len(held) == expected and sum(held.rows) == len(window)
    try:
        report = ranges.estimate_key_ranges(held, params, population)
    finally:
        held.close()
    assert not Path(held.folder.name).exists(), "the ranges' files outlive the estimate"
    same_report(report, reference_estimate(window, key_zone, params, population))
    assert report.units == window["unit"].nunique() and report.keys == window["key"].nunique()


@pytest.mark.parametrize("range_rows", [1, 50, 10**9])
def test_ranges_of_parts_naming_more_than_they_hold_have_the_whole_figures(monkeypatch, range_rows):
    """Ranges are cut as the coded pairs stream, so the units and keys no pair holds are found first (one
    more pass in DuckDB) and every code renumbered over the held ones: the report of the whole key sets."""
    frame = generated_key_sets(8, 90, True)
    zones = lambda cells: zone_of_cells(cells[cells != "nowhere"])  # noqa: E731
    params = RiskParams(points=3, draws=6, seed=5)
    whole = estimate_key_sets(in_memory(window_key_sets(["SELECT * FROM k"], zones, {"k": frame})), params)
    monkeypatch.setattr(ranges, "RANGE_ROWS", range_rows)
    held = window_key_sets([], zones, {"k": frame}, ranges_above=0, coded=[naming_more("k", "!first", "!key")])
    assert isinstance(held, ranges.KeyRanges) and held.units == frame["unit"].nunique()
    try:
        same_report(ranges.estimate_key_ranges(held, params), whole)
    finally:
        held.close()


def test_a_row_hint_chooses_the_road_and_never_a_figure(monkeypatch):
    """The risk stage hints how many rows the key sets hold (their files' metadata): over the limit they go
    to ranges without first streaming up to it. A hint that is wrong either way gives the same figures."""
    from spatial_release.risk import keysets

    frame = generated_key_sets(9, 60, True)
    params = RiskParams(points=2, draws=4, seed=9)
    whole = estimate_key_sets(in_memory(window_key_sets(["SELECT * FROM k"], zone_of_cells, {"k": frame})), params)
    streamed: list[int] = []
    monkeypatch.setattr(keysets, "_streamed", counted(keysets._streamed, streamed))
    for hint, limit, goes_by_ranges, streams in (
        (len(frame), len(frame) - 1, True, False),  # a true hint over the limit: straight to ranges
        (1, len(frame) - 1, True, True),  # under, wrongly: streamed until over the limit, then ranges
        (len(frame) + 5, len(frame) + 1, True, False),  # over, wrongly: ranges, though the rows would fit
        (len(frame), len(frame) + 1, False, True),  # a true hint under the limit: streamed, whole
    ):
        streamed.clear()
        held = window_key_sets(["SELECT * FROM k"], zone_of_cells, {"k": frame}, limit, rows_hint=hint)
        assert isinstance(held, ranges.KeyRanges) == goes_by_ranges and bool(streamed) == streams
        if isinstance(held, ranges.KeyRanges):
            try:
                same_report(ranges.estimate_key_ranges(held, params), whole)
            finally:
                held.close()
        else:
            same_report(estimate_key_sets(held, params), whole)


@pytest.mark.slow
def test_over_the_limit_key_sets_derived_from_the_work_area_go_through_a_key_set_file(tmp_path, fixture_traces):
    """With no file just written (the publish step re-estimating), one is written to a scratch folder of the
    work area, read in ranges and deleted: the ranges hold the whole key sets' figures."""
    policy = load_policy(write_policy(tmp_path, uniqueness_policy_dict(str(fixture_traces))))
    ctx = protected_candidate(policy, tmp_path)
    stages.run_risk(ctx, Ledger(tmp_path / "ledger", tmp_path / "releases"))
    params = RiskParams(points=3, draws=5, seed=2)
    whole = estimate_key_sets(in_memory(risk_stage.window_key_sets(ctx, None, [], [])), params)
    before = sorted(ctx.area.risk.iterdir())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ranges, "RANGE_ROWS", 7)
        patch.setattr(keys_stage, "released_key_source", lambda *args: pytest.fail("coded join over the limit"))
        held = risk_stage.window_key_sets(ctx, None, [], [], ranges_above=0)
    assert isinstance(held, ranges.KeyRanges) and len(held) > 1
    try:
        same_report(ranges.estimate_key_ranges(held, params), whole)
    finally:
        held.close()
    assert sorted(ctx.area.risk.iterdir()) == before  # the written file's scratch folder is gone
    # over the coded join's own limit but under the ranges': the same key sets, whole, from a written file
    coded = in_memory(risk_stage.window_key_sets(ctx, None, [], []))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(keys_stage, "CODED_UP_TO", 0)
        patch.setattr(keys_stage, "released_key_source", lambda *args: pytest.fail("coded join over its limit"))
        from_file = risk_stage.window_key_sets(ctx, None, [], [], ranges_above=10**9)
    assert isinstance(from_file, KeySets) and from_file.digest() == coded.digest()


@st.composite
def key_sets(draw) -> KeySets:
    units = draw(st.integers(1, 30))
    keys = draw(st.integers(1, 25))
    zone_of = np.array([f"z{draw(st.integers(0, 2))}" for _ in range(keys)], dtype=object)
    pairs = set()
    for u in range(units):
        held = draw(st.lists(st.integers(0, keys - 1), min_size=1, max_size=min(keys, 8)))
        pairs |= {(u, k) for k in held}
    unit_codes, key_codes = (np.array(c, dtype=np.int64) for c in zip(*sorted(pairs)))
    return KeySets.from_codes(unit_codes, key_codes, zone_of)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    sets=key_sets(),
    points=st.integers(1, 4),
    draws=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
    range_rows=st.integers(1, 60),
)
def test_any_cut_into_ranges_gives_the_whole_estimate(sets, points, draws, seed, range_rows):
    params = RiskParams(points=points, draws=draws, seed=seed)
    held = ranges.ranges_of(sets, range_rows)
    try:
        report = ranges.estimate_key_ranges(held, params, {"z0": 50.0})
    finally:
        held.close()
    same_report(report, estimate_key_sets(sets, params, {"z0": 50.0}))


def test_exact_counts_are_the_numbers_themselves_zero_included():
    """Per range a set may be held by no unit: the exact count is 0 there (the whole estimate's count is at
    least 1, the target), and the range's counts add up to the whole one."""
    sets = KeySets.from_codes(np.array([0, 0, 1, 2, 2]), np.array([0, 1, 1, 0, 1]), np.array(["z"] * 3, dtype=object))
    rows = np.array([[2, 0], [0, 1], [1, 0]])  # key 2 no unit holds
    whole = kernels.anonymity_counts(sets.key_offsets, sets.key_units, rows)
    exact = kernels.anonymity_counts(sets.key_offsets, sets.key_units, rows, exact=True)
    np.testing.assert_array_equal(whole, [1, 2, 2])
    np.testing.assert_array_equal(exact, [0, 2, 2])
    np.testing.assert_array_equal(
        kernels.anonymity_counts(sets.key_offsets, sets.key_units, rows[:, :1], exact=True), [0, 2, 3]
    )


def test_a_range_file_that_is_not_what_was_written_is_refused():
    sets = KeySets.from_codes(np.arange(6) // 2, np.arange(6) % 3, np.array(["z"] * 3, dtype=object))
    held = ranges.ranges_of(sets, 2)
    try:
        units_file, _ = held._files(1)
        with open(units_file, "ab") as handle:
            np.array([0], dtype=np.int32).tofile(handle)
        with pytest.raises(RuntimeError, match="range 1 of the key sets"):
            ranges.estimate_key_ranges(held, RiskParams(points=2, draws=2))
    finally:
        held.close()


def test_units_outside_the_ranges_are_refused_and_leave_no_files(tmp_path):
    bounds = ranges.range_bounds(3, 6, 2)
    batch = (np.array([0, 1, 3], dtype=np.int32), np.array([0, 0, 0], dtype=np.int32))
    made = []
    real = ranges.scratch_folder

    def spy(*args):
        made.append(real(*args))
        return made[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ranges, "scratch_folder", spy)
        with pytest.raises(ValueError, match="outside 0..2"):
            ranges.spill_ranges(iter([batch]), np.array(["z"], dtype=object), bounds, tmp_path)
    assert len(made) == 1 and Path(made[0].name).parent == tmp_path  # the files were there
    assert list(tmp_path.iterdir()) == []


def _forget_the_estimate(ctx) -> None:
    """Drop the estimate the work area's memo holds, so that the next assessment runs it again."""
    memo = ctx.memo()
    for name in (risk_stage.ESTIMATE, risk_stage.ESTIMATE_BY_INPUTS):
        memo.save(name, None, {})


@pytest.mark.slow
def test_the_risk_stage_over_its_row_limit_estimates_in_ranges_with_the_same_figures(tmp_path, monkeypatch, fixture_traces):
    policy = load_policy(write_policy(tmp_path, uniqueness_policy_dict(str(fixture_traces))))
    ctx = protected_candidate(policy, tmp_path)
    ledger = Ledger(tmp_path / "ledger", tmp_path / "releases")
    whole = stages.run_risk(ctx, ledger)
    _forget_the_estimate(ctx)  # no reuse: the estimate runs again
    seen = []
    real, real_source = risk_stage.estimate_key_ranges, keys_stage.released_key_source

    def spy(held, *args):
        seen.append((len(held), Path(held.folder.name)))
        return real(held, *args)

    monkeypatch.setattr(risk_stage, "RANGES_ABOVE", 0)
    monkeypatch.setattr(ranges, "RANGE_ROWS", 5)
    monkeypatch.setattr(risk_stage, "estimate_key_ranges", spy)
    # over the limit the key sets come from the file the step wrote, not the coded join (out of memory at 500 M)
    monkeypatch.setattr(keys_stage, "released_key_source", lambda *args: pytest.fail("coded join over the limit"))
    again = stages.assess_risk(ctx, ledger, ctx.area.unit_keys, keys_from_area=True)
    assert len(seen) == 1 and seen[0][0] > 1, "the estimate did not go by ranges"
    # the risk step itself, which holds this release's coded key sets (coded by the join), reads them back in
    # ranges too
    _forget_the_estimate(ctx)
    monkeypatch.setattr(keys_stage, "released_key_source", real_source)
    assert stages.run_risk(ctx, ledger).zones == whole.zones
    assert len(seen) == 2 and seen[1][0] > 1, "the risk step's estimate did not go by ranges"
    assert seen[0][1].parent == ctx.area.risk  # per-unit rows: in the work area, whose step lock sweeps them
    assert not seen[0][1].exists()
    assert again.zones == whole.zones
    assert (again.status, again.release_figure, again.units, again.keys) == (
        whole.status,
        whole.release_figure,
        whole.units,
        whole.keys,
    )


@pytest.mark.slow
def test_over_the_coded_limit_or_out_of_memory_the_risk_step_keeps_rows_and_gives_the_same_figures(
    tmp_path, monkeypatch, fixture_traces
):
    """The risk step keeps a coded key set file when this release's key sets fit `CODED_UP_TO` rows; over it,
    or when the coded join runs out of DuckDB's memory (as it did at 500 M pings), it keeps (unit, key, cell_id)
    rows instead, estimates from them, and the figures are the same. Negative control: under the limit the
    file is the coded kind."""
    import duckdb

    from spatial_release.risk import keysets

    policy = load_policy(write_policy(tmp_path, uniqueness_policy_dict(str(fixture_traces))))
    ctx = protected_candidate(policy, tmp_path)
    ledger = Ledger(tmp_path / "ledger", tmp_path / "releases")
    whole = stages.run_risk(ctx, ledger)
    assert keysets.coded_file_counts(ctx.area.unit_keys) is not None

    real_streamed, calls = keysets._streamed, []

    def out_of_memory_once(*args):  # the keeping's coded join runs out; the estimate's reading does not
        calls.append(1)
        if len(calls) == 1:
            raise duckdb.OutOfMemoryException("failed to allocate data of size 1.0 GiB")
        return real_streamed(*args)

    for name, value in (("CODED_UP_TO", 0), ("_streamed", out_of_memory_once)):
        _forget_the_estimate(ctx)  # no reuse: the estimate runs again
        with monkeypatch.context() as patch:
            patch.setattr(keys_stage if name == "CODED_UP_TO" else keysets, name, value)
            again = stages.run_risk(ctx, ledger)
        assert keysets.coded_file_counts(ctx.area.unit_keys) is None, name
        assert len(pd.read_parquet(ctx.area.unit_keys, columns=["unit", "key"]).drop_duplicates()) == sum(
            np.diff(in_memory(risk_stage.window_key_sets(ctx, None, [], [])).unit_offsets)
        )
        assert again.zones == whole.zones, name
        assert name == "CODED_UP_TO" or len(calls) > 1, "the coded join was not tried"
        assert (again.status, again.release_figure, again.units, again.keys) == (
            whole.status,
            whole.release_figure,
            whole.units,
            whole.keys,
        ), name
