"""The regularity attackers of the advantage gate: their best match is compiled (`kernels.regularity_shares`),
checked here against the project's reference best match (`risk.attack.best_matches` over the outputs built with
numpy); and a zone assessed on a sample reports upper confidence bounds of their success, which an attacker
measured on every unit of the zone does not exceed, where the sample's own quantile does."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.regularity import city_release

from spatial_release.risk import advantage, kernels
from spatial_release.risk.advantage import (
    REGULARITY,
    REGULARITY_ALL,
    REGULARITY_DAY,
    REGULARITY_ROUTINE,
    REGULARITY_WEEK,
    SHIFTS,
    AdvantageParams,
    KeyTimes,
    SamePlace,
    _guessers,
    _regularity,
    assess_advantage,
    key_shifts,
    quantile_higher,
    quantile_ucb,
)
from spatial_release.risk.attack import best_matches
from spatial_release.risk.estimator import KeySets

Q, CONFIDENCE = 0.95, 0.95


def _reference(sets: KeySets, guess_of, knowledge: list[np.ndarray], targets: np.ndarray) -> np.ndarray:
    """The rule spelled out with numpy: the output is the known keys and their published guesses; success 1/t when
    a guess is a key of the target and the target is among the t best Jaccard matches (`best_matches`)."""
    outputs, reveal = [], []
    for known, unit in zip(knowledge, targets.tolist()):
        guesses = guess_of(known)
        guesses = np.setdiff1d(guesses[guesses >= 0], known)
        mine = sets.unit_keys[sets.unit_offsets[unit] : sets.unit_offsets[unit + 1]]
        outputs.append(np.union1d(known, guesses))
        reveal.append(bool(np.isin(guesses, mine).any()))
    offsets = KeySets.offsets(np.array([len(o) for o in outputs]))
    flat = np.concatenate(outputs).astype(np.int64)
    rec = KeySets(sets.key_zone, offsets, flat, np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64))
    pairs, _, _, _ = best_matches(rec, sets, np.zeros(sets.keys, dtype=bool))
    n = max(sets.units, 1)
    ties = np.bincount(pairs // n, minlength=len(outputs))
    hit = np.isin(np.arange(len(outputs)) * n + targets, pairs)
    return np.where(hit, 1.0 / np.maximum(ties, 1), 0.0) * np.array(reveal, dtype=float)


def _reference_guessers(times: KeyTimes) -> dict:
    """Each attacker's guesses from a knowledge set, with numpy (`key_shifts`, `SamePlace`)."""
    same_place = SamePlace(times)
    day, week = key_shifts(times, SHIFTS[REGULARITY_DAY]), key_shifts(times, SHIFTS[REGULARITY_WEEK])
    return {
        REGULARITY_DAY: lambda known: day[known].ravel(),
        REGULARITY_WEEK: lambda known: week[known].ravel(),
        REGULARITY_ALL: same_place.of,
        REGULARITY_ROUTINE: same_place.same_time_of_day,
    }


def _random_release(rng: np.random.Generator) -> tuple[KeySets, np.ndarray]:
    """Key sets over areas x hourly buckets: each unit mostly in its home area, some elsewhere."""
    areas, hours = int(rng.integers(2, 7)), int(rng.integers(24, 24 * 16))
    starts = pd.date_range("2018-03-05", periods=hours, freq="h", tz="UTC").strftime("%Y-%m-%dT%H:%MZ")
    names = np.array([f"c{a}@{s}" for a in range(areas) for s in starts], dtype=object)
    units, keys = [], []
    for u in range(int(rng.integers(5, 100))):
        home = int(rng.integers(areas))
        held = {
            int((home if rng.random() < 0.7 else rng.integers(areas)) * hours + rng.integers(hours))
            for _ in range(int(rng.integers(1, 30)))
        }
        units += [u] * len(held)
        keys += sorted(held)
    sets = KeySets.from_codes(np.array(units), np.array(keys), np.array(["z"] * len(names), dtype=object))
    return sets, names


def _knowledge(rng: np.random.Generator, sets: KeySets, n: int) -> tuple[list[np.ndarray], np.ndarray]:
    knowledge, targets = [], []
    for _ in range(n):
        u = int(rng.integers(sets.units))
        keys = sets.unit_keys[sets.unit_offsets[u] : sets.unit_offsets[u + 1]]
        knowledge.append(np.sort(rng.choice(keys, min(4, len(keys)), replace=False)))
        targets.append(u)
    return knowledge, np.array(targets, dtype=np.int64)


