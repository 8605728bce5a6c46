"""The compiled kernels (risk.kernels) against plain-Python references written from their definitions: the
same integers and the same float64 figures, on random key sets (Hypothesis) and on edge cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.matching import pair_key_sets

from spatial_release.risk import kernels
from spatial_release.risk.attack import _padded, _trajectory_slices, best_matches
from spatial_release.risk.estimator import KeySets

_key_sets = pair_key_sets


pair_sets = st.sets(st.tuples(st.integers(0, 11), st.integers(0, 14)), max_size=90)


def _reference_best(rec: set, truth: set, hidden: np.ndarray, n_traj: int, n_units: int):
    """Per trajectory: every unit sharing a key, Jaccard over the key sets, ties within 1e-12 of the best."""
    keys_of_traj = {r: {k for t, k in rec if t == r} for r in range(n_traj)}
    keys_of_unit = {u: {k for v, k in truth if v == u} for u in range(n_units)}
    codes, shared, top, precision = [], [], np.zeros(n_traj), np.zeros(n_traj)
    for r in range(n_traj):
        mine = keys_of_traj[r]
        jac = {}
        for u in range(n_units):
            common = mine & keys_of_unit[u]
            if common:
                jac[u] = len(common) / (len(mine) + len(keys_of_unit[u]) - len(common))
        top[r] = max(jac.values(), default=0.0)
        for u in sorted(jac):
            if jac[u] >= top[r] - 1e-12:
                common = mine & keys_of_unit[u]
                codes.append(r * max(n_units, 1) + u)
                shared.append(float(sum(not hidden[k] for k in common)))
                precision[r] = max(precision[r], len(common) / len(mine))
    return np.array(codes, dtype=np.int64), np.array(shared), top, precision


@settings(max_examples=60, deadline=None)
@given(rec=pair_sets, truth=pair_sets, hidden_seed=st.integers(0, 2**16))
def test_best_matches_equal_the_reference(rec, truth, hidden_seed):
    n_keys = 15
    hidden = np.random.default_rng(hidden_seed).random(n_keys) < 0.3
    rec_sets, truth_sets = _key_sets(rec, 12, n_keys), _key_sets(truth, 12, n_keys)
    got = best_matches(rec_sets, truth_sets, hidden)
    want = _reference_best(rec, truth, hidden, 12, 12)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype or (g.dtype.kind == w.dtype.kind == "f")
        np.testing.assert_array_equal(g, w)


def test_best_matches_in_many_slices_equal_one_slice(monkeypatch):
    """The slices (threads, Spark tasks) merge to what one slice gives."""
    from spatial_release.risk import attack

    rng = np.random.default_rng(3)
    rec = {(int(r), int(k)) for r, k in zip(rng.integers(0, 40, 600), rng.integers(0, 60, 600))}
    truth = {(int(u), int(k)) for u, k in zip(rng.integers(0, 50, 900), rng.integers(0, 60, 900))}
    hidden = rng.random(60) < 0.2
    rec_sets, truth_sets = _key_sets(rec, 40, 60), _key_sets(truth, 50, 60)
    whole = best_matches(rec_sets, truth_sets, hidden)
    monkeypatch.setattr(attack, "BEST_PAIRS", 30)
    assert len(_trajectory_slices(rec_sets, truth_sets)) > 10
    for g, w in zip(best_matches(rec_sets, truth_sets, hidden), whole):
        np.testing.assert_array_equal(g, w)
    for g, w in zip(whole, _reference_best(rec, truth, hidden, 40, 50)):
        np.testing.assert_array_equal(g, w)
    # the targeted matches (only each trajectory's own targets' ties read) in many slices: what one slice gives
    own = [np.arange(r % 7, 50, 7) for r in range(40)]  # every trajectory its own targets, some anchored, some guessing
    anchored = [np.arange(k % 5, 50, 11) for k in range(60)]
    guessing = np.zeros(50, dtype=bool)
    guessing[[3, 17]] = True
    targets = attack.Linked(
        KeySets.offsets(np.array([len(o) for o in own])),
        np.concatenate(own),
        KeySets.offsets(np.array([len(a) for a in anchored])),
        np.concatenate(anchored),
        guessing,
        np.ones(40, dtype=bool),
    )
    one = best_matches(rec_sets, truth_sets, hidden, targets)
    monkeypatch.setattr(attack, "TARGETED_PAIRS", 30)
    assert len(_trajectory_slices(rec_sets, truth_sets, attack.TARGETED_PAIRS)) > 10
    for g, w in zip(best_matches(rec_sets, truth_sets, hidden, targets), one):
        np.testing.assert_array_equal(g, w)


@settings(max_examples=60, deadline=None)
@given(truth=pair_sets, rows=st.lists(st.lists(st.integers(0, 14), min_size=1, max_size=4), min_size=1, max_size=12))
def test_anonymity_counts_equal_the_reference(truth, rows):
    """max(1, units holding every key of the row), whatever the row's order and with repeated keys."""
    width = max(len(r) for r in rows)
    keysets = np.array([r + [r[0]] * (width - len(r)) for r in rows], dtype=np.int64)
    sets = _key_sets(truth, 12, 15)
    holders = {k: {u for u, kk in truth if kk == k} for k in range(15)}
    want = [max(1, len(set.intersection(*(holders[k] for k in row)))) for row in keysets.tolist()]
    np.testing.assert_array_equal(kernels.anonymity_counts(sets.key_offsets, sets.key_units, keysets), want)
    dense = kernels.dense_keys(sets.key_offsets, sets.key_units, 12)  # here every key held by anyone has a bitset
    np.testing.assert_array_equal(kernels.anonymity_counts(sets.key_offsets, sets.key_units, keysets, dense), want)


