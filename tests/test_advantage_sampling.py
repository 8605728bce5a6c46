"""The advantage gate on sampled recovery targets: a large zone's recovery bound is known for a uniform sample of
its units, and the gate reads upper confidence bounds (`quantile_ucb`, `count_ucb`). Each bound is checked
against the figure computed from every unit, which the tests hold; a plain sample quantile, which the gate must
not read, is the negative control: it falls below the truth far more often than the confidence allows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spatial_release.risk.advantage import (
    AdvantageParams,
    RecoverySuccess,
    assess_advantage,
    count_ucb,
    quantile_higher,
    quantile_ucb,
)
from spatial_release.risk.estimator import KeySets

Q, CONFIDENCE = 0.95, 0.95


def _population(rng: np.random.Generator, n: int, exposed_share: float) -> np.ndarray:
    """Per unit a recovery bound: most near 0, a share of exposed units with large ones."""
    values = rng.uniform(0.0, 0.02, n)
    hot = rng.random(n) < exposed_share
    values[hot] = rng.uniform(0.05, 0.6, int(hot.sum()))
    return values


@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=60), st.integers(0, 20), st.floats(0.5, 0.99))
@settings(max_examples=200, deadline=None)
def test_the_bound_is_the_quantile_itself_when_every_value_is_known_or_sampled(values, ones, q):
    values = np.asarray(values)
    exact = quantile_higher(np.concatenate([values, np.ones(ones)]), q)
    assert quantile_ucb(np.ones(ones), len(values), values, q, CONFIDENCE) == exact


@pytest.mark.parametrize("exposed_share", [0.02, 0.05, 0.1])
def test_the_quantile_bound_covers_the_quantile_of_every_unit_at_its_confidence(exposed_share):
    rng = np.random.default_rng(17)
    trials, n_units, n_sample, n_boundary = 300, 4_000, 400, 60
    covered = naive_covered = 0
    for _ in range(trials):
        values = _population(rng, n_units, exposed_share)
        truth = quantile_higher(np.concatenate([values, np.ones(n_boundary)]), Q)
        sample = values[rng.choice(n_units, n_sample, replace=False)]
        covered += quantile_ucb(np.ones(n_boundary), n_units, sample, Q, CONFIDENCE) >= truth
        # the plain estimate: each sampled value standing for n_units / n_sample units
        plain = np.concatenate([np.repeat(sample, n_units // n_sample), np.ones(n_boundary)])
        naive_covered += quantile_higher(plain, Q) >= truth
    assert covered / trials >= CONFIDENCE - 0.03  # 0.95 less three standard errors of 300 trials
    # the negative control: the sample's own quantile is no bound (about half the time below the truth)
    assert naive_covered / trials < 0.8


def test_the_count_bound_covers_the_units_over_the_ceiling_at_its_confidence():
    rng = np.random.default_rng(5)
    trials, n_units, n_sample, ceiling = 400, 3_000, 300, 0.05
    covered = naive_covered = 0
    for _ in range(trials):
        values = _population(rng, n_units, 0.04)
        truth = int((values > ceiling).sum())
        hits = int((values[rng.choice(n_units, n_sample, replace=False)] > ceiling).sum())
        covered += count_ucb(n_units, n_sample, hits, CONFIDENCE) >= truth
        naive_covered += round(hits * n_units / n_sample) >= truth
    assert covered / trials >= CONFIDENCE - 0.03
    assert naive_covered / trials < 0.8


def test_the_count_bound_is_exact_when_every_unit_is_sampled_and_grows_as_the_sample_shrinks():
    assert count_ucb(500, 500, 7, CONFIDENCE) == 7
    bounds = [count_ucb(10_000, n, n // 100, CONFIDENCE) for n in (5_000, 1_000, 200)]
    assert bounds[0] < bounds[1] < bounds[2]
    assert all(b >= 100 for b in bounds)  # never below the plain estimate of 1 % of 10,000


def test_the_gate_on_a_sampled_zone_is_not_below_the_gate_on_every_unit():
    """One zone of 3,000 units, no boundary key, a known recovery bound per unit: the gate that links a sample
    of 300 reads bounds at least the figures of the gate that links every unit (the same provider)."""
    rng = np.random.default_rng(9)
    units = 3_000
    truth = _population(rng, units, 0.06)
    keys = np.arange(units) % 40  # 40 keys of 75 units each: no count at k
    names = np.array([f"c{i}@2018-01-01T00:00Z" for i in range(40)], dtype=object)
    sets = KeySets.from_codes(np.arange(units, dtype=np.int64), keys.astype(np.int64), np.full(40, "z", dtype=object))
    counts = np.bincount(keys, minlength=40)
    linked_sizes = []

    def provider(targets) -> RecoverySuccess:
        unit, zone = targets
        linked_sizes.append(len(unit))
        return RecoverySuccess(np.asarray(unit, dtype=np.int64), np.asarray(zone, dtype=object), truth[unit])

    whole = assess_advantage(
        sets, names, counts, 5, AdvantageParams(recovery_targets_per_zone=units), 0.05, {"z": 6_000.0}, None, provider
    )
    sampled = assess_advantage(
        sets, names, counts, 5, AdvantageParams(recovery_targets_per_zone=300), 0.05, {"z": 6_000.0}, None, provider
    )
    assert linked_sizes == [units, 300]
    exact = quantile_higher(truth, Q)
    assert whole.zones[0].advantage_ucb == exact and whole.zones[0].exposed == int((truth > 0.05).sum())
    assert sampled.zones[0].targets == 300 and whole.zones[0].targets == units
    assert sampled.zones[0].advantage_ucb >= exact
    assert sampled.zones[0].exposed >= int((truth > 0.05).sum())
    assert "300 sampled targets" in sampled.recovery and whole.recovery.startswith("run on every unit")


def test_a_zone_assessed_whole_is_marked_complete_so_its_unit_count_is_not_published():
    """The units of zones with no published figure are one entry; when every one of them is a target, the number
    of targets is their count, an unpublished figure: the zone must say it was assessed whole (release.json then
    shows no number), and a sampled zone must not."""
    from spatial_release.risk.advantage import NO_PUBLISHED_FIGURE
    from spatial_release.stages.risk import with_advantage_figures

    units = 12
    sets = KeySets.from_codes(
        np.arange(units, dtype=np.int64), np.zeros(units, dtype=np.int64), np.array(["z"], dtype=object)
    )
    names = np.array(["c0@2018-01-01T00:00Z"], dtype=object)
    hidden = (np.arange(units, dtype=np.int64), np.full(units, "w", dtype=object))  # all truly in w, nothing shown there

    def provider(targets) -> RecoverySuccess:
        return RecoverySuccess(
            np.asarray(targets[0], dtype=np.int64), np.asarray(targets[1], dtype=object), np.zeros(len(targets[0]))
        )

    for per_zone, whole in ((50, True), (5, False)):
        params = AdvantageParams(recovery_targets_per_zone=per_zone)
        report = assess_advantage(sets, names, np.array([units]), 5, params, 0.05, None, hidden, provider)
        merged = next(z for z in report.zones if z.zone == NO_PUBLISHED_FIGURE)
        assert merged.units is None and merged.complete is whole
        row = next(z for z in with_advantage_figures([], report) if z.zone == NO_PUBLISHED_FIGURE).public_row("journalist")
        assert (row["targets"] is None) is whole


def test_a_sampled_zone_reports_no_less_success_than_the_recovery_has_on_every_unit():
    """success_with is what hidden attackers are compared with: from a sample it is an upper confidence bound, so
    the recovery's success over every unit of the zone is not above it (negative control: the sample's plain
    quantile is, for this zone)."""
    rng = np.random.default_rng(21)
    units = 3_000
    success = _population(rng, units, 0.06)
    names = np.array([f"c{i}@2018-01-01T00:00Z" for i in range(40)], dtype=object)
    keys = np.arange(units) % 40
    sets = KeySets.from_codes(np.arange(units, dtype=np.int64), keys.astype(np.int64), np.full(40, "z", dtype=object))
    linked: list[np.ndarray] = []

    def provider(targets) -> RecoverySuccess:
        linked.append(np.asarray(targets[0]))
        return RecoverySuccess(
            np.asarray(targets[0], dtype=np.int64), np.asarray(targets[1], dtype=object), success[targets[0]]
        )

    zone = assess_advantage(
        sets, names, np.bincount(keys), 5, AdvantageParams(recovery_targets_per_zone=300), 0.05, None, None, provider
    ).zones[0]
    truth = quantile_higher(success, Q)
    assert zone.success_with >= truth
    assert quantile_higher(success[linked[0]], Q) < truth  # this zone's sample alone under-reports
