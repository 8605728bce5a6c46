"""Best matches when only the sampled targets' ties are read (`kernels.targets_best_slice`, what the advantage
gate's recovery linkage runs): every trajectory whose best matches tie a target must get every pair, shared count,
best Jaccard and precision the whole walk gives it (`kernels.best_slice`, itself tested against a reference in
tests/test_kernels.py); a trajectory it drops must have no target among its ties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.matching import pair_key_sets as _key_sets

from spatial_release.risk import kernels
from spatial_release.risk.attack import best_matches
from spatial_release.risk.estimator import KeySets


def _check(targeted, whole, targets: np.ndarray, n_units: int) -> None:
    """Assert that `targeted` keeps exactly what the targets' ties need of `whole` (the same slice's arrays)."""
    codes, shared, top, precision = targeted
    w_codes, w_shared, w_top, w_precision = whole
    n = max(n_units, 1)
    is_target = np.zeros(n, dtype=bool)
    is_target[targets] = True
    needed = np.unique(w_codes[is_target[w_codes % n]] // n)
    walked = np.flatnonzero(~np.isnan(top))
    assert np.isin(needed, walked).all(), "a trajectory whose ties hold a target was dropped"
    keep = np.isin(w_codes // n, walked)
    np.testing.assert_array_equal(codes, w_codes[keep])
    np.testing.assert_array_equal(shared, w_shared[keep])
    np.testing.assert_array_equal(top[walked], w_top[walked])
    np.testing.assert_array_equal(precision[walked], w_precision[walked])
    assert np.isnan(precision[np.isnan(top)]).all()


def _both(rec: KeySets, truth: KeySets, hidden: np.ndarray, targets: np.ndarray):
    sets = kernels.MatchSets(truth.unit_offsets, truth.unit_keys, truth.key_offsets, truth.key_units)
    postings = kernels.TargetPostings(sets, targets)
    end = rec.units
    targeted = kernels.targets_best_slice(rec.unit_offsets, rec.unit_keys, sets, hidden, postings, 0, end)
    whole = kernels.best_slice(
        rec.unit_offsets, rec.unit_keys, truth.key_offsets, truth.key_units, truth.unit_offsets, hidden, 0, end
    )
    return targeted, whole


pair_sets = st.sets(st.tuples(st.integers(0, 11), st.integers(0, 24)), max_size=150)


@pytest.mark.parametrize("round_keys", [1, 2, 50])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rec=pair_sets, truth=pair_sets, seed=st.integers(0, 2**16))
def test_the_targets_ties_are_those_of_the_whole_walk(rec, truth, seed, round_keys, monkeypatch):
    monkeypatch.setattr(kernels, "TRAJECTORY_ROUND_KEYS", round_keys)  # 1 and 2: the rounds and checks run
    rng = np.random.default_rng(seed)
    hidden = rng.random(25) < 0.3
    targets = np.flatnonzero(rng.random(12) < 0.3)
    rec_sets, truth_sets = _key_sets(rec, 12, 25), _key_sets(truth, 12, 25)
    targeted, whole = _both(rec_sets, truth_sets, hidden, targets)
    _check(targeted, whole, targets, 12)


def _dense_city(seed: int, n_traj: int = 60, n_units: int = 300, n_keys: int = 2000) -> tuple[KeySets, KeySets]:
    """Trajectories of 100-400 keys, each copied with noise from a unit: every size the rounds see."""
    rng = np.random.default_rng(seed)
    unit_sets = [np.unique(rng.integers(0, n_keys, rng.integers(20, 300))) for _ in range(n_units)]
    pairs = [(u, int(k)) for u, keys in enumerate(unit_sets) for k in keys]
    traj = []
    for r in range(n_traj):
        source = unit_sets[rng.integers(n_units)]
        kept = source[rng.random(len(source)) < 0.7]
        traj += [(r, int(k)) for k in np.unique(np.concatenate([kept, rng.integers(0, n_keys, rng.integers(50, 200))]))]
    return _key_sets(set(traj), n_traj, n_keys), _key_sets(set(pairs), n_units, n_keys)


@pytest.mark.parametrize("share", [0.02, 0.2, 1.0])
def test_large_trajectories_keep_the_targets_ties(share):
    rec, truth = _dense_city(7)
    rng = np.random.default_rng(1)
    hidden = rng.random(truth.keys) < 0.2
    targets = np.flatnonzero(rng.random(truth.units) < share)
    targeted, whole = _both(rec, truth, hidden, targets)
    _check(targeted, whole, targets, truth.units)
    n = truth.units
    if share < 1.0:  # some trajectory is dropped early: else the test proves nothing of the rounds
        assert np.isnan(targeted[2]).any()
    assert np.isin(np.unique(whole[0] // n), np.flatnonzero(~np.isnan(targeted[2]))).any()


def test_the_check_refuses_a_dropped_trajectory_whose_ties_hold_a_target():
    rec, truth = _dense_city(7)
    targets = np.arange(truth.units)  # every unit a target: every trajectory with a tie is needed
    targeted, whole = _both(rec, truth, np.zeros(truth.keys, dtype=bool), targets)
    codes, shared, top, precision = targeted
    first = int(codes[0] // truth.units)
    keep = codes // truth.units != first
    top, precision = top.copy(), precision.copy()
    top[first] = precision[first] = np.nan
    with pytest.raises(AssertionError, match="dropped"):
        _check((codes[keep], shared[keep], top, precision), whole, targets, truth.units)


def test_best_matches_with_targets_reads_the_targets_ties_only():
    rec, truth = _dense_city(3)
    hidden = np.zeros(truth.keys, dtype=bool)
    targets = np.arange(0, truth.units, 25)
    pairs, shared, best, precision = best_matches(rec, truth, hidden, targets)
    whole = best_matches(rec, truth, hidden)
    _check((pairs, shared, best, precision), whole, targets, truth.units)


def test_target_codes_outside_the_units_are_refused():
    rec, truth = _dense_city(3, n_traj=2, n_units=5, n_keys=50)
    sets = kernels.MatchSets(truth.unit_offsets, truth.unit_keys, truth.key_offsets, truth.key_units)
    with pytest.raises(ValueError, match="targets"):
        kernels.TargetPostings(sets, np.array([truth.units]))
    postings = kernels.TargetPostings(sets, np.array([0]))
    bad = rec.unit_keys.copy()
    bad[0] = truth.keys
    with pytest.raises(ValueError, match="recovered keys"):
        kernels.targets_best_slice(rec.unit_offsets, bad, sets, np.zeros(truth.keys, bool), postings, 0, rec.units)