@pytest.mark.slow
def test_anonymity_counts_and_holders_on_long_skewed_postings():
    """Postings of a few units up to most of 400 (so the galloping lookups take long and short steps), sets of
    widths 1-4 in production order (rarest key first) and in any order, counts of 0, 1, 2 and many: both
    kernels against Python sets. Counts of exactly 2 after the first intersection catch an early stop taken
    too soon."""
    rng = np.random.default_rng(11)
    n_units, n_keys = 400, 40
    share = np.linspace(0.01, 0.9, n_keys)  # key k is held by about share[k] of the units
    truth = {(u, k) for k in range(n_keys) for u in range(n_units) if rng.random() < share[k]}
    sets = _key_sets(truth, n_units, n_keys)
    holders = {k: {u for u, kk in truth if kk == k} for k in range(n_keys)}
    sizes = np.diff(sets.key_offsets)
    dense = kernels.dense_keys(sets.key_offsets, sets.key_units, n_units)
    assert 0 < (dense.slot >= 0).sum() < n_keys, "the case needs keys with and without bitsets"
    # bitsets for the keys held by more than 1/32 of the units here: those and the searched postings mix
    for width in (1, 2, 3, 4):
        keysets = rng.integers(0, n_keys, size=(3000, width))
        ordered = np.take_along_axis(keysets, np.lexsort((keysets, sizes[keysets]), axis=1), axis=1)
        for rows in (ordered, keysets):
            common = [set.intersection(*(holders[k] for k in row)) for row in rows.tolist()]
            for bits in (None, dense):
                got = kernels.anonymity_counts(sets.key_offsets, sets.key_units, rows, bits)
                np.testing.assert_array_equal(got, [max(1, len(c)) for c in common])
            row, unit = kernels.holders(sets.key_offsets, sets.key_units, rows)
            want = [(i, u) for i, c in enumerate(common) for u in sorted(c)]
            assert list(zip(row.tolist(), unit.tolist())) == want
        if width > 1:
            assert {len(c) for c in common} >= {0, 1, 2}, "the case lacks the counts it is meant to cover"


def test_dense_slots_widen_to_the_most_held_keys_within_the_budget():
    """Every key over n / DENSE_ALWAYS has a bitset; of those over n / widest, the most held (ties to the lower
    key) while the extra bitsets fit in DENSE_EXTRA of the postings' bytes; slots follow key order."""
    n_units = 6400  # 100 words: 800 bytes a bitset
    sizes = np.array([300, 5, 60, 100, 60, 201, 49, 0])  # over 6400/32 = 200: keys 0 and 5; over 6400/128 = 50: 2, 3, 4
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    slot = kernels.dense_slots(offsets, n_units, key_bytes=3200)  # room for two more: 3 (100), then 2 (60, lower key)
    np.testing.assert_array_equal(slot, [0, -1, 1, 2, -1, 3, -1, -1])
    np.testing.assert_array_equal(kernels.dense_slots(offsets, n_units, key_bytes=0), [0, -1, -1, -1, -1, 1, -1, -1])
    np.testing.assert_array_equal(kernels.dense_slots(offsets, n_units, 3200, widest=32), [0, -1, -1, -1, -1, 1, -1, -1])


