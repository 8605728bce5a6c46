"""An empirical privacy audit of a counts mechanism with a canary unit (Jagielski, Ullman and Oprea 2020; Nasr
et al. 2021): run the mechanism many times on the data without the canary and with it, let a membership test
guess which, and turn its error rates into a lower bound on epsilon at the Clopper-Pearson confidence bounds.
A correct (epsilon, delta)-DP mechanism keeps that bound at or below epsilon whatever the test; a mechanism
whose noise is switched off gives a bound far above it (the negative control)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import binomtest

from spatial_release.dp.accounting import advantage_bound
from spatial_release.dp.mechanism import Calibration, key_strings

KEY = ["level", "area_id", "bucket_start"]
Counts = dict[str, int]
Mechanism = Callable[[Counts], Counts]


def clopper_pearson(successes: int, trials: int, confidence: float) -> tuple[float, float]:
    """The exact two-sided binomial confidence interval of a rate."""
    interval = binomtest(successes, trials).proportion_ci(confidence_level=confidence, method="exact")
    return float(interval.low), float(interval.high)


def epsilon_lower_bound(fp: int, negatives: int, fn: int, positives: int, delta: float, confidence: float) -> float:
    """max(log((1 - delta - FPR) / FNR), log((1 - delta - FNR) / FPR)) with each rate at its upper
    Clopper-Pearson bound (0 when the test does no better than that)."""
    fpr_hi = clopper_pearson(fp, negatives, confidence)[1]
    fnr_hi = clopper_pearson(fn, positives, confidence)[1]
    bounds = [0.0]
    for a, b in ((fpr_hi, fnr_hi), (fnr_hi, fpr_hi)):
        if b > 0 and 1 - delta - a > 0:
            bounds.append(math.log((1 - delta - a) / b))
    return max(bounds)


def opendp_mechanism(calibration: Calibration) -> Mechanism:
    """The release's mechanism: OpenDP's calibrated thresholded measurement over the bounded counts."""
    measurement = calibration.measurement()
    return lambda counts: measurement(counts)


def noiseless_mechanism(threshold: int) -> Mechanism:
    """The negative control: the same selection by threshold with the noise switched off (exact counts)."""
    return lambda counts: {key: n for key, n in counts.items() if n >= threshold}


def keyed(counts: pd.DataFrame) -> Counts:
    """Bounded counts (level, area_id, bucket_start, n) as the mechanism's input map."""
    return dict(zip(key_strings(counts), counts["n"].astype("int64").tolist()))


def canary_statistic(published: Counts, canary_keys: Sequence[str]) -> float:
    """The membership test's score: the sum of the published figures of the canary's keys (absent: 0). The
    canary adds one to each of them, so the score is larger with it (under Gaussian noise of one scale the
    likelihood-ratio test ranks outcomes by this sum; under Laplace noise it is close to it)."""
    return float(sum(published.get(key, 0) for key in canary_keys))


def shown_statistic(published: Counts, canary_keys: Sequence[str]) -> float:
    """The risk gate's membership rule against a threshold: how many of the canary's keys are published at
    all (a key at the boundary shows with the canary and not without it)."""
    return float(sum(key in published for key in canary_keys))


@dataclass(frozen=True)
class AuditResult:
    trials: int
    false_positives: int
    false_negatives: int
    epsilon_lower: float
    advantage: float  # TPR - FPR of the test
    advantage_upper: float  # at the confidence bounds: TPR_hi - FPR_lo
    advantage_bound: float  # what (epsilon, delta) allows

    def describe(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def audit_membership(
    without: pd.DataFrame,
    with_canary: pd.DataFrame,
    canary_keys: pd.DataFrame,
    mechanism: Mechanism,
    epsilon: float,
    delta: float,
    trials: int,
    seed: int,
    confidence: float = 0.95,
    calibration_trials: int = 50,
    statistic: Callable[[Counts, Sequence[str]], float] = canary_statistic,
) -> AuditResult:
    """Run `mechanism` `trials` times on each of the neighbouring count tables (bounded counts without and with
    the canary unit) and test membership by thresholding `statistic` halfway between its means under the
    two tables, estimated on `calibration_trials` separate runs of each (the cut is never fitted to the audited
    trials). The mechanism runs on the canary's keys only: its noise and selection act on each key alone, so
    the figures of the other keys change nothing the test sees, and consistency post-processing (which can only
    lose information) is left out, giving the attacker the raw output. The seed drives only the order of the
    trials; the noise is the mechanism's own."""
    rng = np.random.default_rng(seed)
    keys = key_strings(canary_keys)
    tables = {
        member: {k: v for k, v in keyed(t).items() if k in set(keys)}
        for member, t in ((False, without), (True, with_canary))
    }

    def score(member: bool) -> float:
        return statistic(mechanism(tables[member]), keys)

    cut = (
        np.mean([score(False) for _ in range(calibration_trials)])
        + np.mean([score(True) for _ in range(calibration_trials)])
    ) / 2
    members = rng.permutation(np.repeat([False, True], trials))
    fp = fn = 0
    for member in members:
        guess = score(bool(member)) > cut
        fp += int(guess and not member)
        fn += int(member and not guess)
    tpr, fpr = 1 - fn / trials, fp / trials
    tpr_hi = 1 - clopper_pearson(fn, trials, confidence)[0]
    fpr_lo = clopper_pearson(fp, trials, confidence)[0]
    return AuditResult(
        trials=trials,
        false_positives=fp,
        false_negatives=fn,
        epsilon_lower=epsilon_lower_bound(fp, trials, fn, trials, delta, confidence),
        advantage=tpr - fpr,
        advantage_upper=tpr_hi - fpr_lo,
        advantage_bound=advantage_bound(epsilon, delta),
    )


def canary_keys_of(with_canary: pd.DataFrame, without: pd.DataFrame) -> pd.DataFrame:
    """The figures the canary moves: the keys whose bounded count differs between the two tables."""
    both = with_canary.merge(without, on=KEY, how="left", suffixes=("", "_without")).fillna({"n_without": 0})
    return both.loc[both["n"] != both["n_without"], KEY].reset_index(drop=True)


def neighbouring_counts(
    membership: pd.DataFrame, canary: pd.DataFrame, count: Callable[[pd.DataFrame], pd.DataFrame]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The bounded counts of the data without and with the canary's rows (`count`: bounding and counting)."""
    return count(membership), count(pd.concat([membership, canary], ignore_index=True))


__all__: Sequence[str] = [
    "AuditResult",
    "audit_membership",
    "canary_keys_of",
    "canary_statistic",
    "clopper_pearson",
    "epsilon_lower_bound",
    "neighbouring_counts",
    "noiseless_mechanism",
    "opendp_mechanism",
    "shown_statistic",
]