@pytest.mark.parametrize("seed", range(8))
def test_the_compiled_best_match_is_the_reference_best_match(seed):
    """Every attacker, the success and the one without the target, equal to the reference to the bit (ties shared
    the same way: the compiled walk skips only knowledge sets whose target a unit strictly beats)."""
    rng = np.random.default_rng(seed)
    sets, names = _random_release(rng)
    knowledge, targets = _knowledge(rng, sets, 150)
    exposed = rng.random(sets.units) < 0.3
    times = KeyTimes.parse(names)
    reference_guesses = _reference_guessers(times)
    compiled = _guessers(times)
    for name in REGULARITY:
        expected = _reference(sets, reference_guesses[name], knowledge, targets)
        with_, without = _regularity(_match(sets), exposed, compiled[name], knowledge, targets)
        assert np.array_equal(with_, expected), name
        assert np.array_equal(without, np.where(exposed[targets], 0.0, expected)), name
    assert any(_reference(sets, reference_guesses[n], knowledge, targets).any() for n in REGULARITY)  # not all 0


@st.composite
def _small_releases(draw):
    """Tiny releases built to tie: a few areas and hours (some key names without a time, which no shift or
    same-place guess can reach), units of one to six keys, knowledge sets with repeated keys."""
    areas, hours = draw(st.integers(1, 3)), draw(st.integers(1, 60))
    starts = pd.date_range("2018-03-09", periods=hours, freq="h", tz="UTC").strftime("%Y-%m-%dT%H:%MZ")
    names = [f"c{a}@{t}" for a in range(areas) for t in starts] + [f"c{a}" for a in range(draw(st.integers(0, 2)))]
    held = draw(st.lists(st.sets(st.integers(0, len(names) - 1), min_size=1, max_size=6), min_size=1, max_size=12))
    units = np.repeat(np.arange(len(held)), [len(h) for h in held])
    keys = np.concatenate([sorted(h) for h in held])
    sets = KeySets.from_codes(units, keys, np.array(["z"] * len(names), dtype=object))
    knowledge, targets = [], []
    for _ in range(draw(st.integers(1, 8))):
        u = draw(st.integers(0, len(held) - 1))
        mine = sorted(held[u])
        picks = draw(st.lists(st.sampled_from(mine), min_size=1, max_size=4))
        knowledge.append(np.array(sorted(picks), dtype=np.int64))
        targets.append(u)
    return sets, np.array(names, dtype=object), knowledge, np.array(targets, dtype=np.int64)


@given(_small_releases())
@settings(max_examples=150, deadline=None, derandomize=True)  # the same examples on every machine
def test_the_compiled_best_match_is_the_reference_one_on_tiny_releases_built_to_tie(release):
    sets, names, knowledge, targets = release
    times = KeyTimes.parse(names)
    reference_guesses = _reference_guessers(times)
    compiled = _guessers(times)
    exposed = np.zeros(sets.units, dtype=bool)
    for name in REGULARITY:
        with_, _ = _regularity(_match(sets), exposed, compiled[name], knowledge, targets)
        assert np.array_equal(with_, _reference(sets, reference_guesses[name], knowledge, targets)), name


def test_the_compiled_best_match_refuses_codes_outside_the_key_sets():
    """The negative control of the kernel's checks: compiled code does not check its indices, its wrapper must."""
    rng = np.random.default_rng(1)
    sets, names = _random_release(rng)
    knowledge, targets = _knowledge(rng, sets, 5)
    guesses = _guessers(KeyTimes.parse(names))[REGULARITY_DAY]
    offsets = KeySets.offsets(np.array([len(k) for k in knowledge]))
    known = np.concatenate(knowledge).astype(np.int64)
    args = (_match(sets), 0, len(knowledge))
    kernels.regularity_shares(guesses, offsets, known, targets, *args)  # as given: accepted
    bad_key = known.copy()
    bad_key[2] = sets.keys
    with pytest.raises(ValueError, match="known keys"):
        kernels.regularity_shares(guesses, offsets, bad_key, targets, *args)
    bad_target = targets.copy()
    bad_target[0] = sets.units
    with pytest.raises(ValueError, match="targets"):
        kernels.regularity_shares(guesses, offsets, known, bad_target, *args)
    with pytest.raises(ValueError, match="shift table"):
        kernels.regularity_shares(guesses._replace(shifts=guesses.shifts[:-1]), offsets, known, targets, *args)
    with pytest.raises(ValueError, match="span their keys"):
        kernels.regularity_shares(guesses, offsets[:-1], known, targets[:-1], _match(sets), 0, len(knowledge) - 1)
    # the key sets are checked once, when they are built, and the kernel takes no others
    with pytest.raises(TypeError, match="MatchSets"):
        kernels.regularity_shares(guesses, offsets, known, targets, sets, 0, len(knowledge))  # type: ignore[arg-type]
    pairs = (sets.unit_offsets, sets.unit_keys, sets.key_offsets, sets.key_units)
    bad_unit_key = sets.unit_keys.copy()
    bad_unit_key[0] = sets.keys
    with pytest.raises(ValueError, match="units' keys"):
        kernels.MatchSets(pairs[0], bad_unit_key, *pairs[2:])
    bad_posting = sets.key_units.copy()
    bad_posting[0] = sets.units
    with pytest.raises(ValueError, match="postings' units"):
        kernels.MatchSets(*pairs[:3], bad_posting)
    short = sets.unit_offsets.copy()
    short[-1] -= 1
    with pytest.raises(ValueError, match="units' offsets"):
        kernels.MatchSets(short, *pairs[1:])
    with pytest.raises(ValueError):  # read-only: checked once, not changed after
        _match(sets).unit_keys[0] = 0