@pytest.mark.slow
def test_anonymity_counts_the_same_whichever_keys_have_bitsets():
    """Knowledge sets whose keys with a bitset come anywhere in the row (the kernel narrows by them first): the
    counts are those of Python sets with no bitsets, the usual ones, and the widest allowed."""
    rng = np.random.default_rng(5)
    n_units, n_keys = 640, 60
    share = np.geomspace(0.002, 0.6, n_keys)
    truth = {(u, k) for k in range(n_keys) for u in range(n_units) if rng.random() < share[k]}
    sets = _key_sets(truth, n_units, n_keys)
    holders = {k: {u for u, kk in truth if kk == k} for k in range(n_keys)}
    sizes = np.diff(sets.key_offsets)
    keysets = rng.integers(0, n_keys, size=(4000, 4))
    keysets = np.take_along_axis(keysets, np.lexsort((keysets, sizes[keysets]), axis=1), axis=1)
    want = [max(1, len(set.intersection(*(holders[k] for k in row)))) for row in keysets.tolist()]
    usual = kernels.dense_keys(sets.key_offsets, sets.key_units, n_units, widest=32)
    widest = kernels.dense_keys(sets.key_offsets, sets.key_units, n_units, widest=n_units)
    assert (usual.slot >= 0).sum() < (widest.slot >= 0).sum() < n_keys, "the case needs the bitsets to differ"
    words = widest.bits.shape[1]
    anded = (widest.slot[keysets] >= 0).all(axis=1) & (words <= kernels.WORDS_PER_CANDIDATE * sizes[keysets[:, 0]])
    assert 0 < anded.sum() < len(keysets), "the case needs sets counted by the AND of bitsets and sets narrowed"
    for dense in (None, usual, widest):
        got = kernels.anonymity_counts(sets.key_offsets, sets.key_units, keysets, dense)
        np.testing.assert_array_equal(got, want)
    exact = kernels.anonymity_counts(sets.key_offsets, sets.key_units, keysets, widest, exact=True)
    np.testing.assert_array_equal(exact, [len(set.intersection(*(holders[k] for k in row))) for row in keysets.tolist()])


def test_anonymity_counts_a_key_nobody_holds_is_a_set_of_one():
    sets = _key_sets({(0, 0), (1, 0), (2, 1)}, 3, 3)
    got = kernels.anonymity_counts(sets.key_offsets, sets.key_units, np.array([[0, 2], [2, 0], [0, 0], [1, 0]]))
    np.testing.assert_array_equal(got, [1, 1, 2, 1])


@settings(max_examples=60, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 13)), max_size=80))
def test_attack_key_sets_equal_from_codes(pairs):
    """attack._sets (one sort and a counting sort) builds the arrays KeySets.from_codes builds from the
    distinct pairs, repeated pairs included."""
    from spatial_release.risk.attack import _sets

    zone = np.array(["z"] * 14, dtype=object)
    owner = np.array([p[0] for p in pairs], dtype=np.int64)
    key = np.array([p[1] for p in pairs], dtype=np.int64)
    got = _sets(owner, key, 10, 14, zone)
    if not pairs:
        assert got.units == 10 and got.keys == 14 and not len(got.unit_keys)
        return
    distinct = sorted(set(pairs))
    want = KeySets.from_codes(
        np.array([p[0] for p in distinct], dtype=np.int64), np.array([p[1] for p in distinct], dtype=np.int64), zone
    )
    for name in ("unit_offsets", "unit_keys", "key_offsets", "key_units"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
    # offsets in 64 bits, codes in 32 (attack.NARROW_BELOW; tests/test_narrow_codes.py forces 64-bit codes too)
    assert got.unit_offsets.dtype == got.key_offsets.dtype == np.int64
    assert got.unit_keys.dtype == got.key_units.dtype == np.int32


@settings(max_examples=60, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 13)), max_size=80), seed=st.integers(0, 2**16))
def test_coded_key_sets_equal_from_codes_whatever_the_order_and_repeats(pairs, seed):
    """kernels.unit_major then key_major (the key sets' compiled sort and distinct, as risk.keysets calls them)
    build, from the pairs shuffled and repeated, the arrays KeySets.from_codes builds from the distinct pairs,
    in int32 as DuckDB streams them."""
    rng = np.random.default_rng(seed)
    rows = np.array(pairs * 2, dtype=np.int32).reshape(-1, 2)[rng.permutation(2 * len(pairs))]
    unit_offsets, unit_keys = kernels.unit_major(rows[:, 0].copy(), rows[:, 1].copy(), 10, 14)
    got = (unit_offsets, unit_keys, *kernels.key_major(unit_offsets, unit_keys, 14, np.int32))
    distinct = sorted(set(pairs))
    zone = np.array(["z"] * 14, dtype=object)
    owner = np.array([p[0] for p in distinct], dtype=np.int64)
    key = np.array([p[1] for p in distinct], dtype=np.int64)
    want = _padded(KeySets.from_codes(owner, key, zone), 10) if distinct else None
    names = ("unit_offsets", "unit_keys", "key_offsets", "key_units")
    for name, array in zip(names, got):
        assert array.dtype == (np.int64 if "offsets" in name else np.int32)
        if want is None:
            assert not array.any()
            continue
        np.testing.assert_array_equal(array, getattr(want, name))


