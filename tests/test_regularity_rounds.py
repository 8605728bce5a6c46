"""The regularity kernel's walk in rounds (`kernels._ties_unless_beaten`): a part of the output's postings ranks
the units, the best ranked are checked exactly, and a strictly better one ends the walk. Its shares must be those
of the whole walk to the bit; here both are compared with the rule spelled out in plain Python on random key sets
and outputs of all four guess modes, built to tie (units with the same keys, outputs the size of a unit's keys),
with targets that no guess reaches and knowledge sets of no key (an empty output). A rule with a tie taken for a
better match, or an overlap off by one, differs from the kernel on these examples: the comparison can fail."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from spatial_release.risk import kernels
from spatial_release.risk.estimator import KeySets
from spatial_release.risk.kernels import (
    DAY_MINUTES,
    GUESS_SHIFTS,
    GUESS_TIME_OF_DAY,
    GUESS_WEEK,
    TIE,
    WEEK_MINUTES,
    Guesses,
)

MODES = (GUESS_SHIFTS, GUESS_WEEK, GUESS_TIME_OF_DAY)


class Case:
    """Units' key sets, a guess table of every mode, and knowledge sets (their targets)."""

    def __init__(
        self,
        held: list[set[int]],
        n_keys: int,
        shifts: np.ndarray,
        group: np.ndarray,
        minute: np.ndarray,
        knowledge: list[list[int]],
        targets: list[int],
    ):
        self.held, self.n_keys, self.shifts, self.group, self.minute = held, n_keys, shifts, group, minute
        self.knowledge, self.targets = knowledge, targets
        units = np.repeat(np.arange(len(held)), [len(h) for h in held])
        keys = np.concatenate([sorted(h) for h in held]).astype(np.int64)
        self.sets = KeySets.from_codes(units, keys, np.array(["z"] * n_keys, dtype=object))

    def guesses(self, mode: int) -> Guesses:
        order = np.lexsort((self.minute, self.group)).astype(np.int64)
        starts = KeySets.offsets(np.bincount(self.group, minlength=int(self.group.max()) + 1))
        return Guesses(mode, self.shifts, order, starts, self.group, self.minute)

    def guesses_of(self, mode: int, key: int) -> set[int]:
        """The keys guessed from `key`, re-derived from the tables' meaning (not from the kernel's order)."""
        if mode == GUESS_SHIFTS:
            return {int(g) for g in self.shifts[key] if g >= 0}
        same = [g for g in range(self.n_keys) if self.group[g] == self.group[key]]
        gap = {g: int(self.minute[g] - self.minute[key]) for g in same}
        if mode == GUESS_WEEK:
            return {g for g in same if abs(gap[g]) <= WEEK_MINUTES}
        return {g for g in same if gap[g] % DAY_MINUTES <= 60 or gap[g] % DAY_MINUTES >= DAY_MINUTES - 60}


def rule_share(case: Case, mode: int, known: list[int], target: int, short_by: int = 0, sole: bool = False) -> float:
    """The project's rule in plain Python: 0 when no guess is a key of the target; else 1/t when the target is
    among the t units whose Jaccard with the output ties the best, else 0. The wrong rules of the negative
    control: every other unit's overlap counted `short_by` short; `sole`, a tie taken for a better match (the
    target succeeds only as the one best match)."""
    output = set(known)
    for key in known:
        output |= case.guesses_of(mode, key)
    guessed = output - set(known)
    if not guessed & case.held[target]:
        return 0.0
    n = len(output)
    overlaps = [(len(output & h) - (short_by if u != target else 0), len(h)) for u, h in enumerate(case.held)]
    best = max(c / (n + size - c) for c, size in overlaps if c > 0)
    ties = sum(1 for c, size in overlaps if c > 0 and c / (n + size - c) >= best - TIE)
    c_t, size_t = overlaps[target]
    if c_t / (n + size_t - c_t) < best - TIE or (sole and ties > 1):
        return 0.0
    return 1.0 / ties