def _match(sets: KeySets) -> kernels.MatchSets:
    return kernels.MatchSets(sets.unit_offsets, sets.unit_keys, sets.key_offsets, sets.key_units)


def test_a_sampled_zone_reports_no_less_than_the_attackers_on_every_unit():
    """One zone of 1,200 units: the default assesses 100 sampled targets and reports upper confidence bounds; the
    same attackers on every unit (the figure a hidden attacker measuring every unit gets) are not above them."""
    sets, names, counts, hidden = city_release(1_200, cells=12, days=21, seed=4)
    for seed in (1, 2, 3):
        sampled = assess_advantage(sets, names, counts, 5, AdvantageParams(seed=seed), 0.05, None, hidden)
        every = AdvantageParams(seed=seed, regularity_whole_zone=10**6)
        whole = assess_advantage(sets, names, counts, 5, every, 0.05, None, hidden)
        assert [z.regularity_targets for z in sampled.zones] == [100]
        assert [z.regularity_targets for z in whole.zones] == [z.units for z in whole.zones]
        for mine, truth in zip(sampled.zones, whole.zones):
            assert truth.success_with > 0  # the attackers do succeed here
            assert mine.success_with >= truth.success_with
            assert mine.success_without >= truth.success_without


def test_the_sample_bound_covers_the_attackers_quantile_where_the_sample_quantile_does_not(monkeypatch):
    """The per-unit success of the strongest regularity attacker over every unit of the zone, sampled 100 at a
    time as the gate samples: the upper confidence bound covers the zone's quantile at its confidence; the
    sample's own quantile (the figure the gate reported before) falls below it far more often."""
    sets, names, counts, hidden = city_release(1_200, cells=12, days=21, seed=4)
    whole = AdvantageParams(regularity_whole_zone=10**6)
    per_unit = _per_unit_success(monkeypatch, sets, names, counts, hidden, whole)
    truth = quantile_higher(per_unit, Q)
    rng = np.random.default_rng(8)
    trials, covered, plain = 300, 0, 0
    for _ in range(trials):
        sample = per_unit[rng.choice(len(per_unit), 100, replace=False)]
        covered += quantile_ucb(np.zeros(0), len(per_unit), sample, Q, CONFIDENCE) >= truth
        plain += quantile_higher(sample, Q) >= truth
    assert covered / trials >= CONFIDENCE - 0.03
    assert plain / trials < 0.85


def _per_unit_success(monkeypatch, sets, names, counts, hidden, params: AdvantageParams) -> np.ndarray:
    """Every unit's success (mean over its knowledge draws, the strongest regularity attacker), read from the
    gate's own per-target figures by capturing them: the zone's table holds only the quantile."""
    captured: list[np.ndarray] = []
    original = advantage._zone_figures

    def capture(zone, rows, sample, linked, member, classified, recovered, found, *rest):
        captured.append(np.max(np.vstack([w for w, _ in found.values()]), axis=0))
        return original(zone, rows, sample, linked, member, classified, recovered, found, *rest)

    monkeypatch.setattr(advantage, "_zone_figures", capture)
    assess_advantage(sets, names, counts, 5, params, 0.05, None, hidden)
    # the gate's figures come first, from no regularity target (they do not read them), then the report's
    (values,) = [found for found in captured if len(found)]
    return values
