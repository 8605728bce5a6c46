"""Risk as the advantage the release gives an attacker: each attacker runs twice with the same side knowledge,
on the candidate release and on the counterfactual release of the same data without the target, and the
per-target advantage is the difference. Domain code: no Dagster, no files.

**The side knowledge** is the landscape's: p published keys of the target's trace, one of them in the anchor
zone (`draws` sets per target, seeded), the same model as the uniqueness bound. A unit with a true point in a
zone where none of its keys is published is a target of that zone too, with p - 1 keys drawn from its keys
elsewhere (the adversary knows it was in the zone, which no published key shows).

**The counterfactual.** Removing the target lowers by one every published count it is in. A count at exactly k
becomes k - 1 and is withheld: the target's *boundary* keys vanish from the counterfactual release, and the
complements that protected them may move, taking other keys of the target with them. A unit with no boundary key
changes the publication of none of its own keys (`tests/test_advantage_counterfactual.py` re-protects real
counterfactuals and checks both); complements that move elsewhere are not a test an attacker can run without
every other unit's data. So the gate takes, for a unit with a boundary key, every one of its published keys as
gone without it (an over-approximation of what changes), and for the others nothing.

**The attackers** (the gate reads, for each target, the one with the largest advantage):
- `membership_threshold` (Pyrgelis et al., NDSS 2018, against the thresholds): "the target is in the data iff
  the published key I know it was in is published". For a unit with a boundary key some key of it is published
  with it and not without it: advantage 1 (at most 1 for any knowledge, so never below the truth); for the
  others the two releases agree on every key of theirs: advantage 0. Computed for every unit, never sampled.
- `membership_classifier` (Pyrgelis et al.'s classifier on the aggregates): the best threshold test of "in the
  data" from the counts of the known keys, under a Gaussian count model the adversary learns from the release's
  other buckets of the same area and local hour (`classifier_advantage`). Exact for every unit. Reported per zone; read
  by the gate only under `risk.count_classifier: gate` (`AdvantageParams.gate_classifier`).
- `regularity_day`, `regularity_week`, `regularity_all` (attribute inference with regularity priors;
  `regularity_day` is the trivial attacker): the target was in the same published area the day
  before and the day after each known key (`_week`: and the same time a week before and after; `_all`: at every
  bucket within a week of it; `_routine`, home at night and work by day: at the same time of day on every day of
  the period). The output is the known keys and those guesses that are published. Success is the
  project's rule: the target is the best Jaccard match of the output among every unit's published key set (a
  tie of t counts 1/t), and the output shows a published key of the target that the adversary did not know.
  Without a target that has a boundary key, none of its keys is taken as published. Run on every unit of a zone
  of up to `regularity_whole_zone` units, else on `targets_per_zone` sampled targets: their success with and
  without is reported; their advantage is never above the membership attacker's (it needs a boundary key too).
  The best match is `kernels.regularity_shares`: what `risk.attack.best_matches` finds, without the walk of
  every posting where a holder of the target's rarest known key, or a unit a part of the walk ranks first,
  already beats the target.
- `trajectory_recovery` (`risk.attack`: Xu et al.'s recovery from the counts, then linkage with the known
  points). It reads the counts, so it can gain on a unit without a boundary key too: without the target its
  counts are one lower and the recovered trajectories move (`tests/test_advantage_recovery.py` re-runs the
  recovery without chosen targets and finds such gains). The recovery is a global problem, so it is re-run per
  target only where it matters: it runs once on every view the candidate publishes (the worst view per
  target) and links `recovery_targets_per_zone` sampled targets per zone (every unit of a smaller zone), and a
  target's success *with* the release bounds its advantage (its success without is >= 0).
  The targets whose success is over the ceiling and who hold no figure at exactly k are then measured: the
  recovery is re-run on each view without them (same published pattern, their figures one lower, the same
  knowledge drawn), and their bound is the largest gain (`stages.advantage.recovery_success`; past a cap of
  targets and of work, the others keep their success). A bound that is a success credits what the recovery would find
  without the target too: above the advantage, never below.
`differencing_membership` ("in the data iff the least value the published figures allow a withheld figure I
know it was in is >= 1") is not computed here: it can only tell a unit apart where that least value is exactly 1,
and the blocking suppression audit refuses any release with such a figure (`suppression.existence`), so it gains
on no unit of a published release.

**Per zone** (the regularity attackers' targets: every unit of a small zone, else `targets_per_zone` sampled):
- `advantage`: the `quantile` (0.95) of the per-target advantage over every unit of the zone (the strongest
  attacker per target, each attacker's advantage the mean over the draws);
- `advantage_ucb`: its upper bound, the quantile over every unit of the larger of the membership advantage and
  the recovery's bound: exact in a zone the recovery linked whole, else an upper confidence bound from its
  sample (`quantile_ucb`); the sampled regularity attackers cannot add to it;
- `success_with`, `success_without`: the quantiles of the strongest attacker's success on the candidate (the
  regularity attackers' targets' and the recovery's) and of the regularity attackers' on the counterfactual;
  where either attacker ran on a sample of the zone, the upper confidence bound of that quantile
  (`quantile_ucb`): an attacker measured on every unit must not report more;
- `exposed`: the number of the zone's units whose bound is over the ceiling (or its `count_ucb`), and `exposed_share`,
  that number over the zone's *public* population (the landscape), never over the data's own units, which
  padding inflates.
Never a mean over units: a mean can be diluted by adding harmless units.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from spatial_release.arrays import distinct_names
from spatial_release.risk import kernels
from spatial_release.risk.estimator import KeySets
from spatial_release.risk.kernels import Guesses

MEMBERSHIP = "membership_threshold"
CLASSIFIER = "membership_classifier"
REGULARITY_DAY = "regularity_day"
REGULARITY_WEEK = "regularity_week"
REGULARITY_ALL = "regularity_all"
REGULARITY_ROUTINE = "regularity_routine"
REGULARITY = (REGULARITY_DAY, REGULARITY_WEEK, REGULARITY_ALL, REGULARITY_ROUTINE)
RECOVERY = "trajectory_recovery"
ATTACKERS = (MEMBERSHIP, CLASSIFIER, *REGULARITY, RECOVERY)
NO_PUBLISHED_FIGURE = "(zones with no published figure)"

DAY_MINUTES = 24 * 60
# the same published area this many minutes before and after a known key (an hour either way where a local
# day is 23 or 25 hours long)
SHIFTS = {
    REGULARITY_DAY: (-DAY_MINUTES, DAY_MINUTES),
    REGULARITY_WEEK: (-DAY_MINUTES, DAY_MINUTES, -7 * DAY_MINUTES, 7 * DAY_MINUTES),
}


@dataclass(frozen=True)
class AdvantageParams:
    points: int = 4
    draws: int = 10
    seed: int = 20180101
    # The regularity attackers' targets: every unit of a zone of at most `regularity_whole_zone` units (exact),
    # else `targets_per_zone` sampled. They are reported (success with and without), never the figure the gate
    # reads (they gain only on the units the membership attacker puts at 1), so their cost is bounded. A sampled
    # zone reports upper confidence bounds of their success (`quantile_ucb`), which need at least 59 targets to be
    # below 1 at the 0.95 quantile and confidence; at 100 it is about the second largest of the sample.
    targets_per_zone: int = 100
    regularity_whole_zone: int = 500
    # Knowledge sets per sampled target (at most the landscape's draws). Two made each target's success a 0, 1/2
    # or 1, and the zone's quantile fell below what an attacker with every draw reaches (tests/test_advantage.py's
    # home-at-night attacker): the reported success_with must not be below theirs.
    regularity_draws: int = 10
    quantile: float = 0.95
    # The trajectory recovery's targets per zone (seeded, uniform over the zone's units): the recovery runs on the
    # whole release, but linking every unit's knowledge and matching every trajectory was most of the gate's cost.
    # A zone with fewer units is assessed whole (exact); a sampled zone's bounds are upper confidence bounds at
    # `confidence` (hypergeometric, `count_ucb`). 500 covers Citi Bike's wards whole (430 bikes).
    recovery_targets_per_zone: int = 500
    confidence: float = 0.95
    # The membership classifier on the counts: reported per zone always; read by the gate only when the policy
    # says so (risk.count_classifier: gate), since it puts most exact-count releases over a ceiling of 0.05.
    gate_classifier: bool = False
    # the policy's time zone: the classifier's references are the same area's counts at the same local hour
    timezone: str = "UTC"


@dataclass(frozen=True)
class ZoneAdvantage:
    zone: str
    targets: int
    units: int | None  # the zone's units in the data (None for the zones with no published figure)
    success_without: float
    success_with: float
    advantage: float
    advantage_ucb: float
    strongest: str
    exposed: int
    exposed_share: float | None
    boundary_units: int
    regularity_targets: int = 0  # the regularity attackers' sampled targets (`targets`: the recovery's)
    classifier: float = 0.0  # the membership classifier's advantage at the quantile, over every unit (exact)
    # every unit of the zone was a target of the recovery: `targets` is then its unit count, which the release
    # must not publish (for the zones with no published figure, a figure nothing else shows)
    complete: bool = False

    def gated(self) -> float:
        """The zone's figure against the ceiling: the larger of the quantile's bound and the exposed share."""
        return max(self.advantage_ucb, self.exposed_share or 0.0)


@dataclass(frozen=True)
class RecoverySuccess:
    """The trajectory recovery attack's success on the candidate (`risk.attack.attack_risk`, every view the
    candidate publishes), per (unit, zone) target: unit codes of the key sets the gate reads, zone names, the
    success (mean over the draws; the worst view), and the bound of its advantage: the success itself, or,
    for the `measured` targets, the advantage measured by re-running the recovery without them. Per-unit
    figures: internal, never serialised."""

    unit: np.ndarray
    zone: np.ndarray
    success: np.ndarray
    bound: np.ndarray | None = None  # None: the success
    measured: int = 0
    seconds: float = 0.0

    def of(self, unit: np.ndarray, zone: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The success and the advantage bound of each (unit, zone) target (0 for a target the recovery did not
        draw: it has no published figure there to reveal)."""
        index = pd.MultiIndex.from_arrays([self.unit, self.zone.astype(str)])
        bound = self.success if self.bound is None else self.bound
        found = pd.DataFrame({"s": self.success, "b": bound}, index=index).groupby(level=[0, 1]).max()
        wanted = pd.MultiIndex.from_arrays([np.asarray(unit, dtype=np.int64), np.asarray(zone).astype(str)])
        got = found.reindex(wanted).fillna(0.0)
        return got["s"].to_numpy(dtype=float), got["b"].to_numpy(dtype=float)


