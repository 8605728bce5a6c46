"""The coarsening loop hands the assessment the key sets it has just coded and written (`stages.keys.KeptKeys`)
instead of the assessment reading the file back. They must be what reading the file gives, array by array; and
they must not be taken for a file that is not the one they were written to, or that changed since."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from support.releases import protected_advantage_city

from spatial_release.fileio import sha256_file
from spatial_release.risk.advantage import AdvantageReport
from spatial_release.risk.landscape import load_landscape
from spatial_release.stages import advantage as advantage_stage
from spatial_release.stages.context import ReleaseContext, risk_spec
from spatial_release.stages.keys import KeptKeys, keep_released_keys, write_ladder_buckets


@pytest.fixture(scope="module")
def kept_city(tmp_path_factory):
    """200 persons over 3 weeks, 1 km cells x 1 week, 4 km risk zones, protected, its key sets kept."""
    ctx = protected_advantage_city(tmp_path_factory.mktemp("held-key-sets"), "held_key_sets", seed=11)
    kept = keep_released_keys(ctx, write_ladder_buckets(ctx))
    assert kept is not None  # a coded file: a few thousand rows
    return ctx, kept


def _figures(report: AdvantageReport) -> dict:
    """The report as saved, but for the time it took."""
    data = report.to_json()
    data.pop("seconds")
    return data


def _assessed(ctx: ReleaseContext, held: KeptKeys | None, monkeypatch) -> AdvantageReport:
    """The candidate's whole assessment, computed (no saved report read), with `held` handed over."""
    monkeypatch.setattr(advantage_stage, "_saved_report", lambda memo, name, digest: None)
    landscape, _ = load_landscape(ctx.policy.resolve(risk_spec(ctx.policy).landscape))
    return advantage_stage.candidate_advantage(ctx, landscape, ctx.area.unit_keys, held=held)


def test_the_kept_key_sets_are_what_reading_their_file_gives(kept_city):
    ctx, kept = kept_city
    path = ctx.area.unit_keys
    assert kept.file == path and kept.sha256 == sha256_file(path)
    sets, names, unit_names = kept.arrays()
    read, read_names, read_units = advantage_stage.read_key_sets(path, ctx.risk_zones)
    assert sets.units > 50 and sets.keys > 20  # the fixture publishes: else nothing is compared
    for field in ("key_zone", "unit_offsets", "unit_keys", "key_offsets", "key_units"):
        mine, theirs = getattr(sets, field), getattr(read, field)
        assert mine.dtype == theirs.dtype and np.array_equal(mine, theirs), field
    assert sets.digest() == read.digest()
    for mine, theirs in ((names, read_names), (unit_names, read_units)):
        assert mine.dtype == theirs.dtype == object and mine.tolist() == theirs.tolist()
    assert kept.serves(path, sha256_file(path), ctx.risk_zones)


def test_an_assessment_on_the_kept_key_sets_is_the_one_on_their_file(kept_city, monkeypatch):
    ctx, kept = kept_city
    read = advantage_stage.read_key_sets
    reads: list[object] = []

    def counted_read(*args):
        reads.append(args)
        return read(*args)

    monkeypatch.setattr(advantage_stage, "read_key_sets", counted_read)
    handed = _assessed(ctx, kept, monkeypatch)
    assert reads == []  # the file was not read back
    from_file = _assessed(ctx, None, monkeypatch)
    assert len(reads) == 1
    assert handed.zones and _figures(handed) == _figures(from_file)


def test_kept_key_sets_are_not_taken_for_another_file_a_changed_one_or_other_zones(kept_city, monkeypatch):
    """Negative controls: key sets whose zones were changed (what a stale hand-over of another candidate would
    look like) give other figures when taken; they are not taken once the file's digest, its path or the
    zoning differ from those they were kept with: the file is read instead."""
    ctx, kept = kept_city
    path, digest = ctx.area.unit_keys, sha256_file(ctx.area.unit_keys)
    stale_sets = replace(kept.sets, key_zone=np.full(kept.sets.keys, "elsewhere", dtype=object))
    stale = replace(kept, coded=replace(kept.coded, sets=stale_sets))
    from_file = _figures(_assessed(ctx, None, monkeypatch))
    # the control: taken, these arrays change the figures, so a test that they are not taken can fail
    assert _figures(_assessed(ctx, stale, monkeypatch)) != from_file
    assert not stale.serves(path.with_name("other.parquet"), digest, ctx.risk_zones)
    assert not stale.serves(path, "0" * 64, ctx.risk_zones)
    assert not stale.serves(path, digest, lambda cells: ctx.risk_zones(cells))
    for wrong in (replace(stale, sha256="0" * 64), replace(stale, file=path.with_name("other.parquet"))):
        assert _figures(_assessed(ctx, wrong, monkeypatch)) == from_file


def test_the_true_zones_are_every_zone_each_unit_was_counted_in(kept_city):
    """`true_zones` (joined in DuckDB) against a plain reading of the memberships: the same (unit, zone) pairs,
    in (unit, zone) order, units coded as the key sets name them. Some are zones without a published key of
    the unit (else the gate's entries would not need them)."""
    ctx, kept = kept_city
    sets, _, unit_names = kept.arrays()
    unit, zone = advantage_stage.true_zones(ctx, unit_names, ctx.risk_zones)
    rows = pd.read_parquet(ctx.area.counts / "membership.internal.parquet", columns=["unit", "cell_id"])
    rows = rows.drop_duplicates()
    zones = ctx.risk_zones(pd.Series(rows["cell_id"].astype(str).unique()))
    code = {name: i for i, name in enumerate(unit_names)}
    expected = sorted({(code[str(u)], zones[str(c)]) for u, c in zip(rows["unit"], rows["cell_id"]) if str(u) in code})
    assert list(zip(unit.tolist(), zone.tolist())) == expected
    published = {
        (u, sets.key_zone[k])
        for u in range(sets.units)
        for k in sets.unit_keys[sets.unit_offsets[u] : sets.unit_offsets[u + 1]]
    }
    assert set(expected) - published and published <= set(expected)
