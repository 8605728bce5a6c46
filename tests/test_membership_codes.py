"""The attacks' memberships coded on their own (`stages.attack.membership_codes`), once per context (the coarsening
loop assesses each candidate it tries against them), and numbered by `attack_inputs` over each candidate's
published areas and buckets. The view and the codes must be those the memberships and the candidate give when
read together (re-derived here from the files), a candidate that publishes an area or bucket no membership holds
included; codes read from a membership file that changed since must not be used; read in batches, they must be
the codes of the whole frame."""

from __future__ import annotations

import os
import shutil
from types import SimpleNamespace
from typing import cast

import numpy as np
import pandas as pd
import pytest
from support.releases import protected_advantage_city
from support.spies import counted

from spatial_release.stages import attack as attack_stage
from spatial_release.stages.attack import attack_inputs
from spatial_release.stages.context import CandidateTables, ReleaseContext


@pytest.fixture(scope="module")
def city(tmp_path_factory):
    return protected_advantage_city(tmp_path_factory.mktemp("membership-codes"), "membership_codes")


def _fresh(ctx: ReleaseContext) -> ReleaseContext:
    """A context of the same release with nothing kept (no codes read or prefetched)."""
    return ReleaseContext(ctx.policy, ctx.period, ctx.work_root)


def _expected(ctx: ReleaseContext, cells: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The units, buckets, areas and area names as the memberships and the published cells give them read
    together: buckets over the period's, the memberships' and the published ones; areas over both."""
    membership = pd.read_parquet(ctx.area.counts / "membership.internal.parquet")
    period = set(pd.to_datetime(ctx.buckets, utc=True))
    buckets = pd.DatetimeIndex(sorted(period | set(membership["bucket_start"]) | set(cells["bucket_start"])))
    names = np.array(sorted(set(membership["cell_id"]) | set(cells["cell_id"])), dtype=object)
    units = np.array(sorted(set(membership["unit"])), dtype=object)
    return (
        pd.Index(units).get_indexer(membership["unit"]),
        buckets.get_indexer(membership["bucket_start"]),
        pd.Index(names).get_indexer(membership["cell_id"]),
        names,
    )


def _assert_inputs(inputs, ctx: ReleaseContext, cells: pd.DataFrame) -> None:
    unit, step, area, names = _expected(ctx, cells)
    np.testing.assert_array_equal(inputs.unit, unit)
    np.testing.assert_array_equal(inputs.step, step)
    np.testing.assert_array_equal(inputs.area, area)
    assert inputs.view.areas == len(names)
    figure_area = pd.Index(names).get_indexer(cells["cell_id"])
    np.testing.assert_array_equal(inputs.view.figure_area, figure_area)


def _candidate_cells(ctx: ReleaseContext) -> pd.DataFrame:
    cells = ctx.candidate_tables().cells
    return cells.rename(columns={ctx.policy.count_column: "n"})[["cell_id", "bucket_start", "n"]]


def test_kept_codes_give_the_view_read_together(city):
    ctx = _fresh(city)
    attack_inputs(ctx, ctx.risk_zones)  # the codes read and kept
    inputs = attack_inputs(ctx, ctx.risk_zones)
    _assert_inputs(inputs, ctx, _candidate_cells(ctx))
    fresh = attack_inputs(_fresh(city), city.risk_zones)
    for name in ("unit", "step", "area"):
        got, want = getattr(inputs, name), getattr(fresh, name)
        assert got.dtype == want.dtype and np.array_equal(got, want)
    assert np.array_equal(inputs.view.figure_step, fresh.view.figure_step)


def test_a_published_area_and_bucket_no_membership_holds_renumber_the_codes(city):
    ctx = _fresh(city)
    attack_inputs(ctx, ctx.risk_zones)  # the codes kept, of the memberships alone
    tables = ctx.candidate_tables()
    cells = tables.cells.copy()
    extra = cells.iloc[[0]].copy()
    # a cell far west of the city (its name sorts before every real one) and a bucket before the period: both
    # shift every code
    extra["cell_id"] = "1000mE100000N4509000"
    assert extra["cell_id"].iloc[0] < cells["cell_id"].min()
    extra["bucket_start"] = extra["bucket_start"] - pd.Timedelta(days=400)
    ctx.hold_candidate(CandidateTables(pd.concat([extra, cells], ignore_index=True), tables.margins, tables.count_column))
    try:
        inputs = attack_inputs(ctx, ctx.risk_zones)
        shown = _candidate_cells(ctx)
        _assert_inputs(inputs, ctx, shown)
        assert inputs.area.min() >= 1 and inputs.step.min() >= 1  # the codes did move: the test proves something
    finally:
        ctx.hold_candidate(None)


def test_codes_of_a_membership_file_changed_since_are_read_again(city, tmp_path):
    ctx = _fresh(city)
    path = ctx.area.counts / "membership.internal.parquet"
    saved = tmp_path / "membership.parquet"
    shutil.copy2(path, saved)
    calls: list[int] = []
    try:
        attack_inputs(ctx, ctx.risk_zones)  # the codes read and kept
        membership = pd.read_parquet(path)
        fewer = membership[membership["unit"] != membership["unit"].iloc[0]]
        fewer.to_parquet(path, index=False)
        os.utime(path, ns=(1, 1))  # another modification time, whatever the clock's resolution
        real = attack_stage.membership_codes
        attack_stage.membership_codes = counted(real, calls)
        try:
            inputs = attack_inputs(ctx, ctx.risk_zones)
        finally:
            attack_stage.membership_codes = real
        assert calls == [1]
        assert len(inputs.unit) == len(fewer)
        _assert_inputs(inputs, ctx, _candidate_cells(ctx))
    finally:
        shutil.copy2(saved, path)


def test_the_negative_control_unchanged_codes_are_not_read_again(city):
    ctx = _fresh(city)
    calls: list[int] = []
    real = attack_stage.membership_codes
    attack_stage.membership_codes = counted(real, calls)
    try:
        first = attack_inputs(ctx, ctx.risk_zones)
        second = attack_inputs(ctx, ctx.risk_zones)
    finally:
        attack_stage.membership_codes = real
    assert calls == [1]
    assert first.unit is second.unit


def test_a_failed_read_fails_where_the_codes_are_asked_for(city, tmp_path):
    ctx = ReleaseContext(city.policy, city.period, tmp_path / "work")
    shutil.copytree(city.area.root, ctx.area.root, dirs_exist_ok=True)
    (ctx.area.counts / "membership.internal.parquet").write_bytes(b"not parquet")
    for _ in range(2):  # and again from what the context keeps
        with pytest.raises(Exception, match="(?i)parquet|magic"):
            attack_inputs(ctx, ctx.risk_zones)


def _membership_file(folder, units: list) -> ReleaseContext:
    """A membership file of `units` (repeated, shuffled) over a few buckets and cells; a context that reads it."""
    rng = np.random.default_rng(4)
    n = 200
    frame = pd.DataFrame(
        {
            "unit": [units[i] for i in rng.integers(0, len(units), n)],
            "bucket_start": pd.to_datetime("2018-01-01", utc=True) + pd.to_timedelta(rng.integers(0, 30, n) * 3600, "s"),
            "cell_id": [f"1000mE{578000 + 1000 * int(i)}N4509000" for i in rng.integers(0, 12, n)],
        }
    )
    frame.to_parquet(folder / "membership.internal.parquet", index=False)
    return cast(ReleaseContext, SimpleNamespace(area=SimpleNamespace(counts=folder)))  # what the coding reads


@pytest.mark.parametrize("units", [[9, 3, 12, 40, 7], ["d-9", "d-10", "b", "Ä", "a"]], ids=["integer units", "text units"])
def test_the_codes_read_in_batches_are_the_frames(tmp_path, monkeypatch, units):
    ctx = _membership_file(tmp_path, units)
    monkeypatch.setattr(attack_stage, "MEMBERSHIP_BATCH", 7)  # many batches, each with its own dictionary
    streamed = attack_stage.membership_codes(ctx)
    monkeypatch.setattr(attack_stage, "_streamed_codes", lambda path: None)
    frame = attack_stage.membership_codes(ctx)
    for name in ("unit", "step", "area"):
        got, want = getattr(streamed, name), getattr(frame, name)
        assert got.dtype == want.dtype and np.array_equal(got, want), name
    assert streamed.unit_names.tolist() == frame.unit_names.tolist()
    assert [type(u) for u in streamed.unit_names] == [type(u) for u in frame.unit_names]
    assert streamed.names.tolist() == frame.names.tolist()
    assert list(streamed.buckets) == list(frame.buckets)
    assert streamed.source is not None and streamed.source == frame.source


def test_a_missing_value_is_refused_naming_the_file_row_and_column(tmp_path):
    ctx = _membership_file(tmp_path, [1, 2, 3])
    path = tmp_path / "membership.internal.parquet"
    frame = pd.read_parquet(path)
    frame["cell_id"] = frame["cell_id"].astype(object)
    frame.loc[3, "cell_id"] = None
    frame.to_parquet(path, index=False)
    with pytest.raises(ValueError, match=r"membership.internal.parquet: row 3: no cell_id"):
        attack_stage.membership_codes(ctx)