@dataclass
class AdvantageReport:
    zones: list[ZoneAdvantage] = field(default_factory=list)
    units: int = 0
    boundary_keys: int = 0
    boundary_units: int = 0
    seconds: float = 0.0
    recovery: str = "not in the portfolio"  # how the trajectory recovery entered the figures
    # False: the gate's figures only (`assess_advantage(reported=False)`): the regularity attackers did not run,
    # so each zone's success with and without, and its strongest attacker, are not the release's to report
    reported: bool = True

    def worst(self) -> ZoneAdvantage | None:
        return max(self.zones, key=lambda z: (z.gated(), z.zone), default=None)

    def to_json(self) -> dict:
        return {
            **{f: getattr(self, f) for f in ("units", "boundary_keys", "boundary_units", "seconds", "recovery")},
            "reported": self.reported,
            "zones": [asdict(z) for z in self.zones],
        }

    @classmethod
    def from_json(cls, data: dict) -> AdvantageReport:
        zones = [ZoneAdvantage(**z) for z in data["zones"]]
        return cls(
            zones,
            int(data["units"]),
            int(data["boundary_keys"]),
            int(data["boundary_units"]),
            float(data["seconds"]),
            str(data["recovery"]),
            bool(data["reported"]),
        )


# --- statistics ---------------------------------------------------------------------------------------------


