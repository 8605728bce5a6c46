"""The trajectory recovery in the advantage gate's portfolio. The recovery reads the counts, so a unit without a
boundary key can still make a difference: re-running the recovery on the release without the target (the same
published pattern, the target's counts and bucket totals one lower) moves its output. The gate bounds that
advantage by the recovery's success with the release, for every unit. Here the counterfactuals are re-run for
sampled targets and everything checked is re-derived from the city, never read from the gate's report alone."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from spatial_release.risk.advantage import (
    MEMBERSHIP,
    RECOVERY,
    AdvantageParams,
    RecoverySuccess,
    assess_advantage,
    quantile_higher,
)
from spatial_release.risk.attack import AttackParams, ReleaseView, attack_risk, without_unit
from spatial_release.risk.estimator import KeySets

K = 5
SIDE = 4  # a dense grid: no count at exactly K, so the membership attacker puts no unit at 1
START = pd.Timestamp("2018-01-01", tz="UTC")


def _city(units: int, days: int, seed: int):
    """Units at home at night and at work in the day, with a 3-hour errand somewhere on some days, hourly on a
    SIDE x SIDE grid: (unit, step, area) of every distinct point."""
    rng = np.random.default_rng(seed)
    home = rng.integers(0, SIDE * SIDE, units)
    work = np.clip(home + rng.integers(-7, 8, units), 0, SIDE * SIDE - 1)
    leave, back = rng.integers(6, 11, units), rng.integers(16, 21, units)
    t = np.arange(days * 24)
    at_work = ((t[None, :] % 24) >= leave[:, None]) & ((t[None, :] % 24) < back[:, None])
    cells = np.where(at_work, work[:, None], home[:, None])
    for u in range(units):
        for d in range(days):
            if rng.random() < 0.3:
                h = d * 24 + int(rng.integers(10, 20))
                cells[u, h : h + 3] = rng.integers(0, SIDE * SIDE)
    unit = np.repeat(np.arange(units), len(t))
    step, area = np.tile(t, units), cells.ravel()
    return unit, step, area, len(t)


def _view(unit, step, area, steps, drop_unit: int | None = None) -> ReleaseView:
    """The release of the (cell, hour) counts >= K with the hourly totals; `drop_unit`: the counterfactual of
    the same pattern with that unit's counts and totals one lower."""
    n = SIDE * SIDE
    count = np.bincount(step * n + area, minlength=steps * n)
    shown = np.flatnonzero(count >= K)
    totals = np.bincount(step, minlength=steps)
    figures = count[shown].copy()
    if drop_unit is not None:
        mine = unit == drop_unit
        at = np.searchsorted(shown, step[mine] * n + area[mine])
        hit = (at < len(shown)) & (shown[np.minimum(at, len(shown) - 1)] == step[mine] * n + area[mine])
        figures[at[hit]] -= 1
        totals = totals - np.bincount(step[mine], minlength=steps)
    xy = np.array([(i % SIDE * 250.0, i // SIDE * 250.0) for i in range(n)])
    return ReleaseView(steps, xy, shown // n, shown % n, figures, totals, True, day_lag=24)


ZONES = np.array([f"q{int(i % SIDE >= SIDE / 2)}{int(i // SIDE >= SIDE / 2)}" for i in range(SIDE * SIDE)], dtype=object)


def _key_sets(unit, step, area, steps):
    """The published key sets as the gate reads them (unit codes 0..U-1 in the city's order)."""
    n = SIDE * SIDE
    key = step * n + area
    count = np.bincount(key, minlength=steps * n)
    shown = count[key] >= K
    names = np.array(
        [
            f"c{a}@{(START + pd.Timedelta(hours=int(s))).strftime('%Y-%m-%dT%H:%MZ')}"
            for s, a in zip(step[shown], area[shown])
        ],
        dtype=object,
    )
    key_codes, keys = pd.factorize(pd.Series(names), sort=True)
    zone_of_key = pd.Series(ZONES[area[shown]]).groupby(key_codes).first().to_numpy(dtype=object)
    sets = KeySets.from_codes(unit[shown].astype(np.int64), key_codes.astype(np.int64), zone_of_key)
    key_count = pd.Series(count[key[shown]]).groupby(key_codes).first().to_numpy()
    return sets, np.asarray(keys, dtype=object), key_count


@pytest.mark.slow
def test_the_recovery_gains_on_units_without_a_boundary_key_and_the_gate_bounds_it():
    unit, step, area, steps = _city(600, days=2, seed=7)
    params = AttackParams(draws=3)
    view = _view(unit, step, area, steps)
    base = attack_risk(view, unit, step, area, ZONES[np.arange(SIDE * SIDE)], params)
    assert base.targets is not None
    t_unit, t_zone, t_success = base.targets
    recovery = RecoverySuccess(t_unit.astype(np.int64), t_zone, t_success)
    sets, names, key_count = _key_sets(unit, step, area, steps)
    adv = AdvantageParams(points=params.points, draws=params.draws, seed=params.seed)
    # every zone each unit was truly in (the stage reads them from the memberships)
    true = pd.DataFrame({"u": unit, "zone": ZONES[area]}).drop_duplicates()
    hidden = (true["u"].to_numpy(np.int64), true["zone"].to_numpy(dtype=object))
    with_recovery = assess_advantage(sets, names, key_count, K, adv, 0.05, None, hidden, recovery)
    without = assess_advantage(sets, names, key_count, K, adv, 0.05, None, hidden)

    # re-derived: which units hold a published key at exactly K (the membership attacker's 1s)
    n = SIDE * SIDE
    counts = np.bincount(step * n + area, minlength=steps * n)
    boundary = np.zeros(unit.max() + 1, dtype=bool)
    boundary[np.unique(unit[counts[step * n + area] == K])] = True

    # the counterfactual, re-run for the targets without a boundary key the recovery links best (where a gain
    # can show: a target it never links cannot lose anything without itself)
    by_success = pd.Series(t_success).groupby(t_unit).max()
    chosen = [u for u in by_success.sort_values(ascending=False, kind="stable").index if not boundary[u]][:10]
    gains = []
    for target in chosen:
        cf = attack_risk(_view(unit, step, area, steps, int(target)), unit, step, area, ZONES, params)
        assert cf.targets is not None
        c_unit, c_zone, c_success = cf.targets
        for zone in np.unique(t_zone[t_unit == target]):
            w = float(t_success[(t_unit == target) & (t_zone == zone)][0])
            wo = float(c_success[(c_unit == target) & (c_zone == zone)][0])
            gains.append((zone, w - wo, w))
    assert any(g > 0 for _, g, _ in gains), "the recovery should gain on some unit without a boundary key"
    assert not boundary.any()  # so without the recovery the gate would read 0 everywhere
    assert all(z.advantage_ucb == 0.0 for z in without.zones)
    assert any(z.advantage_ucb > 0.0 and z.strongest == RECOVERY for z in with_recovery.zones)
    # the per-unit bound the gate reads is never below a measured gain
    assert all(g <= w + 1e-12 for _, g, w in gains)

    for zone in with_recovery.zones:
        # re-derived per zone: the quantile over every target of max(membership, recovery success with)
        mine = t_zone == zone.zone
        bound = np.maximum(boundary[t_unit[mine]].astype(float), t_success[mine])
        assert zone.advantage_ucb >= quantile_higher(bound, 0.95) - 1e-9
        assert zone.success_with >= quantile_higher(t_success[mine], 0.95) - 1e-9
        assert zone.exposed == int((bound > 0.05).sum())
        old = next(z for z in without.zones if z.zone == zone.zone)
        assert zone.advantage_ucb >= old.advantage_ucb  # the recovery only adds to the bound
        if zone.advantage_ucb > old.advantage_ucb:
            assert zone.strongest == RECOVERY
        else:
            assert zone.strongest != RECOVERY or zone.advantage_ucb == 0.0 or old.strongest == MEMBERSHIP


def test_the_recovery_bound_falls_when_the_release_is_coarser():
    """Coarser in time (6-hour buckets from the same city) is never riskier to the recovery's bound."""
    unit, step, area, steps = _city(600, days=2, seed=7)
    params = AttackParams(draws=3)
    fine = attack_risk(_view(unit, step, area, steps), unit, step, area, ZONES, params)
    coarse_step = step // 6
    frame = pd.DataFrame({"u": unit, "s": coarse_step, "a": area}).drop_duplicates()
    cu, cs, ca = (frame[c].to_numpy() for c in ("u", "s", "a"))
    view = replace(_view(cu, cs, ca, steps // 6), day_lag=4)
    coarse = attack_risk(view, cu, cs, ca, ZONES, params)
    assert fine.targets is not None and coarse.targets is not None
    assert quantile_higher(coarse.targets[2], 0.95) <= quantile_higher(fine.targets[2], 0.95)


@pytest.mark.slow
def test_the_release_without_a_target_keeps_the_pattern_and_lowers_its_figures():
    """`without_unit` (what the gate re-runs the recovery on) equals the release re-counted without the target
    when its removal withholds nothing, and linking only the target gives it the same success."""
    unit, step, area, steps = _city(600, days=2, seed=7)
    view = _view(unit, step, area, steps)
    params = AttackParams(draws=3)
    full = attack_risk(view, unit, step, area, ZONES, params)
    assert full.targets is not None
    for target in (3, 141):
        expected = _view(unit, step, area, steps, drop_unit=target)
        got = without_unit(view, unit, step, area, target)
        assert np.array_equal(got.figure_count, expected.figure_count)
        assert np.array_equal(got.totals, expected.totals)
        assert (got.figure_count != view.figure_count).sum() == len(
            np.intersect1d(
                step[unit == target] * SIDE * SIDE + area[unit == target],
                view.figure_step * SIDE * SIDE + view.figure_area,
            )
        )
        alone = attack_risk(view, unit, step, area, ZONES, params, only=np.array([target]))
        assert alone.targets is not None
        mine = full.targets[0] == target
        assert np.allclose(alone.targets[2][alone.targets[0] == target], full.targets[2][mine])
        assert not alone.targets[2][alone.targets[0] != target].any()  # the others are not linked


def test_the_measured_targets_are_bounded_by_a_count_of_work_not_by_time():
    from types import SimpleNamespace

    from spatial_release.stages.advantage import MEASURED_TARGETS, MEASURED_WORK, measured_targets

    small = [(SimpleNamespace(unit=np.zeros(1_000)), None)] * 3
    assert measured_targets(small, 7) == 7
    assert measured_targets(small, 10_000) == MEASURED_TARGETS
    big = [(SimpleNamespace(unit=np.zeros(MEASURED_WORK // 4)), None)]
    assert measured_targets(big, 50) == 4  # 10 M pings' memberships allow a few re-runs, never 100


def test_the_recovery_runs_only_where_it_can_change_the_decision():
    """Every zone over the ceiling by the membership attacker alone: the release is refused (or climbs) whatever
    the recovery finds, so it is not run, and the report says so; otherwise it runs."""
    calls: list[int] = []

    def provider(targets) -> RecoverySuccess:
        calls.append(1)
        return RecoverySuccess(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object), np.zeros(0), None, 0)

    names = np.array(["c0@2018-01-01T00:00Z"], dtype=object)
    zone = np.array(["z"], dtype=object)
    for units, expect_run in ((K, False), (2 * K, True)):  # one key at exactly K (all boundary), one at 2K
        sets = KeySets.from_codes(np.arange(units, dtype=np.int64), np.zeros(units, dtype=np.int64), zone)
        calls.clear()
        report = assess_advantage(sets, names, np.array([units]), K, AdvantageParams(), 0.05, None, None, provider)
        assert bool(calls) == expect_run
        assert report.recovery.startswith("run on every unit" if expect_run else "not run")
        worst = report.worst()
        assert worst is not None and (worst.gated() > 0.05) != expect_run


@pytest.mark.slow
def test_linking_a_sample_of_targets_gives_each_the_success_it_has_when_every_unit_is_linked():
    """The gate links sampled (unit, zone) targets and matches only the trajectories their knowledge can pick;
    each sampled target's success must equal the one it gets when every unit is linked and every trajectory
    matched, and the others are not linked. Half the cells withheld makes withheld anchors; with the totals of
    every other hour withheld too, some anchors are held by no trajectory, so the guess among all of them (and
    the trajectories it reads) is exercised."""
    unit, step, area, steps = _city(300, days=2, seed=11)
    sparse = _sparse_view(unit, step, area, steps)
    hidden_totals = replace(sparse, totals=np.where(np.arange(sparse.steps) % 2 == 0, -1, sparse.totals))
    for view in (_view(unit, step, area, steps), sparse, hidden_totals):
        params = AttackParams(draws=3)
        full = attack_risk(view, unit, step, area, ZONES, params)
        assert full.targets is not None
        rng = np.random.default_rng(3)
        pick = np.sort(rng.choice(len(full.targets[0]), 40, replace=False))
        chosen = (full.targets[0][pick], full.targets[1][pick])
        part = attack_risk(view, unit, step, area, ZONES, params, targets=chosen)
        assert part.targets is not None
        index = pd.MultiIndex.from_arrays([part.targets[0], part.targets[1].astype(str)])
        got = pd.Series(part.targets[2], index=index)
        expected = pd.Series(
            full.targets[2], index=pd.MultiIndex.from_arrays([full.targets[0], full.targets[1].astype(str)])
        )
        wanted = pd.MultiIndex.from_arrays([chosen[0], chosen[1].astype(str)])
        assert np.allclose(got.reindex(wanted).to_numpy(), expected.reindex(wanted).to_numpy())
        assert expected.reindex(wanted).to_numpy().any()  # a test of equal zeros would prove nothing
        assert not got.drop(wanted).to_numpy().any()  # the others are not linked


def _sparse_view(unit, step, area, steps) -> ReleaseView:
    """Half of the cells withheld at random (a pattern with withheld anchors), totals published."""
    view = _view(unit, step, area, steps)
    keep = np.random.default_rng(5).random(len(view.figure_area)) < 0.5
    return replace(
        view, figure_step=view.figure_step[keep], figure_area=view.figure_area[keep], figure_count=view.figure_count[keep]
    )
