"""Risk as the advantage the release gives an attacker: each attacker runs twice with the same side knowledge,
on the candidate release and on the counterfactual release of the same data without the target, and the
per-target advantage is the difference. Domain code: no Dagster, no files.

**The side knowledge** is the landscape's: p published keys of the target's trace, one of them in the anchor
zone (`draws` sets per target, seeded), the same model as the uniqueness bound. A unit with a true point in a
zone where none of its keys is published is a target of that zone too, with p - 1 keys drawn from its keys
elsewhere (the adversary knows it was in the zone, which no published key shows).

**The counterfactual.** Removing the target lowers by one every published count it is in. A count at exactly k
becomes k - 1 and is withheld: those keys (the target's *boundary* keys) vanish from the counterfactual
release, and nothing else of the target's changes publication. That is exact for the primary pattern. The
complementary pattern of the counterfactual is taken to be the candidate's: the target's removal could move a
secondary elsewhere, which an attacker who does not know every other unit's data cannot predict, so it is not a
test it can run (tests re-protect the counterfactual of sampled targets and compare, `tests/test_advantage.py`).

**The attackers** (the gate reads, for each target, the one with the largest advantage):
- `membership_threshold` (Pyrgelis et al., NDSS 2018, against the thresholds): "the target is in the data iff
  the published key I know it was in is published". With a known boundary key the test is right in both
  worlds (TPR 1, FPR 0); with none it says the same in both (advantage 0). Its advantage per target is the
  probability over the knowledge draws that a known key is a boundary key: computed in closed form
  (hypergeometric) for every unit, never sampled.
- `regularity_day` and `regularity_week` (attribute inference with regularity priors; `regularity_day` is the
  trivial attacker of issue 37): the target was in the same published area the day before and the day after
  each known key (`_week`: and the same time a week before and after). The output is the known keys and those
  guesses that are published. Success is the project's rule: the target is the best Jaccard match of the
  output among every unit's published key set (a tie of t counts 1/t), and the output shows a published key
  of the target that the adversary did not know. Without the target its boundary keys are not published: the
  attacker cannot guess them and they reveal nothing. Run on sampled targets (stratified by zone).
The trajectory recovery of `risk.attack` is not in the portfolio: its advantage is measured by re-running it
on re-protected counterfactuals in the tests, where it stays below the gate's bound.

**Per zone** (over the zone's targets: every unit when they are few, else `targets_per_zone` sampled):
- `advantage`: the `quantile` (0.95) of the per-target advantage (the strongest attacker per target, each
  attacker's advantage the mean over the draws);
- `advantage_ucb`: a distribution-free upper confidence bound of that quantile (an order statistic of the
  sample, `order_statistic_bound`); the quantile itself when every unit of the zone is a target;
- `success_with`, `success_without`: the quantiles of the strongest regularity attacker's success on the
  candidate and on the counterfactual;
- `exposed`: an upper confidence bound on the number of the zone's units whose advantage is over the ceiling
  (exact for the membership attacker, a Clopper-Pearson bound for the sampled ones), and `exposed_share`, that
  number over the zone's *public* population (the landscape), never over the data's own units, which padding
  inflates.
Never a mean over units: a mean can be diluted by adding harmless units.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from spatial_release.risk.estimator import KeySets

MEMBERSHIP = "membership_threshold"
REGULARITY_DAY = "regularity_day"
REGULARITY_WEEK = "regularity_week"
ATTACKERS = (MEMBERSHIP, REGULARITY_DAY, REGULARITY_WEEK)
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
    targets_per_zone: int = 120  # >= 59: the largest of 59 is a 95 % upper bound of the 95th percentile
    quantile: float = 0.95
    confidence: float = 0.95


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

    def gated(self) -> float:
        """The zone's figure against the ceiling: the larger of the quantile's bound and the exposed share."""
        return max(self.advantage_ucb, self.exposed_share or 0.0)


@dataclass
class AdvantageReport:
    zones: list[ZoneAdvantage] = field(default_factory=list)
    units: int = 0
    boundary_keys: int = 0
    boundary_units: int = 0
    seconds: float = 0.0

    def worst(self) -> ZoneAdvantage | None:
        return max(self.zones, key=lambda z: (z.gated(), z.zone), default=None)


# --- statistics ---------------------------------------------------------------------------------------------


def _binom_cdf(x: int, n: int, p: float) -> float:
    """P(Bin(n, p) <= x), summed in log space (n is a few hundred targets at most)."""
    if x < 0:
        return 0.0
    if x >= n:
        return 1.0
    if p <= 0:
        return 1.0
    if p >= 1:
        return 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    total = 0.0
    for i in range(x + 1):
        total += math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q)
    return min(1.0, total)


def quantile_higher(values: np.ndarray, q: float) -> float:
    """The sample quantile at rank ceil(q n) (never below the true one by interpolation)."""
    if not len(values):
        return 0.0
    ordered = np.sort(values)
    return float(ordered[min(len(ordered), max(1, math.ceil(q * len(ordered) - 1e-9))) - 1])


def order_statistic_bound(values: np.ndarray, q: float, confidence: float) -> float:
    """An upper `confidence` bound on the q-quantile of the distribution `values` are sampled from: the r-th
    smallest, r the least rank with P(Bin(n, q) <= r - 1) >= confidence (Wilks). 1.0 (the largest advantage
    there is) when n is too small for any rank."""
    n = len(values)
    ordered = np.sort(values)
    for r in range(1, n + 1):
        if _binom_cdf(r - 1, n, q) >= confidence:
            return float(ordered[r - 1])
    return 1.0


def clopper_pearson_upper(successes: int, n: int, confidence: float) -> float:
    """The exact upper `confidence` bound of a binomial share (bisection on the binomial CDF)."""
    if n == 0 or successes >= n:
        return 1.0
    lo, hi = successes / n, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if _binom_cdf(successes, n, mid) > 1 - confidence:
            lo = mid
        else:
            hi = mid
    return hi


# --- keys ---------------------------------------------------------------------------------------------------


def key_shifts(key_names: np.ndarray, minutes: tuple[int, ...]) -> np.ndarray:
    """(keys, len(minutes)): the code of the key of the same area and level whose bucket starts `minutes`
    later (an hour either way allowed, for days of 23 or 25 hours), or -1. Key names end in "@<UTC start>"."""
    names = pd.Series(np.asarray(key_names, dtype=object), dtype=object).astype(str)
    parts = names.str.rsplit("@", n=1, expand=True)
    if parts.shape[1] < 2:
        return np.full((len(names), len(minutes)), -1, dtype=np.int64)
    starts = pd.to_datetime(parts[1], format="%Y-%m-%dT%H:%MZ", utc=True, errors="coerce")
    valid = starts.notna().to_numpy()
    start_min = np.where(
        valid,
        starts.to_numpy(dtype="datetime64[ns]", na_value=np.datetime64(0, "ns")).astype(np.int64) // 60_000_000_000,
        -(10**12),
    )
    prefix, _ = pd.factorize(parts[0])
    index = pd.MultiIndex.from_arrays([prefix[valid], start_min[valid]])
    codes = np.flatnonzero(valid)
    out = np.full((len(names), len(minutes)), -1, dtype=np.int64)
    for j, shift in enumerate(minutes):
        for slack in (0, -60, 60):
            todo = out[:, j] < 0
            at = index.get_indexer(pd.MultiIndex.from_arrays([prefix[todo], start_min[todo] + shift + slack]))
            found = np.where(at >= 0, codes[np.maximum(at, 0)], -1)
            out[np.flatnonzero(todo), j] = np.where(valid[todo], found, -1)
    return out


# --- membership against the thresholds (every unit, exact) ---------------------------------------------------


def _none_drawn(n: np.ndarray, bad: np.ndarray, m: np.ndarray) -> np.ndarray:
    """P(a uniform m-subset of n items holds none of `bad` of them), elementwise."""
    out = np.ones(len(n))
    for j in range(int(m.max()) if len(m) else 0):
        active = j < m
        num = (n - bad - j).astype(float)
        den = np.maximum((n - j).astype(float), 1.0)
        out = np.where(active, out * np.clip(num / den, 0.0, 1.0), out)
    return out


def membership_advantage(
    n_keys: np.ndarray, n_boundary: np.ndarray, anchors: np.ndarray, anchor_boundary: np.ndarray, points: int
) -> np.ndarray:
    """Per entry: the probability that the knowledge (an anchor uniform among `anchors` keys of the zone, then
    p - 1 of the unit's other keys; with anchors = 0, p - 1 of all its keys) holds a boundary key."""
    anchored = anchors > 0
    rest = np.where(anchored, n_keys - 1, n_keys)
    m = np.minimum(points - 1, np.maximum(rest, 0))
    anchor_clean = np.where(anchored, (anchors - anchor_boundary) / np.maximum(anchors, 1), 1.0)
    # an anchor that is not a boundary key leaves every boundary key among the others
    return 1.0 - anchor_clean * _none_drawn(rest, n_boundary, m)


# --- the assessment -----------------------------------------------------------------------------------------


@dataclass
class _Entries:
    unit: np.ndarray
    zone: np.ndarray  # zone names (object)
    anchors: np.ndarray  # the unit's keys in the zone (0: a zone it is in with no published key of its)
    anchor_boundary: np.ndarray


def _entries(sets: KeySets, boundary: np.ndarray, hidden: tuple[np.ndarray, np.ndarray] | None) -> _Entries:
    zones, zone_of_key = np.unique(sets.key_zone.astype(str), return_inverse=True)
    pair_unit = np.repeat(np.arange(sets.units, dtype=np.int64), np.diff(sets.unit_offsets))
    code = pair_unit * max(len(zones), 1) + zone_of_key[sets.unit_keys]
    distinct, inverse = np.unique(code, return_inverse=True)
    anchors = np.bincount(inverse, minlength=len(distinct))
    anchor_boundary = np.bincount(inverse, weights=boundary[sets.unit_keys].astype(float), minlength=len(distinct))
    unit = distinct // max(len(zones), 1)
    zone = zones[distinct % max(len(zones), 1)].astype(object)
    if hidden is not None and len(hidden[0]):
        seen = set(zip(unit.tolist(), zone.tolist()))
        extra = [
            (u, z) for u, z in zip(np.asarray(hidden[0]).tolist(), np.asarray(hidden[1]).tolist()) if (u, z) not in seen
        ]
        extra = sorted(set(extra))
        if extra:
            unit = np.concatenate([unit, np.array([u for u, _ in extra], dtype=np.int64)])
            zone = np.concatenate([zone, np.array([z for _, z in extra], dtype=object)])
            anchors = np.concatenate([anchors, np.zeros(len(extra), dtype=np.int64)])
            anchor_boundary = np.concatenate([anchor_boundary, np.zeros(len(extra))])
    return _Entries(unit, zone, anchors, anchor_boundary.astype(np.int64))


def _draw(
    sets: KeySets, unit: int, zone: str, anchored: bool, params: AdvantageParams, rng: np.random.Generator
) -> list[np.ndarray]:
    keys = sets.unit_keys[sets.unit_offsets[unit] : sets.unit_offsets[unit + 1]]
    if not len(keys):
        return []
    if not anchored:
        take = min(params.points - 1, len(keys))
        return [np.sort(rng.choice(keys, take, replace=False)) for _ in range(params.draws)]
    in_zone = keys[sets.key_zone[keys].astype(str) == zone]
    drawn = []
    for _ in range(params.draws):
        anchor = in_zone[rng.integers(len(in_zone))]
        others = keys[keys != anchor]
        take = min(params.points - 1, len(others))
        drawn.append(np.sort(np.concatenate([[anchor], rng.choice(others, take, replace=False)])))
    return drawn


def _tie_share(outputs: list[np.ndarray], targets: np.ndarray, sets: KeySets) -> np.ndarray:
    """Per output: 1/t when its target is among the t units whose published key sets are its best Jaccard
    matches, else 0."""
    from spatial_release.risk.attack import best_matches

    if not outputs:
        return np.zeros(0)
    offsets = KeySets.offsets(np.array([len(o) for o in outputs]))
    flat = np.concatenate(outputs).astype(np.int64)
    rec = KeySets(sets.key_zone, offsets, flat, np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64))
    truth = KeySets(
        sets.key_zone, sets.unit_offsets, sets.unit_keys.astype(np.int64), sets.key_offsets, sets.key_units.astype(np.int64)
    )
    pairs, _, _, _ = best_matches(rec, truth, np.zeros(sets.keys, dtype=bool))
    n_units = max(sets.units, 1)
    ties = np.bincount(pairs // n_units, minlength=len(outputs)) if len(pairs) else np.zeros(len(outputs))
    wanted = np.arange(len(outputs), dtype=np.int64) * n_units + targets
    hit = np.isin(wanted, pairs)
    return np.where(hit, 1.0 / np.maximum(ties, 1), 0.0)


def _regularity(
    sets: KeySets,
    boundary: np.ndarray,
    shifts: np.ndarray,
    knowledge: list[np.ndarray],
    targets: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Success with and without the target of the regularity guess from each knowledge set (its keys and the
    published keys at `shifts` of them), under the project's rule."""
    with_out, without_out, reveal_with, reveal_without, changed = [], [], [], [], []
    for known, unit in zip(knowledge, targets.tolist()):
        guesses = shifts[known].ravel()
        guesses = np.setdiff1d(guesses[guesses >= 0], known)
        mine = sets.unit_keys[sets.unit_offsets[unit] : sets.unit_offsets[unit + 1]]
        correct = np.isin(guesses, mine)
        lost = correct & boundary[guesses]  # the target's boundary keys: unpublished without it
        with_out.append(np.union1d(known, guesses))
        without_out.append(np.union1d(known, guesses[~lost]))
        reveal_with.append(bool(correct.any()))
        reveal_without.append(bool((correct & ~lost).any()))
        changed.append(bool(lost.any()))
    share_with = _tie_share(with_out, targets, sets)
    changed_rows = np.flatnonzero(changed)
    share_without = share_with.copy()
    if len(changed_rows):
        share_without[changed_rows] = _tie_share([without_out[i] for i in changed_rows], targets[changed_rows], sets)
    return share_with * np.array(reveal_with, dtype=float), share_without * np.array(reveal_without, dtype=float)


def assess_advantage(
    sets: KeySets,
    key_names: np.ndarray,
    key_count: np.ndarray,
    k: int,
    params: AdvantageParams,
    ceiling: float,
    population: dict[str, float] | None = None,
    hidden: tuple[np.ndarray, np.ndarray] | None = None,
) -> AdvantageReport:
    """Per-zone advantage of the release whose published key sets are `sets` (key names and published counts
    by key code; k the threshold). `hidden`: (unit code, zone) of every zone each unit has a true point in
    (the entries of zones where none of its keys is published come from it)."""
    started = time.perf_counter()
    boundary = np.asarray(key_count) == k
    per_unit_keys = np.diff(sets.unit_offsets)
    pair_unit = np.repeat(np.arange(sets.units, dtype=np.int64), per_unit_keys)
    unit_boundary = np.bincount(pair_unit, weights=boundary[sets.unit_keys].astype(float), minlength=sets.units).astype(
        np.int64
    )
    entries = _entries(sets, boundary, hidden)
    member = membership_advantage(
        per_unit_keys[entries.unit], unit_boundary[entries.unit], entries.anchors, entries.anchor_boundary, params.points
    )
    shifts = {name: key_shifts(key_names, minutes) for name, minutes in SHIFTS.items()}
    rng = np.random.default_rng(params.seed)
    published_zones = set(np.unique(sets.key_zone.astype(str)).tolist())
    report = AdvantageReport(
        units=sets.units, boundary_keys=int(boundary.sum()), boundary_units=int((unit_boundary > 0).sum())
    )
    labels = np.where(np.isin(entries.zone, list(published_zones)), entries.zone, NO_PUBLISHED_FIGURE)
    for zone in sorted(set(labels.tolist())):
        rows = np.flatnonzero(labels == zone)
        complete = len(rows) <= params.targets_per_zone
        sample = rows if complete else np.sort(rng.choice(rows, params.targets_per_zone, replace=False))
        report.zones.append(
            _zone_figures(
                sets,
                entries,
                member,
                boundary,
                shifts,
                params,
                ceiling,
                population,
                zone,
                rows,
                sample,
                complete,
                rng,
                unit_boundary,
            )
        )
    report.seconds = time.perf_counter() - started
    return report


def _zone_figures(
    sets: KeySets,
    entries: _Entries,
    member: np.ndarray,
    boundary: np.ndarray,
    shifts: dict[str, np.ndarray],
    params: AdvantageParams,
    ceiling: float,
    population: dict[str, float] | None,
    zone: str,
    rows: np.ndarray,
    sample: np.ndarray,
    complete: bool,
    rng: np.random.Generator,
    unit_boundary: np.ndarray,
) -> ZoneAdvantage:
    knowledge, owner = [], []
    for i, entry in enumerate(sample.tolist()):
        drawn = _draw(
            sets, int(entries.unit[entry]), str(entries.zone[entry]), bool(entries.anchors[entry] > 0), params, rng
        )
        knowledge += drawn
        owner += [i] * len(drawn)
    owner_arr = np.array(owner, dtype=np.int64)
    targets = entries.unit[sample][owner_arr] if len(owner_arr) else np.zeros(0, dtype=np.int64)
    per_attacker_with: dict[str, np.ndarray] = {}
    per_attacker_without: dict[str, np.ndarray] = {}
    for name in (REGULARITY_DAY, REGULARITY_WEEK):
        w, wo = _regularity(sets, boundary, shifts[name], knowledge, targets) if knowledge else (np.zeros(0), np.zeros(0))
        per_attacker_with[name] = _per_target(w, owner_arr, len(sample))
        per_attacker_without[name] = _per_target(wo, owner_arr, len(sample))
    advantages = {MEMBERSHIP: member[sample]}
    for name in (REGULARITY_DAY, REGULARITY_WEEK):
        advantages[name] = np.clip(per_attacker_with[name] - per_attacker_without[name], 0.0, 1.0)
    stacked = np.vstack([advantages[a] for a in ATTACKERS])
    best = stacked.max(axis=0) if len(sample) else np.zeros(0)
    success_with = np.maximum(per_attacker_with[REGULARITY_DAY], per_attacker_with[REGULARITY_WEEK])
    success_without = np.maximum(per_attacker_without[REGULARITY_DAY], per_attacker_without[REGULARITY_WEEK])
    q, conf = params.quantile, params.confidence
    advantage = quantile_higher(best, q)
    ucb = advantage if complete else max(advantage, order_statistic_bound(best, q, conf))
    exposed = _exposed(member[rows], member[sample], best, ceiling, complete, conf)
    public = population.get(zone) if population else None
    by_attacker = {a: quantile_higher(advantages[a], q) for a in ATTACKERS}
    strongest = max(ATTACKERS, key=lambda a: (by_attacker[a], a != MEMBERSHIP, a == REGULARITY_DAY))
    if by_attacker[strongest] == 0.0:  # no attacker gains: name the one that succeeds most, with or without
        strongest = max((REGULARITY_DAY, REGULARITY_WEEK), key=lambda a: quantile_higher(per_attacker_with[a], q))
    return ZoneAdvantage(
        zone=zone,
        targets=len(sample),
        units=None if zone == NO_PUBLISHED_FIGURE else len(rows),
        success_without=quantile_higher(success_without, q),
        success_with=quantile_higher(success_with, q),
        advantage=advantage,
        advantage_ucb=ucb,
        strongest=strongest,
        exposed=exposed,
        exposed_share=(exposed / public) if public else None,
        boundary_units=int((unit_boundary[entries.unit[rows]] > 0).sum()),
    )


def _per_target(values: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    if not len(values):
        return np.zeros(n)
    return np.bincount(owner, weights=values, minlength=n) / np.maximum(np.bincount(owner, minlength=n), 1)


def _exposed(
    member_all: np.ndarray, member_sample: np.ndarray, best: np.ndarray, ceiling: float, complete: bool, conf: float
) -> int:
    """An upper bound on how many of the zone's units have an advantage over the ceiling: every unit the
    membership attacker puts over (exact), plus, of the others, the sampled share the other attackers put over
    (its Clopper-Pearson bound) times their number."""
    over_member = int((member_all > ceiling).sum())
    if complete:
        return int((best > ceiling).sum())
    rest = member_sample <= ceiling
    if not rest.any():
        return over_member
    others_over = int(((best > ceiling) & rest).sum())
    share = clopper_pearson_upper(others_over, int(rest.sum()), conf)
    return over_member + math.ceil(share * (len(member_all) - over_member))