def test_coded_key_sets_refuse_codes_outside_their_tables():
    """Negative control: a unit or key code past its table is a ValueError, not a write past the arrays."""
    with pytest.raises(ValueError, match="units"):
        kernels.unit_major(np.array([0, 3], np.int32), np.array([0, 1], np.int32), 3, 2)
    with pytest.raises(ValueError, match="keys"):
        kernels.unit_major(np.array([0, 1], np.int32), np.array([0, -1], np.int32), 3, 2)
    with pytest.raises(ValueError, match="units for"):
        kernels.unit_major(np.array([0], np.int32), np.array([0, 1], np.int32), 3, 2)
    with pytest.raises(ValueError, match="unit offsets"):
        kernels.key_major(np.array([0, 1]), np.array([0, 1], np.int32), 2)


@settings(max_examples=60, deadline=None)
@given(truth=pair_sets, rows=st.lists(st.lists(st.integers(0, 14), min_size=1, max_size=4), min_size=1, max_size=12))
def test_candidates_are_every_owner_holding_every_key(truth, rows):
    """attack._candidates: (row, owner) of every owner holding all of the row's keys, by row then owner."""
    from spatial_release.risk.attack import _candidates

    width = max(len(r) for r in rows)
    keysets = np.array([r + [r[-1]] * (width - len(r)) for r in rows], dtype=np.int64)
    sets = _key_sets(truth, 12, 15)
    holders = {k: {u for u, kk in truth if kk == k} for k in range(15)}
    want = [(i, u) for i, row in enumerate(keysets.tolist()) for u in sorted(set.intersection(*(holders[k] for k in row)))]
    row, owner = _candidates(sets, keysets)
    assert list(zip(row.tolist(), owner.tolist())) == want


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.integers(-(2**62), 2**62), max_size=60), repeat=st.integers(1, 3))
def test_distinct_sorted_equals_numpy_unique(values, repeat):
    from spatial_release.arrays import distinct_sorted

    array = np.array(values * repeat, dtype=np.int64)
    got = distinct_sorted(array)
    np.testing.assert_array_equal(got, np.unique(array))
    assert got.dtype == np.int64


@settings(max_examples=80, deadline=None)
@given(names=st.lists(st.text(max_size=4), max_size=60), repeat=st.integers(1, 3))
def test_distinct_names_equal_numpy_unique(names, repeat):
    """arrays.distinct_names: the sorted distinct names and the inverse np.unique gives, for object and str
    arrays (zone names per key)."""
    from spatial_release.arrays import distinct_names

    for array in (np.array(names * repeat, dtype=object), np.array(names * repeat, dtype=str)):
        got, inverse = distinct_names(array)
        want, want_inverse = np.unique(array, return_inverse=True)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(inverse, want_inverse)
        assert got.dtype == want.dtype and inverse.dtype == np.int64


