"""The attacks' memberships coded on their own (`stages.attack.membership_codes`), before the candidate exists: the
protection step codes them beside its first suppression, and `attack_inputs` numbers them over the candidate's
published areas and buckets. The view and the codes must be those the memberships and the candidate give when
read together (re-derived here from the files), a candidate that publishes an area or bucket no membership holds
included; codes read from a membership file that changed since must not be used."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pandas as pd
import pytest
from support.releases import protected_advantage_city
from support.spies import counted

from spatial_release.stages import attack as attack_stage
from spatial_release.stages.attack import attack_inputs, prefetch_membership_codes
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


def test_prefetched_codes_give_the_view_read_together(city):
    ctx = _fresh(city)
    prefetch_membership_codes(ctx, [(None, None)])
    inputs = attack_inputs(ctx, ctx.risk_zones)
    _assert_inputs(inputs, ctx, _candidate_cells(ctx))
    fresh = attack_inputs(_fresh(city), city.risk_zones)
    for name in ("unit", "step", "area"):
        got, want = getattr(inputs, name), getattr(fresh, name)
        assert got.dtype == want.dtype and np.array_equal(got, want)
    assert np.array_equal(inputs.view.figure_step, fresh.view.figure_step)


def test_a_published_area_and_bucket_no_membership_holds_renumber_the_codes(city):
    ctx = _fresh(city)
    prefetch_membership_codes(ctx, [(None, None)])
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
        prefetch_membership_codes(ctx, [(None, None)])
        attack_inputs(ctx, ctx.risk_zones)  # the prefetched codes, read
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
        prefetch_membership_codes(ctx, [(None, None)])
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
    prefetch_membership_codes(ctx, [(None, None)])
    with pytest.raises(Exception, match="(?i)parquet|magic"):
        attack_inputs(ctx, ctx.risk_zones)
