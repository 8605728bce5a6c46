"""The empirical audit of the DP mechanism with a canary unit: the epsilon lower bound it measures stays at or
below the configured epsilon, the measured advantage within the bound that epsilon implies, and the same
mechanism with its noise switched off fails the audit (the negative control)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from spatial_release.dp import DpParams, Sensitivity, bound_contributions, bounded_counts, calibrate
from spatial_release.dp.audit import (
    audit_membership,
    canary_keys_of,
    clopper_pearson,
    epsilon_lower_bound,
    neighbouring_counts,
    noiseless_mechanism,
    opendp_mechanism,
    shown_statistic,
)
from spatial_release.levels import LEAF, TOTAL

DAY0 = pd.Timestamp("2018-01-01", tz="UTC")
PARENTS = [("district", lambda a: "d" + str(int(a[1:]) // 2))]
LEVELS = [LEAF, "district", TOTAL]
B, C = 2, 1
TRIALS = 300


def crowd(units: int = 1200, seed: int = 5) -> pd.DataFrame:
    """Units in 4 cells over 3 days, each on 2 of the days: every figure well above the threshold."""
    rng = np.random.default_rng(seed)
    rows = [
        (f"u{u}", DAY0 + pd.Timedelta(days=int(d)), f"c{int(rng.integers(4))}")
        for u in range(units)
        for d in rng.choice(3, 2, replace=False)
    ]
    return pd.DataFrame(rows, columns=["unit", "bucket_start", "cell_id"])


CANARY = pd.DataFrame(
    {"unit": "canary", "bucket_start": [DAY0, DAY0 + pd.Timedelta(days=1), DAY0 + pd.Timedelta(days=2)], "cell_id": "c0"}
)


def counts(rows: pd.DataFrame) -> pd.DataFrame:
    return bounded_counts(bound_contributions(rows, B, C, seed=9), PARENTS)


@pytest.fixture(scope="module")
def neighbours():
    without, with_canary = neighbouring_counts(crowd(), CANARY, counts)
    return without, with_canary, canary_keys_of(with_canary, without)


def test_clopper_pearson_and_the_bound_formula():
    lo, hi = clopper_pearson(0, 100, 0.95)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 100), rel=1e-9)
    # a perfect test over 300 trials of each kind: both error rates 0, bounded by ~0.0122
    assert epsilon_lower_bound(0, 300, 0, 300, 1e-6, 0.95) == pytest.approx(
        math.log((1 - 1e-6 - (1 - 0.025 ** (1 / 300))) / (1 - 0.025 ** (1 / 300)))
    )
    assert epsilon_lower_bound(150, 300, 150, 300, 1e-6, 0.95) == 0.0  # a coin flip proves nothing


def test_the_canary_moves_at_most_l0_figures(neighbours):
    without, with_canary, keys = neighbours
    assert 0 < len(keys) <= Sensitivity.of(LEVELS, B, C).l0
    moved = with_canary.merge(without, on=["level", "area_id", "bucket_start"], suffixes=("", "_o"))
    assert ((moved["n"] - moved["n_o"]).abs() <= 1).all()


@pytest.mark.slow
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_audit_of_the_opendp_mechanism_stays_within_epsilon(neighbours, epsilon):
    without, with_canary, keys = neighbours
    calibration = calibrate(DpParams("approx", 1e-6, B, C, epsilon=epsilon), Sensitivity.of(LEVELS, B, C))
    result = audit_membership(without, with_canary, keys, opendp_mechanism(calibration), epsilon, 1e-6, TRIALS, seed=1)
    assert result.epsilon_lower <= epsilon
    assert result.advantage <= result.advantage_bound + 0.1  # sampling error of 300 + 300 trials
    # the test is not blind: at epsilon 4 the canary is seen more often than not
    if epsilon == 4.0:
        assert result.advantage > 0.2


def test_the_mechanism_with_its_noise_switched_off_fails_the_audit(neighbours):
    without, with_canary, keys = neighbours
    epsilon = 1.0
    calibration = calibrate(DpParams("approx", 1e-6, B, C, epsilon=epsilon), Sensitivity.of(LEVELS, B, C))
    broken = noiseless_mechanism(calibration.threshold)
    result = audit_membership(without, with_canary, keys, broken, epsilon, 1e-6, TRIALS, seed=1)
    assert result.false_positives == result.false_negatives == 0
    assert result.epsilon_lower > epsilon  # caught: about 4.4 at 300 + 300 trials
    assert result.advantage > result.advantage_bound


@pytest.fixture(scope="module")
def boundary_neighbours():
    """The canary in a rare cell whose other units number one less than the mechanism's threshold at epsilon 1:
    the boundary case of a k threshold (the key shows with the canary, not without it, when nothing is noisy)."""
    threshold = calibrate(DpParams("approx", 1e-6, B, C, epsilon=1.0), Sensitivity.of(LEVELS, B, C)).threshold
    rare = pd.DataFrame({"unit": [f"r{i}" for i in range(threshold - 1)], "bucket_start": DAY0, "cell_id": "c9"})
    canary = CANARY.assign(cell_id="c9")
    without, with_canary = neighbouring_counts(pd.concat([crowd(), rare], ignore_index=True), canary, counts)
    return without, with_canary, canary_keys_of(with_canary, without), threshold


@pytest.mark.slow
def test_the_gates_membership_rule_breaks_a_noiseless_threshold_and_not_the_mechanism(boundary_neighbours):
    """`shown_statistic` is the advantage gate's membership rule (in if a known key is published): advantage 1
    against the threshold without noise at the boundary, within the DP bound against OpenDP's mechanism."""
    without, with_canary, keys, threshold = boundary_neighbours
    calibration = calibrate(DpParams("approx", 1e-6, B, C, epsilon=1.0), Sensitivity.of(LEVELS, B, C))
    broken = audit_membership(
        without, with_canary, keys, noiseless_mechanism(threshold), 1.0, 1e-6, TRIALS, seed=2, statistic=shown_statistic
    )
    assert broken.advantage == 1.0 and broken.epsilon_lower > 1.0
    sound = audit_membership(
        without, with_canary, keys, opendp_mechanism(calibration), 1.0, 1e-6, TRIALS, seed=2, statistic=shown_statistic
    )
    assert sound.epsilon_lower <= 1.0 and sound.advantage <= sound.advantage_bound + 0.1