def test_distinct_names_leave_a_missing_name_to_numpy():
    """Negative control: a None among the names is not coded as a name of its own (pandas would give it -1);
    it goes np.unique's way, which refuses to order it among strings."""
    from spatial_release.arrays import distinct_names

    with pytest.raises(TypeError):
        np.unique(np.array(["b", None, "a"], dtype=object), return_inverse=True)
    with pytest.raises(TypeError):
        distinct_names(np.array(["b", None, "a"], dtype=object))


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(0, 40), st.integers(-1, 6), st.integers(-1, 6)), min_size=1, max_size=50),
    big=st.booleans(),
)
def test_distinct_rows_equal_numpy_unique_over_rows(rows, big):
    """attack._distinct_rows: the rows and inverse np.unique(axis=0) gives, also where the code would overflow."""
    from spatial_release.risk.attack import _distinct_rows

    array = np.array(rows, dtype=np.int64)
    if big:
        array[:, 0] *= 2**57  # spans whose product passes 2^62: the slow way
    codes, inverse = _distinct_rows(array)
    want_codes, want_inverse = np.unique(array, axis=0, return_inverse=True)
    np.testing.assert_array_equal(codes, want_codes)
    np.testing.assert_array_equal(inverse, want_inverse.ravel())


def test_codes_outside_their_arrays_are_refused_not_read():
    """Negative controls: compiled loops do not check indices, so a knowledge set, a recovered key, a unit in
    the postings or a pair's key outside its codes is a ValueError, never a figure read from other memory."""
    sets = _key_sets({(0, 0), (1, 0), (2, 1)}, 3, 3)
    for bad in ([[0, 3]], [[-1, 0]]):
        with pytest.raises(ValueError, match="knowledge sets"):
            kernels.anonymity_counts(sets.key_offsets, sets.key_units, np.array(bad))
        with pytest.raises(ValueError, match="knowledge sets"):
            kernels.holders(sets.key_offsets, sets.key_units, np.array(bad))
    with pytest.raises(ValueError, match="offsets"):
        kernels.anonymity_counts(sets.key_offsets, sets.key_units[:-1], np.array([[0, 1]]))
    with pytest.raises(ValueError, match="postings' units"):  # a unit past the bitsets' width
        kernels.dense_keys(sets.key_offsets, sets.key_units, 2)
    for empty in (np.zeros((2, 0), dtype=np.int64), np.array([0, 1])):  # rows without a key, or no rows at all
        with pytest.raises(ValueError, match="at least one key"):
            kernels.anonymity_counts(sets.key_offsets, sets.key_units, empty)
        with pytest.raises(ValueError, match="at least one key"):
            kernels.holders(sets.key_offsets, sets.key_units, empty)
    other = _key_sets({(0, 0), (1, 1), (2, 2), (0, 2)}, 3, 3)  # the same number of keys, other postings
    with pytest.raises(ValueError, match="dense keys"):
        kernels.anonymity_counts(
            sets.key_offsets, sets.key_units, np.array([[0, 1]]), kernels.dense_keys(other.key_offsets, other.key_units, 3)
        )
    with pytest.raises(ValueError, match="dense keys"):  # bitsets of other key sets
        kernels.anonymity_counts(
            sets.key_offsets, sets.key_units, np.array([[0, 1]]), kernels.dense_keys(np.array([0, 3]), sets.key_units, 3)
        )
    rec = _key_sets({(0, 0), (1, 2)}, 2, 3)
    hidden = np.zeros(3, dtype=bool)
    with pytest.raises(ValueError, match="recovered key"):
        kernels.best_slice(
            rec.unit_offsets, rec.unit_keys + 5, sets.key_offsets, sets.key_units, sets.unit_offsets, hidden, 0, 2
        )
    with pytest.raises(ValueError, match="a unit outside"):
        kernels.best_slice(
            rec.unit_offsets, rec.unit_keys, sets.key_offsets, sets.key_units + 7, sets.unit_offsets, hidden, 0, 2
        )
    with pytest.raises(ValueError, match="trajectories"):
        kernels.best_slice(
            rec.unit_offsets, rec.unit_keys, sets.key_offsets, sets.key_units, sets.unit_offsets, hidden, 0, 5
        )
    with pytest.raises(ValueError, match="keys"):
        kernels.key_major(np.array([0, 1, 2]), np.array([0, 4]), 2)


