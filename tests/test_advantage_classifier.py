"""The membership classifier on the counts (Pyrgelis et al.'s attack on aggregates, `risk.advantage`): per target,
the advantage of the best threshold test of "in the data" from the published counts of its known keys, against
a Gaussian count model the adversary learns from the release's other buckets. Its figure is checked against an
attacker of our own that plays the game in simulated worlds, and its parts against what they must do."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from spatial_release.risk import advantage
from spatial_release.risk.advantage import (
    CLASSIFIER,
    AdvantageParams,
    KeyTimes,
    assess_advantage,
    classifier_advantage,
    count_model,
    key_classes,
)
from spatial_release.risk.estimator import KeySets

START = pd.Timestamp("2018-01-01", tz="UTC")


def _best_threshold_advantage(scores_in: np.ndarray, scores_out: np.ndarray) -> float:
    """max over thresholds t of P(score_in > t) - P(score_out > t), on the samples (an optimistic estimate)."""
    cuts = np.unique(np.concatenate([scores_in, scores_out]))
    tpr = 1.0 - np.searchsorted(np.sort(scores_in), cuts, side="right") / len(scores_in)
    fpr = 1.0 - np.searchsorted(np.sort(scores_out), cuts, side="right") / len(scores_out)
    return float((tpr - fpr).max())


@pytest.mark.parametrize("rate,present_share", [(20.0, 0.0), (6.0, 0.0), (20.0, 0.5)])
def test_an_attacker_playing_the_game_does_not_beat_the_classifier_figure(rate, present_share):
    """Worlds of 4 known keys, each with 30 reference buckets of the same area and hour; the others' counts
    Poisson; the target in the known bucket and in a share of the references. Our attacker scores each world by
    the likelihood ratio from the references (as an adversary who learned the model would) and takes the best
    threshold in hindsight. The gate's figure for the same worlds must not be below its advantage. Negative
    control: a figure that ignores the count's shift (a target taken to be everywhere it is known) is beaten."""
    rng = np.random.default_rng(int(rate * 10 + present_share * 100))
    worlds, keys, refs = 3000, 4, 30
    scores = {}
    figures, blind = np.empty(0), np.empty(0)  # set by the "in" world
    for world in ("in", "out"):
        known = rng.poisson(rate, (worlds, keys)).astype(float)
        references = rng.poisson(rate, (worlds, keys, refs)).astype(float)
        present = rng.random((worlds, keys, refs)) < present_share
        if world == "in":
            known += 1
            references += present
            mu, var = references.mean(axis=2), np.maximum(references.var(axis=2, ddof=1), 0.25)
            shift = 1.0 - present.mean(axis=2)
            figures = classifier_advantage(var, shift)
            blind = classifier_advantage(var, np.zeros_like(shift))
        else:
            mu, var = references.mean(axis=2), np.maximum(references.var(axis=2, ddof=1), 0.25)
        scores[world] = ((known - mu - 0.5) / var).sum(axis=1)
    empirical = _best_threshold_advantage(scores["in"], scores["out"])
    assert empirical > 0.05  # the worlds do leak: a test of two zeros would prove nothing
    assert float(np.mean(figures)) >= empirical - 0.03  # three standard errors of 3,000 worlds
    assert float(np.mean(blind)) < empirical - 0.05  # the negative control is beaten


def test_the_count_model_is_the_other_buckets_of_the_same_area_and_hour():
    classes = np.array([0, 0, 0, 0, 1, 1])
    counts = np.array([10, 12, 14, 100, 7, 9])
    references, variance = count_model(classes, counts)
    assert references.tolist() == [3, 3, 3, 3, 1, 1]
    assert variance[0] == pytest.approx(np.var([12, 14, 100], ddof=1))  # leave-one-out
    assert variance[3] == pytest.approx(np.var([10, 12, 14], ddof=1))
    assert variance[4] == 7 and variance[5] == 9  # too few references: the Poisson variance, the count


def test_a_day_bucket_keeps_its_class_across_the_change_to_summer_time():
    """Day buckets start at local midnight: 05:00 UTC before New York's DST change on 2018-03-11, 04:00 after. In
    the policy's time zone they are one class (the same area at the same local hour); in UTC they split in two,
    each with half the references (the negative control)."""
    names = np.array(
        [f"c1@2018-03-{d:02d}T05:00Z" for d in range(5, 12)]
        + [f"c1@2018-03-{d:02d}T04:00Z" for d in range(12, 17)]
        + ["c2@2018-03-12T04:00Z", "c1:ward@2018-03-12T04:00Z"],
        dtype=object,
    )
    local = key_classes(KeyTimes.parse(names), "America/New_York")
    assert len(set(local[:12].tolist())) == 1  # one class for the area's twelve days
    assert len(set(local.tolist())) == 3  # another area and another level stay apart
    utc = key_classes(KeyTimes.parse(names))
    assert len(set(utc[:12].tolist())) == 2