def quantile_higher(values: np.ndarray, q: float) -> float:
    """The sample quantile at rank ceil(q n) (never below the true one by interpolation)."""
    if not len(values):
        return 0.0
    ordered = np.sort(values)
    return float(ordered[min(len(ordered), max(1, math.ceil(q * len(ordered) - 1e-9))) - 1])


def count_ucb(population: int, sampled: int, hits: int, confidence: float) -> int:
    """An upper confidence bound on how many of `population` units have a property when `hits` of a uniform
    sample of `sampled` of them (without replacement) have it: the largest count K under which seeing `hits` or
    fewer has probability above 1 - confidence (exact hypergeometric tail). Exact when every unit is sampled."""
    from scipy.stats import hypergeom

    if sampled >= population:
        return hits
    lo, hi = hits, population - (sampled - hits)  # the tail falls as the count grows: a binary search
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if hypergeom.cdf(hits, population, mid, sampled) > 1.0 - confidence:
            lo = mid
        else:
            hi = mid - 1
    return lo


def quantile_ucb(known: np.ndarray, population: int, sample: np.ndarray, q: float, confidence: float) -> float:
    """An upper confidence bound on the q quantile (rank ceil(q N), as `quantile_higher`) of N = len(known) +
    `population` values: `known` exactly, the other `population` through a uniform `sample` of them. The
    quantile is at most x when at most N - ceil(q N) values exceed x; the bound is the least x (a known or
    sampled value, or 1) for which the known values over x plus `count_ucb` of the sampled ones fit. With every
    value known or sampled it is the quantile itself."""
    total = len(known) + population
    if not total:
        return 0.0
    room = total - min(total, max(1, math.ceil(q * total - 1e-9)))
    candidates = np.unique(np.concatenate([[0.0], known, sample, [1.0]]))
    known_sorted, sample_sorted = np.sort(known), np.sort(sample)

    def fits(x: float) -> bool:
        if x >= 1.0:  # no advantage or success exceeds 1
            return True
        over_known = len(known_sorted) - int(np.searchsorted(known_sorted, x, side="right"))
        hits = len(sample_sorted) - int(np.searchsorted(sample_sorted, x, side="right"))
        return over_known + count_ucb(population, len(sample), hits, confidence) <= room

    lo, hi = 0, len(candidates) - 1  # fits() only turns true as x grows: a binary search over the candidates
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(float(candidates[mid])):
            hi = mid
        else:
            lo = mid + 1
    return float(candidates[lo]) if fits(float(candidates[lo])) else float(candidates[-1])