def _allocate_flows_reference(flows, state_of, slot_codes, yesterday, rng):
    """The allocation as `risk.attack._allocate` first wrote it: states in the order of their first flow, each
    shuffled by `rng.permutation` (not for one trajectory), its slots largest flow first taking the free
    trajectories, those in the slot's area the day before first."""
    result = np.full(len(state_of), -1, dtype=np.int64)
    members = np.argsort(state_of, kind="stable")
    starts = np.searchsorted(state_of[members], np.arange(state_of.max() + 2 if len(state_of) else 1))
    by_state: dict[int, list[tuple[int, int]]] = {}
    for (s, slot), f in flows.items():
        by_state.setdefault(s, []).append((slot, f))
    for s, outs in by_state.items():
        pool = members[starts[s] : starts[s + 1]]
        pool = pool if len(pool) == 1 else pool[rng.permutation(len(pool))]
        free = np.ones(len(pool), dtype=bool)
        for slot, f in sorted(outs, key=lambda o: -o[1]):
            code = int(slot_codes[slot])
            rank = np.arange(len(pool))
            if yesterday is not None and code >= 0:
                rank = np.argsort(~(free & (yesterday[pool] == code)), kind="stable")
            chosen = rank[free[rank]][:f]
            result[pool[chosen]] = code
            free[chosen] = False
    return result


def _flows_of(entries) -> tuple[dict[tuple[int, int], int], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    flows: dict[tuple[int, int], int] = {}
    for s, slot, f in entries:
        flows[(s, slot)] = flows.get((s, slot), 0) + f
    state, slot, size = (np.array([e[c] for e in entries], dtype=np.int64) for c in range(3))
    return flows, (state, slot, size)


def _split_flows(state_of, n_slots, rng):
    """Every state's trajectories split over random slots, the states in a random order, entries repeated."""
    entries = []
    for s in rng.permutation(np.unique(state_of)):
        left = int((state_of == s).sum())
        while left:
            f = int(rng.integers(1, left + 1))
            entries.append((int(s), int(rng.integers(0, n_slots)), f))
            left -= f
    return entries


@pytest.mark.parametrize(
    "sizes",
    [
        [],  # no trajectory
        [1],  # one trajectory
        [2],
        [3000],  # one state: many equal codes, masks up to 2^12
        [1] * 50,  # no shuffle at all: nothing drawn
        [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 32, 33, 64, 65, 129, 255, 256, 257, 1025],  # around the masks
    ],
)
@pytest.mark.parametrize("regular", [False, True])
def test_allocate_flows_equal_the_permutations(sizes, regular):
    """`kernels.allocate_flows` shuffles each state's trajectories from the generator's bulk 32-bit stream: the
    same allocation as `rng.permutation` per state, and the generator left where the permutations leave it."""
    rng = np.random.default_rng(len(sizes) + 7 * sum(sizes) + regular)
    state_of = rng.permutation(np.repeat(np.arange(len(sizes)), sizes)).astype(np.int64)
    slot_codes = np.array([4, 9, 11, 20, -1], dtype=np.int64)
    yesterday = rng.choice([4, 9, 11, -1, 20], len(state_of)) if regular else None
    flows, arrays = _flows_of(_split_flows(state_of, len(slot_codes), rng))
    for held_back in (0, 1):  # a generator with half a 64-bit draw held back, or not
        mine, theirs = np.random.default_rng(3), np.random.default_rng(3)
        mine.integers(0, 2**32, held_back, dtype=np.uint32)
        theirs.integers(0, 2**32, held_back, dtype=np.uint32)
        got = kernels.allocate_flows(*arrays, state_of, slot_codes, yesterday, mine)
        want = _allocate_flows_reference(flows, state_of, slot_codes, yesterday, theirs)
        np.testing.assert_array_equal(got, want)
        assert mine.bit_generator.state == theirs.bit_generator.state


@pytest.mark.parametrize("seed", range(6))
def test_allocate_flows_draw_again_when_too_few_were_drawn(seed, monkeypatch):
    """With too few 32-bit draws taken at first, the generator is rewound and more are drawn, until the
    shuffles have what they read: the same allocation and generator state as the permutations."""
    monkeypatch.setattr(kernels, "SHUFFLE_DRAWS", 0)
    monkeypatch.setattr(kernels, "SPARE_DRAWS", 1)
    rng = np.random.default_rng(seed)
    state_of = rng.integers(0, 40, 600).astype(np.int64)
    slot_codes = np.arange(6, dtype=np.int64) - 1
    flows, arrays = _flows_of(_split_flows(state_of, len(slot_codes), rng))
    mine, theirs = np.random.default_rng(seed + 50), np.random.default_rng(seed + 50)
    got = kernels.allocate_flows(*arrays, state_of, slot_codes, None, mine)
    np.testing.assert_array_equal(got, _allocate_flows_reference(flows, state_of, slot_codes, None, theirs))
    assert mine.bit_generator.state == theirs.bit_generator.state


def test_allocate_flows_refuse_codes_outside_their_tables():
    """A flow's state or slot outside its codes is a ValueError, never memory read past an array."""
    state_of = np.array([0, 1, 1], dtype=np.int64)
    codes = np.array([5, -1], dtype=np.int64)
    rng = np.random.default_rng(0)
    one = np.array([1], dtype=np.int64)
    with pytest.raises(ValueError, match="flows' states"):
        kernels.allocate_flows(np.array([2]), np.array([0]), one, state_of, codes, None, rng)
    with pytest.raises(ValueError, match="flows' slots"):
        kernels.allocate_flows(np.array([0]), np.array([2]), one, state_of, codes, None, rng)
    with pytest.raises(ValueError, match="day-before"):
        kernels.allocate_flows(np.array([0]), np.array([0]), one, state_of, codes, np.zeros(2, dtype=np.int64), rng)


@settings(max_examples=80, deadline=None)
@given(values=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=60), repeat=st.integers(1, 3), seed=st.integers(0, 99))
def test_distinct_inverse_equals_numpy_unique(values, repeat, seed):
    """kernels.distinct_inverse: the sorted distinct codes and the inverse np.unique(return_inverse=True) gives,
    whatever the codes' range (both int64 ends) and order."""
    array = np.random.default_rng(seed).permutation(np.array(values * repeat, dtype=np.int64))
    got, inverse = kernels.distinct_inverse(array)
    want, want_inverse = np.unique(array, return_inverse=True)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(inverse, want_inverse)
    assert got.dtype == np.int64 and inverse.dtype == np.int64