def kernel_shares(case: Case, mode: int, probe: int, round_keys: int, checks: int, full_walk: bool) -> np.ndarray:
    guesses = case.guesses(mode)
    offsets = KeySets.offsets(np.array([len(k) for k in case.knowledge]))
    known = np.array([k for ks in case.knowledge for k in ks], dtype=np.int64)
    targets = np.array(case.targets, dtype=np.int64)
    sets = case.sets
    common = (guesses.mode, offsets, known, targets, guesses.shifts, guesses.order, guesses.starts)
    rest = (guesses.group, guesses.minute, sets.unit_offsets, sets.unit_keys, sets.key_offsets, sets.key_units)
    args = (*common, *rest, 0, len(targets), probe)
    if full_walk:
        return kernels._regularity_slice_full_walk(*args)
    return kernels._regularity_slice(*args, round_keys, checks)


@st.composite
def cases(draw) -> Case:
    """Few keys and many units built from a few shapes (copies of one another, a shape and a key more or less),
    so that outputs tie, units share their key sets, and a unit's keys are often the whole output."""
    n_keys = draw(st.integers(2, 40))
    shapes = draw(st.lists(st.sets(st.integers(0, n_keys - 1), min_size=1, max_size=12), min_size=1, max_size=5))
    held: list[set[int]] = []
    for _ in range(draw(st.integers(1, 40))):
        shape = set(draw(st.sampled_from(shapes)))
        if draw(st.booleans()):
            shape ^= {draw(st.integers(0, n_keys - 1))}
        held.append(shape or {0})
    groups = draw(st.integers(1, 4))
    group = np.array(draw(st.lists(st.integers(0, groups - 1), min_size=n_keys, max_size=n_keys)), dtype=np.int64)
    group[0] = groups - 1  # every group number up to the largest is used
    hours = st.integers(0, 21 * 24)
    minute = np.array(draw(st.lists(hours, min_size=n_keys, max_size=n_keys)), dtype=np.int64) * 60
    shift = st.integers(-1, n_keys - 1)
    width = draw(st.integers(0, 4))
    shifts = np.array(draw(st.lists(st.lists(shift, min_size=width, max_size=width), min_size=n_keys, max_size=n_keys)))
    shifts = shifts.reshape(n_keys, width).astype(np.int64)
    knowledge, targets = [], []
    for _ in range(draw(st.integers(1, 12))):
        target = draw(st.integers(0, len(held) - 1))
        mine = sorted(held[target])
        knowledge.append(sorted(draw(st.lists(st.sampled_from(mine), min_size=0, max_size=4))))
        targets.append(target)
    return Case(held, n_keys, shifts, group, minute, knowledge, targets)


walks = st.tuples(st.sampled_from([0, 1]), st.integers(1, 4), st.integers(1, 4))


@given(cases(), walks)
@settings(max_examples=80, deadline=None, derandomize=True)  # the same examples on every machine
def test_the_rounds_give_the_rules_shares_to_the_bit(case, walk):
    """Every guess mode, with and without the rarest key's probe, from one key a round up and from one check a
    round up: the rounds, the whole walk and the rule in plain Python agree to the bit."""
    probe, round_keys, checks = walk
    for mode in MODES:
        expected = [rule_share(case, mode, k, t) for k, t in zip(case.knowledge, case.targets)]
        rounds = kernel_shares(case, mode, probe, round_keys, checks, full_walk=False)
        whole = kernel_shares(case, mode, 1, round_keys, checks, full_walk=True)
        assert rounds.tolist() == expected, mode
        assert whole.tolist() == expected, mode


def _examples(n: int) -> list[Case]:
    """The first n examples the strategy draws for a fixed seed (the same on every machine)."""
    drawn: list[Case] = []

    @given(cases())
    @settings(max_examples=n, deadline=None, derandomize=True, database=None)
    def collect(case):
        drawn.append(case)

    collect()
    return drawn