# --- keys ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyTimes:
    """Each key's area and level (a code per distinct name before the last "@") and bucket start in minutes,
    parsed once from the key names ("<area and level>@<UTC start>")."""

    prefix: np.ndarray
    minute: np.ndarray
    valid: np.ndarray

    @classmethod
    def parse(cls, key_names: np.ndarray) -> KeyTimes:
        names = pd.Series(np.asarray(key_names, dtype=object), dtype=object).astype(str)
        parts = names.str.rsplit("@", n=1, expand=True)
        if parts.shape[1] < 2:
            n = len(names)
            return cls(np.arange(n), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool))
        starts = pd.to_datetime(parts[1], format="%Y-%m-%dT%H:%MZ", utc=True, errors="coerce")
        valid = starts.notna().to_numpy()
        ns = starts.to_numpy(dtype="datetime64[ns]", na_value=np.datetime64(0, "ns")).astype(np.int64)
        prefix, _ = pd.factorize(parts[0])
        return cls(prefix, np.where(valid, ns // 60_000_000_000, -(10**12)), valid)


def key_shifts(key_names: np.ndarray | KeyTimes, minutes: tuple[int, ...]) -> np.ndarray:
    """(keys, len(minutes)): the code of the key of the same area and level whose bucket starts `minutes`
    later (an hour either way allowed, for days of 23 or 25 hours), or -1."""
    times = key_names if isinstance(key_names, KeyTimes) else KeyTimes.parse(key_names)
    prefix, start_min, valid = times.prefix, times.minute, times.valid
    index = pd.MultiIndex.from_arrays([prefix[valid], start_min[valid]])
    codes = np.flatnonzero(valid)
    out = np.full((len(prefix), len(minutes)), -1, dtype=np.int64)
    for j, shift in enumerate(minutes):
        for slack in (0, -60, 60):
            todo = out[:, j] < 0
            at = index.get_indexer(pd.MultiIndex.from_arrays([prefix[todo], start_min[todo] + shift + slack]))
            found = np.where(at >= 0, codes[np.maximum(at, 0)], -1)
            out[np.flatnonzero(todo), j] = np.where(valid[todo], found, -1)
    return out


# --- membership against the thresholds (every unit) ---------------------------------------------------------


def boundary_keys_per_unit(sets: KeySets, boundary: np.ndarray) -> np.ndarray:
    """How many of the `boundary` keys (by key code) each unit holds, read from those keys' holders: a few
    thousand units, where a pass over every pair held a running sum of 8 bytes per pair for the whole
    assessment (944 MB at 50 M pings, bench/RESULTS.md)."""
    at_k = np.flatnonzero(boundary)
    _, units = kernels.holders(sets.key_offsets, sets.key_units, at_k.reshape(-1, 1))
    return np.bincount(units, minlength=sets.units)


def membership_advantage(n_boundary: np.ndarray) -> np.ndarray:
    """Per unit: 1 with a published key at exactly k (some key of its is published with it and not without it),
    else 0 (the two releases agree on every key of its)."""
    return (np.asarray(n_boundary) > 0).astype(float)


WEEK_MINUTES = 7 * DAY_MINUTES


class SamePlace:
    """The keys of each key's area and level at every bucket within a week of it (the `_all` guesses), as groups
    sorted by start: no matrix of keys by buckets, which would be the key count times the period's buckets. (The
    whole period at hourly buckets made outputs of thousands of keys, whose best matches took most of the step.)"""

    def __init__(self, key_names: np.ndarray | KeyTimes):
        times = key_names if isinstance(key_names, KeyTimes) else KeyTimes.parse(key_names)
        self.minute, self.group = times.minute, times.prefix
        self.order = np.lexsort((self.minute, self.group))
        counts = np.bincount(self.group) if len(self.group) else np.zeros(0, dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def of(self, keys: np.ndarray) -> np.ndarray:
        found = []
        for key in np.asarray(keys).tolist():
            members = self.order[self.starts[self.group[key]] : self.starts[self.group[key] + 1]]
            at = self.minute[members]
            lo, hi = (
                np.searchsorted(at, self.minute[key] - WEEK_MINUTES),
                np.searchsorted(at, self.minute[key] + WEEK_MINUTES, "right"),
            )
            found.append(members[lo:hi])
        return np.concatenate(found) if found else np.asarray(keys)[:0]

    def same_time_of_day(self, keys: np.ndarray) -> np.ndarray:
        """The keys of each key's area and level at the same time of day on every day of the period (an hour
        either way, where the UTC offset moves): home at night, work by day. With day or week buckets, every
        bucket of the area. One output per known key set stays small: a bucket a day at most."""
        found = []
        for key in np.asarray(keys).tolist():
            members = self.order[self.starts[self.group[key]] : self.starts[self.group[key] + 1]]
            offset = (self.minute[members] - self.minute[key]) % DAY_MINUTES
            found.append(members[(offset <= 60) | (offset >= DAY_MINUTES - 60)])
        return np.concatenate(found) if found else np.asarray(keys)[:0]


# --- membership by the counts (Pyrgelis et al.'s classifier, every unit) ------------------------------------

MIN_VARIANCE = 0.25  # a count model's variance floor: two equal reference counts must not make a certainty


def key_classes(times: KeyTimes, timezone: str = "UTC") -> np.ndarray:
    """Per key, its class: the same area and level at the same local hour of the day in `timezone` (the policy's:
    a day bucket starts at local midnight on either side of a DST change, which is two UTC hours)."""
    hour = (times.minute % DAY_MINUTES) // 60
    if timezone != "UTC" and times.valid.any():
        instants = pd.to_datetime(times.minute[times.valid] * 60_000_000_000, utc=True)
        hour = hour.copy()
        hour[times.valid] = pd.DatetimeIndex(instants).tz_convert(timezone).hour.to_numpy()
    return times.prefix.astype(np.int64) * 24 + hour


def count_model(classes: np.ndarray, key_count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per published key, how many other published keys share its class (the adversary's references) and the
    variance of their counts (leave-one-out; the Poisson variance, the count, where there are fewer than
    three). The classifier's training data in Pyrgelis et al. are aggregates without the target; here they are
    the release's own other buckets of the same area and local hour."""
    count = np.asarray(key_count, dtype=float)
    groups = pd.DataFrame({"g": classes, "c": count, "c2": count * count}).groupby("g")
    n = groups["c"].transform("size").to_numpy(dtype=float) - 1
    total = groups["c"].transform("sum").to_numpy() - count
    squares = groups["c2"].transform("sum").to_numpy() - count * count
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = total / n
        variance = (squares - n * mean * mean) / (n - 1)
    variance = np.where(n >= 3, variance, np.maximum(count, 1.0))
    return n, np.maximum(np.nan_to_num(variance, nan=MIN_VARIANCE), MIN_VARIANCE)


def classifier_advantage(variances: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """Per knowledge set (rows: the count variance of each known published key, and how much the removal of
    the target moves that key's count against its references, 1 - the share of references the target is in
    too), the advantage of the best test of "the target is in the data" from those counts under the
    adversary's Gaussian count model. The log-likelihood ratio sum_j (c_j - mu_j - 1/2) / var_j has variance
    w = sum_j 1 / var_j; without the target it moves by d = sum_j shift_j / var_j (the count one lower, the
    references as much lower as the target was in them), so the best threshold separates the two by their
    total variation, 2 Phi(d / (2 sqrt(w))) - 1 (Neyman-Pearson)."""
    from scipy.stats import norm

    inverse = 1.0 / variances
    w = inverse.sum(axis=1)
    d = (np.clip(shift, 0.0, 1.0) * inverse).sum(axis=1)
    return 2.0 * norm.cdf(d / (2.0 * np.sqrt(np.maximum(w, 1e-12)))) - 1.0


CLASSIFIER_ROWS = 1 << 18  # knowledge sets the count classifier scores at once (each row's figure is its own)


def _classifier_per_entry(
    sets: KeySets, entries: _Entries, classes: np.ndarray, key_count: np.ndarray, params: AdvantageParams
) -> np.ndarray:
    """The classifier's advantage per gate entry (unit, zone), the mean over the landscape's knowledge draws
    (`estimator.draw_knowledge`, the uniqueness bound's and the recovery's draws); an entry of a zone where
    the unit has no published key takes the largest of the unit's entries."""
    from spatial_release.risk.estimator import RiskParams, draw_knowledge

    references, variance = count_model(classes, key_count)
    # how many of each unit's keys fall in each class: the target's own presence among a key's references
    _, class_code = np.unique(classes, return_inverse=True)
    n_classes = int(class_code.max()) + 1 if len(class_code) else 1
    held_code, held = kernels.unit_class_counts(sets.unit_offsets, sets.unit_keys, class_code.ravel(), n_classes)
    drawn = draw_knowledge(sets, RiskParams(points=params.points, draws=params.draws, seed=params.seed))
    rows = len(drawn.entry_zone) * params.draws
    per_row = np.zeros(rows)
    for all_ids, all_keysets in drawn.by_width:
        # a block of knowledge sets at a time: each set is scored alone, and the temporaries of every set at once
        # were the 50 M release's memory peak (RSS 7.4 -> 11.2 GB in 11 s, this loop on the main thread)
        for at in range(0, len(all_ids), CLASSIFIER_ROWS):
            row_ids, keysets = all_ids[at : at + CLASSIFIER_ROWS], all_keysets[at : at + CLASSIFIER_ROWS]
            keys = keysets.astype(np.int64)
            unit = drawn.entry_unit[row_ids // params.draws].astype(np.int64)[:, None]
            # every known key is one of the target's own: its (unit, class) is among the counted ones
            mine = held[np.searchsorted(held_code, unit * n_classes + class_code[keys])].astype(float)
            share = (mine - 1.0) / np.maximum(references[keys], 1.0)
            per_row[row_ids] = classifier_advantage(variance[keys], 1.0 - share)
    per_entry = per_row.reshape(-1, params.draws).mean(axis=1) if rows else np.zeros(0)
    zones = np.asarray(drawn.zones).astype(str)[drawn.entry_zone]
    found = pd.Series(per_entry, index=pd.MultiIndex.from_arrays([drawn.entry_unit.astype(np.int64), zones]))
    found = found.groupby(level=[0, 1]).max()
    wanted = pd.MultiIndex.from_arrays([entries.unit.astype(np.int64), entries.zone.astype(str)])
    got = found.reindex(wanted).to_numpy()
    best_of_unit = found.groupby(level=0).max().reindex(entries.unit.astype(np.int64)).to_numpy()
    return np.nan_to_num(np.where(np.isnan(got), best_of_unit, got), nan=0.0)


# --- the assessment -----------------------------------------------------------------------------------------


@dataclass
class _Entries:
    unit: np.ndarray
    zone: np.ndarray  # zone names (object)
    anchors: np.ndarray  # the unit's keys in the zone (0: a zone it is in with no published key of its)


DENSE_ENTRIES = 50_000_000  # units x zones up to which the entries are counted in one dense array


def _entries(sets: KeySets, hidden: tuple[np.ndarray, np.ndarray] | None) -> _Entries:
    """Every (unit, zone) target: the zones of each unit's published keys (with how many of its keys lie there),
    then the zones it was truly in without a published key there (`hidden`)."""
    zones, zone_of_key = distinct_names(sets.key_zone.astype(str))
    n_zones = max(len(zones), 1)
    wide = np.int64 if sets.units * n_zones >= 2**31 else np.int32
    code: np.ndarray = np.repeat(np.arange(sets.units, dtype=wide) * n_zones, np.diff(sets.unit_offsets))
    code = code + zone_of_key.astype(wide)[sets.unit_keys]
    if sets.units * n_zones <= DENSE_ENTRIES:  # a counting pass, not a sort of every pair
        counted = np.bincount(code, minlength=sets.units * n_zones)
        distinct = np.flatnonzero(counted)
        anchors = counted[distinct]
    else:
        distinct, anchors = np.unique(code, return_counts=True)
    unit = distinct // n_zones
    zone = zones[distinct % n_zones].astype(object)
    if hidden is not None and len(hidden[0]):
        seen = set(zip(unit.tolist(), zone.tolist()))
        pairs = zip(np.asarray(hidden[0]).tolist(), np.asarray(hidden[1]).tolist())
        extra = sorted({(u, z) for u, z in pairs if (u, z) not in seen})
        if extra:
            unit = np.concatenate([unit, np.array([u for u, _ in extra], dtype=np.int64)])
            zone = np.concatenate([zone, np.array([z for _, z in extra], dtype=object)])
            anchors = np.concatenate([anchors, np.zeros(len(extra), dtype=np.int64)])
    return _Entries(unit, zone, anchors)


def _draw(
    sets: KeySets, unit: int, zone: str, anchored: bool, draws: int, params: AdvantageParams, rng: np.random.Generator
) -> list[np.ndarray]:
    keys = sets.unit_keys[sets.unit_offsets[unit] : sets.unit_offsets[unit + 1]]
    if not len(keys):
        return []
    if not anchored:
        take = min(params.points - 1, len(keys))
        return [np.sort(rng.choice(keys, take, replace=False)) for _ in range(draws)]
    in_zone = keys[sets.key_zone[keys].astype(str) == zone]
    drawn = []
    for _ in range(draws):
        anchor = in_zone[rng.integers(len(in_zone))]
        others = keys[keys != anchor]
        take = min(params.points - 1, len(others))
        drawn.append(np.sort(np.concatenate([[anchor], rng.choice(others, take, replace=False)])))
    return drawn


def _regularity(
    truth: kernels.MatchSets, exposed_unit: np.ndarray, guesses: Guesses, knowledge: list[np.ndarray], targets: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Success with and without the target of the regularity guess from each knowledge set (its keys and the
    published keys `guesses` makes of them), under the project's rule (`kernels.regularity_shares`). Without a
    target that has a boundary key (`exposed_unit`), none of its keys is taken as published: no guess of it can be
    shown, so it reveals nothing (success 0, whoever the output matches); without any other target nothing of
    its changes."""
    if not knowledge:
        return np.zeros(0), np.zeros(0)
    offsets = KeySets.offsets(np.array([len(k) for k in knowledge]))
    known = np.concatenate(knowledge).astype(np.int64)
    targets = np.asarray(targets, dtype=np.int64)
    pieces = np.linspace(0, len(knowledge), min(len(knowledge), 4 * (os.cpu_count() or 1)) + 1).astype(np.int64)
    common = (guesses, offsets, known, targets, truth)
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:  # the kernel holds no GIL
        done = list(pool.map(lambda at, end: kernels.regularity_shares(*common, at, end), pieces[:-1], pieces[1:]))
    success_with = np.concatenate(done)
    return success_with, np.where(exposed_unit[targets], 0.0, success_with)


def _guessers(key_names: np.ndarray | KeyTimes) -> dict[str, Guesses]:
    times = key_names if isinstance(key_names, KeyTimes) else KeyTimes.parse(key_names)
    same_place = SamePlace(times)
    grouped = (same_place.order.astype(np.int64), same_place.starts, same_place.group.astype(np.int64), same_place.minute)
    none = np.zeros((0, 0), dtype=np.int64)
    return {
        REGULARITY_DAY: Guesses(kernels.GUESS_SHIFTS, key_shifts(times, SHIFTS[REGULARITY_DAY]), *grouped),
        REGULARITY_WEEK: Guesses(kernels.GUESS_SHIFTS, key_shifts(times, SHIFTS[REGULARITY_WEEK]), *grouped),
        REGULARITY_ALL: Guesses(kernels.GUESS_WEEK, none, *grouped),
        REGULARITY_ROUTINE: Guesses(kernels.GUESS_TIME_OF_DAY, none, *grouped),
    }


def assess_advantage(
    sets: KeySets,
    key_names: np.ndarray,
    key_count: np.ndarray,
    k: int,
    params: AdvantageParams,
    ceiling: float,
    population: dict[str, float] | None = None,
    hidden: tuple[np.ndarray, np.ndarray] | None = None,
    recovery: RecoverySuccess | Callable[[tuple[np.ndarray, np.ndarray]], RecoverySuccess] | None = None,
    reported: bool | Callable[[list[ZoneAdvantage]], bool] = True,
) -> AdvantageReport:
    """Per-zone advantage of the release whose published key sets are `sets` (key names and published counts
    by key code; k the threshold). `hidden`: (unit code, zone) of every zone each unit has a true point in
    (the entries of zones where none of its keys is published come from it). `recovery`: the trajectory
    recovery's success on the candidate per target (taken as covering every unit), or what computes it for
    the (unit code, zone) targets it is given (`recovery_targets_per_zone` per zone); None: not in the
    portfolio. It is not
    computed when the membership attacker alone puts every zone over the ceiling: the release is refused (or
    climbs) whatever it finds, and the report says it did not run.

    `reported`: whether the report is the release's, with the regularity attackers, whose success is reported
    and never gated; or a callable that decides from the zones' gate figures (`ZoneAdvantage.gated`: the
    quantile's bound and the exposed share, which read the membership attacker, the recovery and the gated
    classifier). False: the gate's figures only. The coarsening loop reads those of every configuration it
    tries, and runs the regularity attackers on the one it keeps alone."""
    started = time.perf_counter()
    boundary = np.asarray(key_count) == k
    unit_boundary = boundary_keys_per_unit(sets, boundary)
    exposed_unit = unit_boundary > 0
    entries = _entries(sets, hidden)
    member = membership_advantage(unit_boundary[entries.unit])
    published_zones = set(np.unique(sets.key_zone.astype(str)).tolist())
    labels = np.where(np.isin(entries.zone, list(published_zones)), entries.zone, NO_PUBLISHED_FIGURE)
    zones = sorted(set(labels.tolist()))
    settled = all(quantile_higher(member[labels == zone], params.quantile) > ceiling for zone in zones)
    note, earlier = "not in the portfolio", 0.0
    linked = np.arange(len(entries.unit))  # the recovery's targets (entry rows): every one unless it samples
    pending: Future[RecoverySuccess] | None = None
    done: RecoverySuccess | None = None  # the recovery's result, once there is one
    if callable(recovery):
        linked = _recovery_sample(labels, zones, params)
        if settled:
            note = "not run: the membership attacker alone puts every zone over the ceiling"
            linked = np.arange(len(entries.unit))
        else:
            pending = _in_background(recovery, (entries.unit[linked], entries.zone[linked]))
    elif recovery is not None:
        done, earlier = recovery, recovery.seconds  # computed before this call
    times = KeyTimes.parse(key_names)
    classified = _classifier_per_entry(sets, entries, key_classes(times, params.timezone), key_count, params)
    figures = _Figures(labels, linked, member, classified, params, ceiling, population, exposed_unit, entries)
    unrecovered = (np.zeros(len(entries.unit)), np.zeros(len(entries.unit)))
    recovered = unrecovered if done is None else done.of(entries.unit, entries.zone)
    gate = _gate_zones(zones, figures, recovered)
    # While the recovery runs, the regularity attackers run too when the report will (likely) be the release's:
    # the gate's figures only grow with the recovery's bounds, so what they say without it decides early.
    wanted = reported(gate) if callable(reported) else reported
    found = _regularity_found(sets, entries, exposed_unit, params, zones, labels, times) if wanted else None
    if pending is not None:
        done = pending.result()
        recovered = done.of(entries.unit, entries.zone)
        gate = _gate_zones(zones, figures, recovered)
        wanted = reported(gate) if callable(reported) else reported
        if wanted and found is None:
            found = _regularity_found(sets, entries, exposed_unit, params, zones, labels, times)
    if done is not None:
        sampled = "every unit" if len(linked) == len(entries.unit) else f"{len(linked):,} sampled targets"
        note = f"run on {sampled}; {done.measured} targets over the ceiling measured without them"
    report = AdvantageReport(
        units=sets.units,
        boundary_keys=int(boundary.sum()),
        boundary_units=int(exposed_unit.sum()),
        recovery=note,
        reported=bool(wanted),
    )
    if not wanted or found is None:
        report.zones = gate
    else:
        report.zones = [
            _zone_figures(zone, *figures.of(zone, found[zone][0]), recovered, found[zone][1], *figures.rest())
            for zone in zones
        ]
        _same_gate(gate, report.zones)
    report.seconds = time.perf_counter() - started + earlier
    return report


def _same_gate(gate: list[ZoneAdvantage], reported: list[ZoneAdvantage]) -> None:
    """Refuse a report whose gate figures are not those `reported` decided on: the regularity attackers are
    reported, never gated, so adding them must not move a gated figure."""
    fields = ("zone", "advantage", "advantage_ucb", "exposed", "exposed_share")
    if [[getattr(z, f) for f in fields] for z in gate] != [[getattr(z, f) for f in fields] for z in reported]:
        raise RuntimeError("advantage: the reported zones' gate figures differ from those the gate read")


def _in_background(
    recovery: Callable[[tuple[np.ndarray, np.ndarray]], RecoverySuccess], targets: tuple[np.ndarray, np.ndarray]
) -> Future[RecoverySuccess]:
    """The recovery on its own thread: it is the longest piece and mostly one core's work, and nothing else of the
    assessment reads it until the gate's figures. Its result (or its error) is read with `.result()`."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="advantage-recovery")
    try:
        return pool.submit(recovery, targets)
    finally:
        pool.shutdown(wait=False)


@dataclass(frozen=True)
class _Figures:
    """What every zone's figures read besides the recovery and the regularity attackers."""

    labels: np.ndarray
    linked: np.ndarray
    member: np.ndarray
    classified: np.ndarray
    params: AdvantageParams
    ceiling: float
    population: dict[str, float] | None
    exposed_unit: np.ndarray
    entries: _Entries

    def of(self, zone: str, sample: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """`_zone_figures`'s arguments before the recovery's: the zone, its rows, the regularity sample, the
        recovery's targets in it, the membership and classifier figures."""
        rows = np.flatnonzero(self.labels == zone)
        chosen = np.intersect1d(rows, self.linked, assume_unique=True)
        return rows, sample, chosen, self.member, self.classified

    def rest(self) -> tuple[AdvantageParams, float, dict[str, float] | None, np.ndarray, _Entries]:
        return self.params, self.ceiling, self.population, self.exposed_unit, self.entries


def _gate_zones(zones: list[str], figures: _Figures, recovered: tuple[np.ndarray, np.ndarray]) -> list[ZoneAdvantage]:
    """Every zone's gate figures, without the regularity attackers (no target: the gate does not read them)."""
    no_targets = np.zeros(0, dtype=np.int64)
    return [
        _zone_figures(zone, *figures.of(zone, no_targets), recovered, _not_run(no_targets), *figures.rest())
        for zone in zones
    ]


def _regularity_found(
    sets: KeySets,
    entries: _Entries,
    exposed_unit: np.ndarray,
    params: AdvantageParams,
    zones: list[str],
    labels: np.ndarray,
    times: KeyTimes,
) -> dict[str, tuple[np.ndarray, dict[str, tuple[np.ndarray, np.ndarray]]]]:
    """Per zone, the regularity attackers' targets (every unit of a small zone, else `targets_per_zone` sampled,
    seeded) and their success with and without each target."""
    guessers = _guessers(times)
    # checked once for every attacker and zone; the kernel reads 32- or 64-bit codes alike: no copy of the pairs
    truth = kernels.MatchSets(sets.unit_offsets, sets.unit_keys, sets.key_offsets, sets.key_units)
    rng = np.random.default_rng(params.seed)
    found = {}
    for zone in zones:
        rows = np.flatnonzero(labels == zone)
        sample = (
            rows
            if len(rows) <= max(params.regularity_whole_zone, params.targets_per_zone)
            else np.sort(rng.choice(rows, params.targets_per_zone, replace=False))
        )
        found[zone] = (sample, _sampled_attacks(sets, truth, entries, exposed_unit, guessers, params, sample, rng))
    return found


def _recovery_sample(labels: np.ndarray, zones: list[str], params: AdvantageParams) -> np.ndarray:
    """The recovery's targets (entry rows, sorted): per zone label, every entry when there are at most
    `recovery_targets_per_zone`, else that many drawn uniformly (seeded; a generator of its own, so the
    regularity attackers' sample does not move with it)."""
    rng = np.random.default_rng([params.seed, 1])
    chosen = []
    for zone in zones:
        rows = np.flatnonzero(labels == zone)
        n = params.recovery_targets_per_zone
        chosen.append(rows if len(rows) <= n else np.sort(rng.choice(rows, n, replace=False)))
    return np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64)


def _not_run(sample: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The regularity attackers' place in a report of the gate's figures only: no success with or without."""
    none = np.zeros(len(sample))
    return {name: (none, none) for name in REGULARITY}


def _sampled_attacks(
    sets: KeySets,
    truth: kernels.MatchSets,
    entries: _Entries,
    exposed_unit: np.ndarray,
    guessers: dict[str, Guesses],
    params: AdvantageParams,
    sample: np.ndarray,
    rng: np.random.Generator,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per regularity attacker, each sampled target's success with and without it (means over the draws)."""
    knowledge, owner = [], []
    draws = min(params.draws, params.regularity_draws)
    for i, entry in enumerate(sample.tolist()):
        unit, zone, anchored = int(entries.unit[entry]), str(entries.zone[entry]), bool(entries.anchors[entry] > 0)
        drawn = _draw(sets, unit, zone, anchored, draws, params, rng)
        knowledge += drawn
        owner += [i] * len(drawn)
    owner_arr = np.array(owner, dtype=np.int64)
    targets = entries.unit[sample][owner_arr] if len(owner_arr) else np.zeros(0, dtype=np.int64)
    found = {}
    for name in REGULARITY:
        w, wo = _regularity(truth, exposed_unit, guessers[name], knowledge, targets)
        found[name] = (_per_target(w, owner_arr, len(sample)), _per_target(wo, owner_arr, len(sample)))
    return found


def _zone_figures(
    zone: str,
    rows: np.ndarray,
    sample: np.ndarray,
    linked: np.ndarray,
    member: np.ndarray,
    classified: np.ndarray,
    recovered: tuple[np.ndarray, np.ndarray],
    found: dict[str, tuple[np.ndarray, np.ndarray]],
    params: AdvantageParams,
    ceiling: float,
    population: dict[str, float] | None,
    exposed_unit: np.ndarray,
    entries: _Entries,
) -> ZoneAdvantage:
    """The zone's figures. `advantage`: the quantile of the membership attacker's exact advantage over every
    unit of the zone (the regularity attackers cannot exceed it: without a boundary key nothing of a unit's
    changes). `advantage_ucb`: the quantile over every unit of the larger of that and the recovery's bound (its
    success with the release, which bounds its advantage from above since its success without is >= 0, or its
    advantage measured without the target). A unit with a boundary key is at 1 exactly; the others' recovery
    bounds are known for the recovery's `linked` targets, every unit of a small zone, a uniform sample of a
    large one, where the quantile and the count of units over the ceiling are upper confidence bounds
    (`quantile_ucb`, `count_ucb`). Success with and without: the strongest attacker's, at the quantile."""
    q = params.quantile
    recovery_with, recovery_bound = recovered
    sampled_adv = {name: np.clip(w - wo, 0.0, 1.0) for name, (w, wo) in found.items()}
    gated_classifier = classified if params.gate_classifier else np.zeros(len(classified))
    exact = np.maximum(member, gated_classifier)  # the gated attackers computed for every unit
    advantage = quantile_higher(exact[rows], q)
    at_one = member[rows] >= 1.0
    others = linked[member[linked] < 1.0]  # the sampled units without a boundary key
    others_bound = np.maximum(recovery_bound[others], gated_classifier[others])
    population_others = int((~at_one).sum())
    advantage_ucb = quantile_ucb(np.ones(int(at_one.sum())), population_others, others_bound, q, params.confidence)
    hits = int((others_bound > ceiling).sum())
    exposed = (int(at_one.sum()) if ceiling < 1.0 else 0) + count_ucb(
        population_others, len(others), hits, params.confidence
    )
    with_each = [w for w, _ in found.values()] + [recovery_with[sample]]
    success_with = np.max(np.vstack(with_each), axis=0) if len(sample) else np.zeros(0)
    success_without = np.max(np.vstack([wo for _, wo in found.values()]), axis=0) if len(sample) else np.zeros(0)
    by_attacker = {
        MEMBERSHIP: quantile_higher(member[rows], q),
        CLASSIFIER: quantile_higher(gated_classifier[rows], q),
        **{name: quantile_higher(adv, q) for name, adv in sampled_adv.items()},
        RECOVERY: quantile_ucb(np.zeros(0), len(rows), recovery_bound[linked], q, params.confidence),
    }
    strongest = max(ATTACKERS, key=lambda a: (by_attacker[a], a == MEMBERSHIP))
    if by_attacker[strongest] == 0.0:  # no attacker gains: name the one that succeeds most, with or without
        strongest = max(REGULARITY, key=lambda a: (quantile_higher(found[a][0], q), a == REGULARITY_DAY))
    public = population.get(zone) if population else None
    return ZoneAdvantage(
        zone=zone,
        targets=len(linked),
        units=None if zone == NO_PUBLISHED_FIGURE else len(rows),
        # every unit of a small zone, else the sample's upper confidence bound (an attacker measured on every unit
        # must not report more), for the regularity attackers' targets and the recovery's alike, with and without
        success_without=quantile_ucb(np.zeros(0), len(rows), success_without, q, params.confidence),
        success_with=max(
            quantile_ucb(np.zeros(0), len(rows), success_with, q, params.confidence),
            quantile_ucb(np.zeros(0), len(rows), recovery_with[linked], q, params.confidence),
        ),
        advantage=advantage,
        advantage_ucb=advantage_ucb,
        strongest=strongest,
        exposed=exposed,
        exposed_share=(exposed / public) if public else None,
        boundary_units=int(exposed_unit[entries.unit[rows]].sum()),
        regularity_targets=len(sample),
        classifier=quantile_higher(classified[rows], q),
        complete=len(linked) == len(rows),
    )


def _per_target(values: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    if not len(values):
        return np.zeros(n)
    return np.bincount(owner, weights=values, minlength=n) / np.maximum(np.bincount(owner, minlength=n), 1)
