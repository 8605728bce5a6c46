"""Codes held through an assessment are 32-bit where they fit (`arrays.narrow_codes`, `risk.attack._sets`): the
same values, half the memory. The linkage on 32-bit key sets must give every target the same figure, to the bit,
as on 64-bit ones; codes that do not fit must stay as they are."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.attack_city import regular_city

from spatial_release.arrays import narrow_codes
from spatial_release.risk import attack
from spatial_release.risk.attack import AttackParams, attack_risk, recover_trajectories


@given(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=50))
def test_codes_that_fit_become_int32_with_the_same_values(values):
    codes = np.asarray(values, dtype=np.int64)
    narrow = narrow_codes(codes)
    assert narrow.dtype == np.int32
    assert np.array_equal(narrow, codes)


@pytest.mark.parametrize("outside", [2**31, -(2**31) - 1, 2**40])
def test_codes_that_do_not_fit_stay_as_they_are(outside):
    codes = np.array([0, 5, outside], dtype=np.int64)
    kept = narrow_codes(codes)
    assert kept.dtype == np.int64 and np.array_equal(kept, codes)


def test_a_recovery_holds_32_bit_points():
    view, *_ = regular_city(40, 8, 3, 3)
    recovered = recover_trajectories(view, AttackParams(points=3, draws=4))
    assert len(recovered.traj) and all(a.dtype == np.int32 for a in (recovered.traj, recovered.step, recovered.area))


def _linkage(view, unit, step, area, zones):
    report = attack_risk(view, unit, step, area, zones, AttackParams(points=3, draws=4, seed=7))
    return report.targets, [(z.zone, z.units, z.linkage, z.membership, z.accuracy) for z in report.zones]


@pytest.mark.parametrize("plant", [False, True])
def test_the_linkage_on_32_bit_codes_is_the_linkage_on_64_bit_ones(monkeypatch, plant):
    view, unit, step, area, zones = regular_city(60, 10, 4, 3, plant=plant)
    narrow = _linkage(view, narrow_codes(unit), narrow_codes(step), narrow_codes(area), zones)
    held = attack._sets(unit, step * 10 + area % 10, int(unit.max()) + 1, 10 * view.steps, np.zeros(10 * view.steps))
    assert held.unit_keys.dtype == np.int32 and held.key_units.dtype == np.int32
    monkeypatch.setattr(
        attack, "NARROW_BELOW", 0
    )  # every key set of the linkage held as 64-bit codes, fed 64-bit memberships
    wide_sets = attack._sets(unit, step * 10 + area % 10, int(unit.max()) + 1, 10 * view.steps, np.zeros(10 * view.steps))
    assert wide_sets.unit_keys.dtype == np.int64 and wide_sets.key_units.dtype == np.int64
    wide = _linkage(view, unit.astype(np.int64), step.astype(np.int64), area.astype(np.int64), zones)
    (u1, z1, s1), zones1 = narrow
    (u2, z2, s2), zones2 = wide
    assert np.array_equal(u1, u2) and np.array_equal(z1, z2)
    assert np.array_equal(s1, s2)  # to the bit
    assert zones1 == zones2
    assert max(s1) > 0  # a linkage that finds someone: the comparison is not of two empty reports