def test_the_comparison_catches_a_tie_taken_for_a_better_match_and_an_overlap_off_by_one():
    """The negative control: two wrong rules (the target beaten by a unit it only ties, so that the ties are
    never shared; each unit's overlap counted one short) differ from the kernel on the examples the property
    test draws, and the true rule does not."""
    wrong_rules = {"a tie taken for a better match": (0, True), "an overlap off by one": (1, False)}
    caught = dict.fromkeys(wrong_rules, False)
    for case in _examples(100):
        for mode in MODES:
            rounds = kernel_shares(case, mode, 1, kernels.ROUND_KEYS, kernels.CHECKS, full_walk=False).tolist()
            pairs = list(zip(case.knowledge, case.targets))
            assert rounds == [rule_share(case, mode, k, t) for k, t in pairs]
            for name, (short_by, sole) in wrong_rules.items():
                caught[name] |= rounds != [rule_share(case, mode, k, t, short_by, sole) for k, t in pairs]
    assert all(caught.values()), caught


def test_a_unit_beating_the_target_ends_the_walk_and_leaves_the_counts_zero():
    """One unit holding the whole output beats a target holding a few of its keys: the walk stops after its
    first round (share 0), and the per-unit counts the next output reuses are left all zero, as after a walk to
    the end that counts a tie of two units with the same keys (2 ties)."""
    n_keys = 64
    held = [set(range(0, n_keys, 8)), set(range(n_keys)), set(range(0, n_keys, 8))]
    case = Case(
        held,
        n_keys,
        np.zeros((n_keys, 0), dtype=np.int64),
        np.zeros(n_keys, dtype=np.int64),
        np.zeros(n_keys, dtype=np.int64),
        [],
        [],
    )
    sets = case.sets
    stamp = np.zeros(n_keys, dtype=np.int64)
    inter = np.zeros(len(held), dtype=np.int64)
    touched = np.empty(len(held), dtype=np.int64)
    checked = np.zeros(len(held), dtype=np.int64)
    picks = np.empty(2, dtype=np.int64)
    arrays = (sets.unit_offsets, sets.unit_keys, sets.key_offsets, sets.key_units)
    for output, jac_t, ties in ((np.arange(n_keys), 8 / 64, 0), (np.arange(0, n_keys, 8), 1.0, 2)):
        base = 2 + 2 * ties
        stamp[output] = base
        got = kernels._ties_unless_beaten(
            output, len(output), jac_t, *arrays, stamp, base, inter, touched, checked, picks, 2
        )
        assert got == ties
        assert not inter.any()
    assert checked[1] == 2  # the beating unit was found by a check, not by the walk to the end


def test_the_examples_reach_every_road_of_the_rounds(monkeypatch):
    """The property test is not vacuous: run as plain Python on its examples, the rounds stop at a checked unit
    that beats the target; targets succeed alone and share ties; some outputs reveal nothing, and some knowledge
    sets name no key (an empty output)."""
    stops: list[bool] = []
    original = kernels._a_pick_beats

    def counting(*args):
        stops.append(original(*args))
        return stops[-1]

    monkeypatch.setattr(kernels, "_a_pick_beats", counting)
    monkeypatch.setattr(kernels, "_ties_unless_beaten", kernels._ties_unless_beaten.py_func)
    monkeypatch.setattr(kernels, "_regularity_slice", kernels._regularity_slice.py_func)
    shares: list[float] = []
    empty = 0
    for case in _examples(100):
        empty += sum(1 for k in case.knowledge if not k)
        for mode in MODES:
            shares += kernel_shares(case, mode, 0, 1, 1, full_walk=False).tolist()
    assert any(stops)  # a check ended the walk
    assert any(0 < s < 1 for s in shares)  # a tie shared
    assert any(s == 1 for s in shares) and shares.count(0.0) > 0
    assert empty > 0