@pytest.mark.parametrize(
    "codes",
    [
        np.zeros(0, dtype=np.int64),  # empty
        np.array([7], dtype=np.int64),  # one code
        np.full(5000, -3, dtype=np.int64),  # one code many times
        np.arange(6000, dtype=np.int64)[::-1] << 40,  # multiples of a power of two: a poor hash's worst case
        np.repeat(np.arange(-50, 50, dtype=np.int64) * 2**56, 80),  # many equal codes, sorted
        np.random.default_rng(1).integers(0, 3, 20_000).astype(np.int64),  # three codes, many times each
    ],
)
def test_distinct_inverse_edge_cases(codes):
    got, inverse = kernels.distinct_inverse(codes)
    want, want_inverse = np.unique(codes, return_inverse=True)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(inverse, want_inverse)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-2, 12), st.integers(-2, 9)), max_size=60),
    st.integers(0, 12),
    st.integers(0, 9),
    st.booleans(),
)
def test_the_pair_scan_gives_numpy_s_figures(pairs, n_units, n_keys, sort):
    """`scan_pairs` (the coded file check's one pass) against numpy's figures, on pairs in and out of the
    declared ranges, in and out of order, with repeats."""
    if sort:
        pairs = sorted(set(pairs))
    units = np.array([u for u, _ in pairs], dtype=np.int32)
    keys = np.array([k for _, k in pairs], dtype=np.int32)
    scan = kernels.scan_pairs(units, keys, n_units, n_keys)
    in_range = bool(((units >= 0) & (units < n_units) & (keys >= 0) & (keys < n_keys)).all())
    assert scan.in_range == in_range
    if len(units):
        assert (scan.unit_min, scan.unit_max, scan.key_min, scan.key_max) == (
            units.min(),
            units.max(),
            keys.min(),
            keys.max(),
        )
    same = units[1:] == units[:-1]
    assert scan.ordered == bool((np.diff(units) >= 0).all() and (keys[1:][same] > keys[:-1][same]).all())
    if in_range:
        assert scan.unit_counts.tolist() == np.bincount(units, minlength=n_units).tolist()
        assert scan.keys_held == len(np.unique(keys))
    assert len(scan.unit_counts) == n_units  # out-of-range codes were never counted in (nor past) it


