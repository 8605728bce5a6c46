"""Best matches when only each trajectory's own targets' ties are read (`kernels.targets_best_slice`, what the
advantage gate's recovery linkage runs; the targets of a trajectory are those whose knowledge can pick it or whose
guess reads it, `risk.attack._linked_targets`): every trajectory whose best matches tie one of its targets must get
every pair, shared count, best Jaccard and precision the whole walk gives it (`kernels.best_slice`, itself tested
against a reference in tests/test_kernels.py); a trajectory it drops must have none of its targets among its ties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.matching import pair_key_sets as _key_sets

from spatial_release.risk import kernels
from spatial_release.risk.attack import Linked, best_matches
from spatial_release.risk.estimator import KeySets

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _linked(
    n_traj: int,
    targets: np.ndarray,
    rng: np.random.Generator,
    share: float = 0.5,
    n_units: int = 12,
    guess: float = 0.0,
    n_keys: int = 25,
    anchors: float = 0.0,
) -> Arrays:
    """Each trajectory's own targets, a random part of `targets` (offsets, ascending units); guessing targets,
    every trajectory's (a random part of `targets`, a flag per unit); and anchored ones, every holder's of a key
    (offsets over the keys, units)."""
    own = [np.sort(targets[rng.random(len(targets)) < share]) for _ in range(n_traj)]
    offsets = KeySets.offsets(np.array([len(o) for o in own], dtype=np.int64))
    guessing = np.zeros(n_units, dtype=bool)
    guessing[targets[rng.random(len(targets)) < guess]] = True
    by_key = [np.sort(targets[rng.random(len(targets)) < anchors]) for _ in range(n_keys)]
    key_offsets = KeySets.offsets(np.array([len(o) for o in by_key], dtype=np.int64))
    flat = np.concatenate(own or [np.zeros(0)]).astype(np.int64)
    return offsets, flat, guessing, key_offsets, np.concatenate(by_key or [np.zeros(0)]).astype(np.int64)


def _none_else(n_traj: int, n_units: int, n_keys: int, every: np.ndarray) -> Arrays:
    """`every` the targets of every trajectory, listed for each; no guessing or anchored target."""
    offsets = np.arange(n_traj + 1, dtype=np.int64) * len(every)
    return offsets, np.tile(every, n_traj), np.zeros(n_units, bool), np.zeros(n_keys + 1, np.int64), np.zeros(0, np.int64)


def _check(targeted, whole, linked: Arrays, n_units: int, rec: KeySets | None = None) -> None:
    """Assert that `targeted` keeps exactly what each trajectory's own targets' ties need of `whole` (the same
    slice's arrays)."""
    codes, shared, top, precision = targeted
    w_codes, w_shared, w_top, w_precision = whole
    n = max(n_units, 1)
    offsets, units, guessing, key_offsets, key_units = linked
    own = [np.repeat(np.arange(len(offsets) - 1), np.diff(offsets)) * n + units]  # (trajectory, its target) codes
    if rec is not None:  # the targets anchored on each key of each trajectory
        for r in range(rec.units):
            for key in rec.unit_keys[rec.unit_offsets[r] : rec.unit_offsets[r + 1]]:
                own.append(r * n + key_units[key_offsets[key] : key_offsets[key + 1]])
    needed = np.unique(w_codes[np.isin(w_codes, np.concatenate(own)) | guessing[w_codes % n]] // n)
    walked = np.flatnonzero(~np.isnan(top))
    assert np.isin(needed, walked).all(), "a trajectory whose ties hold one of its targets was dropped"
    keep = np.isin(w_codes // n, walked)
    np.testing.assert_array_equal(codes, w_codes[keep])
    np.testing.assert_array_equal(shared, w_shared[keep])
    np.testing.assert_array_equal(top[walked], w_top[walked])
    np.testing.assert_array_equal(precision[walked], w_precision[walked])
    assert np.isnan(precision[np.isnan(top)]).all()


def _both(rec: KeySets, truth: KeySets, hidden: np.ndarray, linked: Arrays):
    sets = kernels.MatchSets(truth.unit_offsets, truth.unit_keys, truth.key_offsets, truth.key_units)
    postings = kernels.LinkedTargets(sets, *linked)
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
    linked = _linked(rec_sets.units, targets, rng, guess=0.3, anchors=0.1)
    targeted, whole = _both(rec_sets, truth_sets, hidden, linked)
    _check(targeted, whole, linked, 12, rec_sets)


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
    linked = _linked(rec.units, targets, rng, n_units=truth.units, guess=0.05, n_keys=truth.keys, anchors=0.001)
    targeted, whole = _both(rec, truth, hidden, linked)
    _check(targeted, whole, linked, truth.units, rec)
    n = truth.units
    if share < 1.0:  # some trajectory is dropped early: else the test proves nothing of the rounds
        assert np.isnan(targeted[2]).any()
    assert np.isin(np.unique(whole[0] // n), np.flatnonzero(~np.isnan(targeted[2]))).any()


def test_the_check_refuses_a_dropped_trajectory_whose_ties_hold_a_target():
    rec, truth = _dense_city(7)
    every = np.arange(truth.units)  # every unit a target of every trajectory: every trajectory with a tie is needed
    linked = _none_else(rec.units, truth.units, truth.keys, every)
    targeted, whole = _both(rec, truth, np.zeros(truth.keys, dtype=bool), linked)
    codes, shared, top, precision = targeted
    first = int(codes[0] // truth.units)
    keep = codes // truth.units != first
    top, precision = top.copy(), precision.copy()
    top[first] = precision[first] = np.nan
    with pytest.raises(AssertionError, match="dropped"):
        _check((codes[keep], shared[keep], top, precision), whole, linked, truth.units)


def test_best_matches_with_targets_reads_the_targets_ties_only():
    rec, truth = _dense_city(3)
    hidden = np.zeros(truth.keys, dtype=bool)
    linked = _linked(
        rec.units, np.arange(0, truth.units, 25), np.random.default_rng(5), 0.5, truth.units, 0.2, truth.keys, 0.01
    )
    matched = np.ones(rec.units, dtype=bool)
    pairs, shared, best, precision = best_matches(rec, truth, hidden, Linked(*linked[:2], *linked[3:], linked[2], matched))
    whole = best_matches(rec, truth, hidden)
    _check((pairs, shared, best, precision), whole, linked, truth.units, rec)


def test_a_trajectory_is_walked_for_its_own_targets_not_for_another_s():
    """The negative control of the per-trajectory targets: the same targets given to every trajectory walk more
    trajectories whole than each trajectory's own, and a tie of a target that is not the trajectory's own is
    not read (the walk may drop it)."""
    rec, truth = _dense_city(7)
    hidden = np.zeros(truth.keys, dtype=bool)
    targets = np.arange(truth.units)
    rng = np.random.default_rng(2)
    own = _linked(rec.units, targets, rng, share=0.01, n_units=truth.units, n_keys=truth.keys)
    shared_by_all = _none_else(rec.units, truth.units, truth.keys, targets)
    mine, _ = _both(rec, truth, hidden, own)
    everyone, whole = _both(rec, truth, hidden, shared_by_all)
    assert np.isnan(mine[2]).sum() > np.isnan(everyone[2]).sum()
    with pytest.raises(AssertionError, match="dropped"):
        _check(mine, whole, shared_by_all, truth.units)


def test_target_codes_outside_the_units_are_refused():
    rec, truth = _dense_city(3, n_traj=2, n_units=5, n_keys=50)
    sets = kernels.MatchSets(truth.unit_offsets, truth.unit_keys, truth.key_offsets, truth.key_units)
    with pytest.raises(ValueError, match="targets"):
        kernels.LinkedTargets(sets, np.array([0, 1, 1]), np.array([truth.units]), np.zeros(truth.units, bool))
    with pytest.raises(ValueError, match="targets"):
        anchored = np.concatenate([[0], np.ones(truth.keys, np.int64)])
        kernels.LinkedTargets(
            sets, np.array([0, 0, 0]), np.zeros(0), np.zeros(truth.units, bool), anchored, np.array([truth.units])
        )
    with pytest.raises(ValueError, match="cover"):
        kernels.LinkedTargets(
            sets, np.array([0, 0, 0]), np.zeros(0), np.zeros(truth.units, bool), np.array([0, 1]), np.array([0])
        )
    with pytest.raises(ValueError, match="span"):
        kernels.LinkedTargets(sets, np.array([0, 2, 1]), np.array([0]), np.zeros(truth.units, bool))
    with pytest.raises(ValueError, match="guessing flags"):
        kernels.LinkedTargets(sets, np.array([0, 1, 1]), np.array([0]), np.zeros(truth.units + 1, bool))
    postings = kernels.LinkedTargets(sets, np.array([0, 1, 1]), np.array([0]), np.zeros(truth.units, bool))
    bad = rec.unit_keys.copy()
    bad[0] = truth.keys
    with pytest.raises(ValueError, match="recovered keys"):
        kernels.targets_best_slice(rec.unit_offsets, bad, sets, np.zeros(truth.keys, bool), postings, 0, rec.units)
    with pytest.raises(ValueError, match="same trajectories"):
        other = kernels.LinkedTargets(sets, np.array([0, 1]), np.array([0]), np.zeros(truth.units, bool))
        kernels.targets_best_slice(rec.unit_offsets, rec.unit_keys, sets, np.zeros(truth.keys, bool), other, 0, 1)