def test_a_target_in_every_reference_bucket_gains_nothing_and_a_rare_visitor_gains():
    """Removing someone who is in the cell every day lowers the references as much as the count: the counts
    tell nothing; a one-off visitor moves the count alone."""
    variance = np.full((2, 4), 4.0)
    everyday, once = (
        classifier_advantage(variance[:1], np.zeros((1, 4))),
        classifier_advantage(variance[1:], np.ones((1, 4))),
    )
    assert everyday[0] == 0.0 and once[0] > 0.3
    # a larger count variance (a busier, more variable cell) hides the same visitor better
    assert classifier_advantage(np.full((1, 4), 100.0), np.ones((1, 4)))[0] < once[0]


def _city(regular: bool) -> tuple[KeySets, np.ndarray, np.ndarray]:
    """One zone, 8 cells, 28 days; 400 units at home every day, plus 30 visitors seen once each. Counts of home
    cells vary a little from day to day (a share of the units away)."""
    rng = np.random.default_rng(4)
    rows = []
    for u in range(400):
        home = u % 8
        for d in range(28):
            if rng.random() < 0.9:
                rows.append((u, home, d))
    for v in range(30):
        rows.append((400 + v, int(rng.integers(8)), int(rng.integers(28))))
    frame = pd.DataFrame(rows, columns=["unit", "cell", "day"]).drop_duplicates()
    if regular:
        frame = frame[frame["unit"] < 400]
    names = (
        "c"
        + frame["cell"].astype(str)
        + "@"
        + (START + pd.to_timedelta(frame["day"], unit="D")).dt.strftime("%Y-%m-%dT%H:%MZ")
    )
    key_codes, keys = pd.factorize(names, sort=True)
    unit_codes, _ = pd.factorize(frame["unit"], sort=True)
    sets = KeySets.from_codes(unit_codes.astype(np.int64), key_codes.astype(np.int64), np.full(len(keys), "z", dtype=object))
    counts = np.bincount(key_codes)
    return sets, np.asarray(keys, dtype=object), counts


def test_the_gate_reads_the_classifier_only_when_the_policy_says_so():
    sets, names, counts = _city(regular=False)
    assert counts.min() > 5  # no key at the threshold: the membership attacker gains on nobody
    reported = assess_advantage(sets, names, counts, 5, AdvantageParams(), 0.05).zones[0]
    gated = assess_advantage(sets, names, counts, 5, AdvantageParams(gate_classifier=True), 0.05).zones[0]
    assert reported.classifier == gated.classifier > 0.0  # the visitors are exposed by the counts
    assert reported.advantage_ucb < reported.classifier  # reported beside the gate, not read by it
    assert gated.advantage_ucb >= gated.classifier and gated.strongest == CLASSIFIER


def test_visitors_raise_the_classifier_figure_of_a_regular_city():
    regular = assess_advantage(*_city(regular=True), 5, AdvantageParams(), 0.05).zones[0]
    mixed = assess_advantage(*_city(regular=False), 5, AdvantageParams(), 0.05).zones[0]
    assert mixed.classifier > regular.classifier


def test_the_classifier_scores_the_same_in_blocks_of_any_size(monkeypatch):
    """The classifier scores its knowledge sets a block at a time (memory): blocks of 1, 7 and 1,000 rows give
    every entry the same figure, to the bit, as all the rows at once; 7 leaves a partial last block."""
    sets, names, counts = _city(regular=False)
    classes = key_classes(KeyTimes.parse(names))
    params = AdvantageParams(gate_classifier=True)
    entries = advantage._entries(sets, None)
    assert (len(entries.unit) * params.draws) % 7  # a partial last block of 7

    def scored(rows: int) -> np.ndarray:
        monkeypatch.setattr(advantage, "CLASSIFIER_ROWS", rows)
        return advantage._classifier_per_entry(sets, entries, classes, counts, params)

    whole = scored(1 << 40)
    assert (whole > 0).sum() >= 30  # the visitors at least: a figure that blocks could lose
    for rows in (1, 7, 1000):
        assert np.array_equal(scored(rows), whole)