def test_the_pair_scan_refuses_mismatched_arrays():
    with pytest.raises(ValueError, match="unit codes against"):
        kernels.scan_pairs(np.zeros(3, dtype=np.int32), np.zeros(2, dtype=np.int32), 1, 1)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sets(st.integers(0, 40), max_size=12), min_size=1, max_size=30), st.integers(1, 4))
def test_key_major_in_blocks_equals_one_scatter(key_sets, bits):
    """The two-pass key-major sort (blocks of 2^bits keys) gives the one-pass sort's offsets and units."""
    unit_offsets = KeySets.offsets(np.array([len(s) for s in key_sets]))
    unit_keys = np.array([k for s in key_sets for k in sorted(s)], dtype=np.int32)
    n_keys = int(unit_keys.max()) + 1 if len(unit_keys) else 1
    like = np.zeros(0, dtype=np.int32)
    one = kernels._key_major(unit_offsets, unit_keys, n_keys, like)
    blocked = kernels._key_major_blocked(unit_offsets, unit_keys, n_keys, like, bits)
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(one, blocked))


def test_key_major_of_large_key_sets_takes_the_blocks_and_equals_one_scatter(monkeypatch):
    rng = np.random.default_rng(5)
    counts = rng.integers(0, 60, 4_000)
    unit_offsets = KeySets.offsets(counts)
    unit_keys = np.concatenate([np.sort(rng.choice(9_000, c, replace=False)) for c in counts]).astype(np.int32)
    taken: list[int] = []
    blocked = kernels._key_major_blocked
    monkeypatch.setattr(kernels, "BLOCKED_FROM", 10_000)

    def counted(*args):
        taken.append(args[-1])
        return blocked(*args)

    monkeypatch.setattr(kernels, "_key_major_blocked", counted)
    got = kernels.key_major(unit_offsets, unit_keys, 9_000, np.int32)
    assert taken == [kernels.KEY_BLOCK_BITS]
    one = kernels._key_major(unit_offsets, unit_keys, 9_000, np.zeros(0, dtype=np.int32))
    assert all(np.array_equal(a, b) for a, b in zip(got, one))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sets(st.integers(0, 30), max_size=15), min_size=1, max_size=25), st.integers(1, 7), st.integers(0, 99))
def test_unit_class_counts_equal_numpy_unique(key_sets, n_classes, seed):
    """Each unit's keys per class (the count classifier's own presence among a key's references) against
    np.unique over every (unit, key) pair's code."""
    unit_offsets = KeySets.offsets(np.array([len(s) for s in key_sets]))
    unit_keys = np.array([k for s in key_sets for k in sorted(s)], dtype=np.int32)
    class_code = np.random.default_rng(seed).integers(0, n_classes, 31)
    owner = np.repeat(np.arange(len(key_sets), dtype=np.int64), np.diff(unit_offsets))
    expected = np.unique(owner * n_classes + class_code[unit_keys], return_counts=True)
    got = kernels.unit_class_counts(unit_offsets, unit_keys, class_code, n_classes)
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(got, expected))


def test_unit_class_counts_refuse_codes_outside_their_tables():
    offsets, keys = np.array([0, 2]), np.array([0, 3], dtype=np.int32)
    with pytest.raises(ValueError, match="unit keys"):
        kernels.unit_class_counts(offsets, keys, np.zeros(3, dtype=np.int64), 1)
    with pytest.raises(ValueError, match="key classes"):
        kernels.unit_class_counts(offsets, keys, np.array([0, 0, 0, 2]), 2)


@settings(max_examples=80, deadline=None)
@given(codes=st.lists(st.integers(0, 30), max_size=200), extra=st.integers(0, 5))
def test_stable_order_is_the_stable_argsort(codes, extra):
    """The counting sort gives np.argsort(kind="stable")'s positions, ties in position order."""
    values = np.array(codes, dtype=np.int64)
    n = (int(values.max()) + 1 if len(values) else 0) + extra
    np.testing.assert_array_equal(kernels.stable_order(values, n), np.argsort(values, kind="stable"))


def test_stable_order_refuses_codes_outside_its_range():
    with pytest.raises(ValueError, match="outside 0..3"):
        kernels.stable_order(np.array([0, 4, 1]), 4)
    with pytest.raises(ValueError, match="outside"):
        kernels.stable_order(np.array([-1, 0]), 4)
