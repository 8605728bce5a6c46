"""Per-zone re-identification risk of what has been released, over this release and the earlier ones.

Adversary: knows p of the (cell, bucket) keys a target was counted in over the window, one of them in zone z
("I know she was in z"), and every published table. The anonymity set of that knowledge K is the number of
units whose released key set contains all of K; the target is singled out with probability 1/|set|.

Per unit u and anchor zone z, S Monte-Carlo draws (seeded): an anchor key of u in z, uniformly, plus p - 1 other
keys of u drawn uniformly without replacement (all of them when u has fewer). Per zone:
  mean      mean over units of the mean 1/n  (the probability of singling out a random target in z)
  at_risk   share of units whose mean risk exceeds the threshold tau
  worst     largest 1/n seen in any draw
  journalist mean of min(1, pi_z / n) with pi_z = units in z / public population of z (the adversary does
            not know the target is in the panel); <= the prosecutor figure, equal at pi_z = 1.
With `exhaustive`, every p-subset that contains an anchor is enumerated (small inputs, tests): the worst
case is then exact and the monotonicity properties hold exactly.

Implementation: an inverted index key -> sorted unit ids, intersected smallest-first with early exit when
only the target is left. No enumeration of all p-subsets in the sampled mode. Units and keys are coded by
their sort order in KeySets (8 bytes per released (unit, key) pair, both directions); the risk step builds
them in DuckDB (risk.keysets), estimate_risk from a DataFrame: the same key sets give the same figures.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from spatial_release import tasks
from spatial_release.arrays import distinct_names
from spatial_release.risk import kernels


@dataclass(frozen=True)
class RiskParams:
    points: int = 4  # p, how many released keys of a trace the adversary knows
    draws: int = 10  # S, Monte-Carlo draws per unit and anchor zone
    seed: int = 20180101
    threshold: float = 0.2  # tau, for the share of units at risk
    exhaustive: bool = False


@dataclass
class ZoneRisk:
    zone: str
    units: int
    mean: float
    at_risk: float
    worst: float
    journalist: float | None
    panel_share: float | None


@dataclass
class RiskReport:
    zones: list[ZoneRisk] = field(default_factory=list)
    pooled: float = 0.0  # record-weighted mean over all units: reported, never gated on
    units: int = 0
    keys: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {
            "zones": [z.__dict__ for z in self.zones],
            "pooled": self.pooled,
            "units": self.units,
            "keys": self.keys,
            "seconds": self.seconds,
        }

    @classmethod
    def from_json(cls, data: dict) -> RiskReport:
        return cls(
            [ZoneRisk(**z) for z in data["zones"]],
            float(data["pooled"]),
            int(data["units"]),
            int(data["keys"]),
            float(data["seconds"]),
        )

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame([z.__dict__ for z in self.zones])

    def worst_zone(self, measure: str = "mean") -> ZoneRisk | None:
        """The zone with the highest figure: the release figure is the worst zone, never a mean."""
        scored = [z for z in self.zones if getattr(z, measure) is not None]
        return max(scored, key=lambda z: (getattr(z, measure), z.zone)) if scored else None


def _intersect_sorted(small: np.ndarray, large: np.ndarray) -> np.ndarray:
    """Elements of sorted `small` that are in sorted `large`: O(|small| log |large|), no re-sorting."""
    if len(large) == 0:
        return large
    at = np.searchsorted(large, small)
    at[at == len(large)] = len(large) - 1
    return small[large[at] == small]


class InvertedIndex:
    """key code -> sorted unit codes, as one array of unit codes and the offset of each key's postings."""

    def __init__(self, offsets: np.ndarray, units_sorted: np.ndarray):
        self.units_sorted = units_sorted
        self.starts, self.ends = offsets[:-1], offsets[1:]
        self._cache: dict[tuple[int, ...], int] = {}

    def postings(self, key: int) -> np.ndarray:
        return self.units_sorted[self.starts[key] : self.ends[key]]

    def size(self, key: int) -> int:
        return int(self.ends[key] - self.starts[key])

    def anonymity(self, keys: list[int]) -> int:
        """How many units hold every key (at least 1: the target). Results are cached by key set: units
        that share anchors draw the same sets often."""
        ordered = tuple(sorted(keys, key=lambda k: (self.size(k), k)))
        cached = self._cache.get(ordered)
        if cached is not None:
            return cached
        current = self.postings(ordered[0])
        for key in ordered[1:]:
            if len(current) <= 1:
                break
            current = _intersect_sorted(current, self.postings(key))
        result = max(len(current), 1)
        if len(self._cache) < 2_000_000:
            self._cache[ordered] = result
        return result


@dataclass
class KeySets:
    """The released key sets of the window with integer codes: units numbered in their sort order, keys in
    the sort order of their names. Both directions are compressed (CSR): unit u's sorted key codes are
    unit_keys[unit_offsets[u]:unit_offsets[u + 1]], key k's sorted unit codes key_units[key_offsets[k]:...].
    Memory: 8 bytes per released (unit, key) pair plus the unit and key tables, whatever the pings."""

    key_zone: np.ndarray  # risk zone of each key code
    unit_offsets: np.ndarray
    unit_keys: np.ndarray
    key_offsets: np.ndarray
    key_units: np.ndarray

    @property
    def units(self) -> int:
        return len(self.unit_offsets) - 1

    @property
    def keys(self) -> int:
        return len(self.key_offsets) - 1

    def digest(self) -> str:
        """sha256 of the coded key sets (every array, with its type and shape): equal digests, equal sets."""
        digest = hashlib.sha256()
        for array in (self.key_zone.astype(str), self.unit_offsets, self.unit_keys, self.key_offsets, self.key_units):
            digest.update(f"{array.dtype.str}{array.shape}".encode())
            digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()

    @staticmethod
    def offsets(counts: np.ndarray) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])

    @classmethod
    def from_codes(cls, unit_codes: np.ndarray, key_codes: np.ndarray, key_zone: np.ndarray) -> KeySets:
        """From distinct (unit code, key code) pairs held in memory."""
        n_units, n_keys = (int(unit_codes.max()) + 1 if len(unit_codes) else 0), len(key_zone)
        by_unit = np.lexsort((key_codes, unit_codes))
        by_key = np.lexsort((unit_codes, key_codes))
        return cls(
            key_zone,
            cls.offsets(np.bincount(unit_codes, minlength=n_units)),
            key_codes[by_unit],
            cls.offsets(np.bincount(key_codes, minlength=n_keys)),
            unit_codes[by_key],
        )


def estimate_risk(
    unit_keys: pd.DataFrame,
    key_zone: pd.Series,
    params: RiskParams = RiskParams(),
    population: dict[str, float] | None = None,
) -> RiskReport:
    """Per-zone re-identification risk of the released keys (see the module docstring for the figures).

    unit_keys: columns unit, key, one row per released key a unit was counted in (set semantics), over
    this release and the earlier ones of the window. key_zone: the risk zone of each key (index: key).
    params: p (known points), Monte-Carlo draws, seed, the at-risk threshold, exhaustive enumeration.
    population: public population per zone, for the journalist figure (None: no journalist figure).

    The prosecutor figure (the adversary knows the target is in the data) is 1/|anonymity set|; the
    journalist figure scales it by the zone's panel share, as in El Emam and Dankar, "Protecting privacy
    using k-anonymity", JAMIA 15(5), 2008 (and ARX's risk models). The adversary knowing p points of a
    trace is the unicity model of de Montjoye et al., "Unique in the Crowd: the privacy bounds of human
    mobility", Scientific Reports 3:1376, 2013 (four points single out 95 % of people in a mobile-phone
    dataset). Raises ValueError when a key has no risk zone. For key sets too large for a DataFrame,
    build the KeySets in DuckDB (risk.keysets) and call estimate_key_sets."""
    started = time.perf_counter()
    pairs = unit_keys[["unit", "key"]].drop_duplicates()
    unit_codes, _ = pd.factorize(pairs["unit"], sort=True)
    key_codes, keys = pd.factorize(pairs["key"], sort=True)
    zones_of_key = key_zone.reindex(keys).to_numpy()
    if pd.isna(zones_of_key).any():
        missing = list(keys[pd.isna(zones_of_key)][:3])
        raise ValueError(f"keys without a risk zone: {missing}")
    return estimate_key_sets(KeySets.from_codes(unit_codes, key_codes, zones_of_key), params, population, started)


def estimate_digest(sets: KeySets, params: RiskParams, population: dict[str, float] | None) -> str:
    """What `estimate_key_sets` depends on, as one sha256: the coded key sets, the parameters (points, draws,
    seed, threshold, exhaustive) and the population per zone. The estimate is a pure function of these."""
    payload = json.dumps(
        {"params": params.__dict__, "population": sorted((population or {}).items()), "sets": sets.digest()},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def estimate_key_sets(
    sets: KeySets,
    params: RiskParams = RiskParams(),
    population: dict[str, float] | None = None,
    started: float | None = None,
) -> RiskReport:
    """estimate_risk on key sets already coded (units and keys numbered in their sort order): the figures
    depend on the codes only, so the same key sets give the same report however they were built."""
    started = time.perf_counter() if started is None else started
    if not params.exhaustive:
        return _sampled_report(sets, params, population, started)
    per_zone: dict[str, dict[str, list]] = {}
    index = InvertedIndex(sets.key_offsets, sets.key_units)
    for zone, keys, anchors in _unit_zones(sets):
        _record(per_zone, zone, _draw_risks(index, keys, anchors, params))
    report = RiskReport(units=sets.units, keys=sets.keys)
    all_means = []
    for zone in sorted(per_zone):
        entry = per_zone[zone]
        n_units = len(entry["mean"])
        share = None
        journalist = None
        if population and population.get(zone):
            share = min(1.0, n_units / population[zone])
            journalist = float(np.mean([np.mean(np.minimum(1.0, share * r)) for r in entry["n_inverse"]]))
        report.zones.append(
            ZoneRisk(
                zone=str(zone),
                units=n_units,
                mean=float(np.mean(entry["mean"])),
                at_risk=float(np.mean(np.array(entry["mean"]) > params.threshold)),
                worst=float(np.max(entry["worst"])),
                journalist=journalist,
                panel_share=share,
            )
        )
        all_means += entry["mean"]
    report.pooled = float(np.mean(all_means)) if all_means else 0.0
    report.seconds = time.perf_counter() - started
    return report


def _unit_zones(sets: KeySets) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    """(anchor zone, the unit's keys, its keys in that zone) per unit, in unit order, zones sorted."""
    for unit in range(sets.units):
        keys = sets.unit_keys[sets.unit_offsets[unit] : sets.unit_offsets[unit + 1]]
        zones = sets.key_zone[keys]
        for zone in sorted(set(zones)):
            yield zone, keys, keys[zones == zone]


def _record(per_zone: dict[str, dict[str, list]], zone: str, risks: np.ndarray) -> None:
    entry = per_zone.setdefault(zone, {"mean": [], "worst": [], "n_inverse": []})
    entry["mean"].append(float(np.mean(risks)))
    entry["worst"].append(float(np.max(risks)))
    entry["n_inverse"].append(risks)


@dataclass
class Draws:
    """The knowledge sets of every (unit, anchor zone) entry, S per entry, entries in unit order then zone
    order: `entry_zone` (zone code per entry, codes in the sorted order of `zones`) and, per set width (the
    anchor plus min(p, keys of the unit) - 1 others), the rows (entry * S + draw) and their key codes."""

    zones: np.ndarray
    entry_zone: np.ndarray
    by_width: list[tuple[np.ndarray, np.ndarray]]
    entry_unit: np.ndarray  # unit code per entry (the attack needs whose set each row is)


COUNTING_BINS_PER_PAIR = 4  # `_entries` counts its codes into bins when there are at most this many per pair
DRAW_PAIRS = 2_000_000  # (unit, key) pairs per chunk of units in `draw_knowledge` (bounds its memory)


def draw_knowledge(sets: KeySets, params: RiskParams) -> Draws:
    """Every knowledge set of the sampled estimate, drawn for all entries in arrays (no Python loop per unit).

    Per row r (entry e = r // S): the anchor is the floor(U0[r] * a)-th of the a keys the unit holds in the
    zone; the others are a uniform (p - 1)-subset of the unit's n - 1 other keys, by sequential selection:
    the j-th is the floor(U_j[r] * (n - 1 - j))-th key not yet chosen (shifted past the chosen ones in
    ascending order). U0, U_1, ... are drawn from the seeded generator in that order, one value per row each,
    before any set is built; the sets are then built chunk by chunk of units (DRAW_PAIRS), so memory is that
    of the rows, not of every (unit, key) pair several times over (sorting the pairs whole multiplied the
    peak memory at scale); drawing entries one by one in Python was the slowest part of the estimate."""
    zones, zone_of_key = distinct_names(sets.key_zone)
    chunks = _unit_chunks(sets)
    # Each chunk's entries are found twice: here to count the rows (every uniform is drawn before any set), and
    # below to build its sets, so that no chunk's sorted pairs are kept in between (the second pass is cheap
    # next to holding them).
    found = [_entry_codes(sets, zone_of_key, len(zones), a, b) for a, b in chunks]
    units_of_entries = np.concatenate([f[0] for f in found] or [np.zeros(0, dtype=np.int64)])
    entry_zone = np.concatenate([f[1] for f in found] or [np.zeros(0, dtype=np.int64)])
    rows = len(entry_zone) * params.draws
    rng = np.random.default_rng(params.seed)
    uniforms = [rng.random(rows) for _ in range(max(params.points, 1))]  # U0, U_1, ..., U_(p-1)
    keys = np.zeros((rows, params.points), dtype=np.int32)
    width = np.zeros(rows, dtype=np.int64)
    at = 0
    for a, b in chunks:
        entry_unit, _, anchor_at, anchors, by_zone = _entries(sets, zone_of_key, len(zones), a, b)
        end = at + len(entry_unit) * params.draws
        keys[at:end], width[at:end] = _draw_rows(
            sets, params, entry_unit, anchor_at, anchors, by_zone, [u[at:end] for u in uniforms]
        )
        at = end
    by_width: list[tuple[np.ndarray, np.ndarray]] = []
    for w in np.unique(width):
        chosen = np.flatnonzero(width == w)
        by_width.append((chosen, keys[chosen, :w]))
    return Draws(zones, entry_zone, by_width, units_of_entries)


def _unit_chunks(sets: KeySets) -> list[tuple[int, int]]:
    """Ranges of units [a, b) holding about DRAW_PAIRS pairs each (at least one unit)."""
    chunks, a = [], 0
    while a < sets.units:
        b = int(np.searchsorted(sets.unit_offsets, sets.unit_offsets[a] + DRAW_PAIRS, side="right")) - 1
        b = min(max(b, a + 1), sets.units)
        chunks.append((a, b))
        a = b
    return chunks


def _chunk_codes(sets: KeySets, zone_of_key: np.ndarray, n_zones: int, a: int, b: int) -> tuple[int, np.ndarray, int]:
    """Where the pairs of units [a, b) start, their (unit, zone) codes (a*n_zones .. b*n_zones - 1, in pair order)
    and how many codes there can be."""
    lo, hi = int(sets.unit_offsets[a]), int(sets.unit_offsets[b])
    pair_unit = np.repeat(np.arange(a, b, dtype=np.int64), np.diff(sets.unit_offsets[a : b + 1]))
    return lo, pair_unit * n_zones + zone_of_key[sets.unit_keys[lo:hi]], (b - a) * n_zones


def _few_bins(bins: int, pairs: int) -> bool:
    """Whether a chunk's codes are few enough to be counted into bins, not sorted: at 50 M pings the merge sorts
    were 3.2 of the 5 s the knowledge took to draw (a small chunk's bins are few whatever its pairs)."""
    return bins <= COUNTING_BINS_PER_PAIR * (pairs + 256)


def _entry_codes(sets: KeySets, zone_of_key: np.ndarray, n_zones: int, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """`_entries`' units and zones alone (what the first pass counts): the distinct (unit, zone) codes of units
    [a, b), ascending, found by counting them into bins where `_entries` would (no order of the pairs needed)."""
    _, code, bins = _chunk_codes(sets, zone_of_key, n_zones, a, b)
    if _few_bins(bins, len(code)):
        distinct = np.flatnonzero(np.bincount(code - a * n_zones, minlength=bins)) + a * n_zones
    else:
        distinct = np.unique(code)
    return distinct // n_zones, distinct % n_zones


def _entries(sets: KeySets, zone_of_key: np.ndarray, n_zones: int, a: int, b: int):
    """The (unit, anchor zone) entries of units [a, b), in unit then zone order: their unit, zone, where their
    anchors start in `by_zone` and how many there are, and `by_zone` (the global indices of the units' pairs
    ordered by unit, zone, key: a stable sort by (unit, zone) keeps each unit's keys sorted, a KeySets
    invariant)."""
    lo, code, bins = _chunk_codes(sets, zone_of_key, n_zones, a, b)
    if _few_bins(bins, len(code)):
        by_zone = kernels.stable_order(code - a * n_zones, bins)
    else:
        by_zone = np.argsort(code, kind="stable")
    code = code[by_zone]
    starts = np.flatnonzero(np.concatenate([[True], code[1:] != code[:-1]])) if len(code) else np.zeros(0, dtype=np.int64)
    anchors = np.diff(np.concatenate([starts, [len(code)]]))
    return code[starts] // n_zones, code[starts] % n_zones, starts, anchors, by_zone + lo


def _draw_rows(
    sets: KeySets,
    params: RiskParams,
    entry_unit: np.ndarray,
    anchor_at: np.ndarray,
    anchors: np.ndarray,
    by_zone: np.ndarray,
    uniforms: list[np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """The knowledge sets of some entries' rows (S per entry) from their uniforms, and each set's width."""
    row_entry = np.repeat(np.arange(len(entry_unit)), params.draws)
    unit = entry_unit[row_entry]
    first = sets.unit_offsets[unit]  # where each row's unit's keys start in unit_keys
    n = sets.unit_offsets[unit + 1] - first
    pick = np.minimum((uniforms[0] * anchors[row_entry]).astype(np.int64), anchors[row_entry] - 1)
    anchor_pair = by_zone[anchor_at[row_entry] + pick]
    anchor_pos = anchor_pair - first
    chosen = np.zeros((len(row_entry), max(params.points - 1, 0)), dtype=np.int64)
    for j in range(params.points - 1):
        position = np.minimum((uniforms[j + 1] * np.maximum(n - 1 - j, 1)).astype(np.int64), np.maximum(n - 2 - j, 0))
        for earlier in np.sort(chosen[:, :j], axis=1).T:  # shift past the chosen ones, in ascending order
            position += position >= earlier
        chosen[:, j] = position
    keys = np.empty((len(row_entry), params.points), dtype=np.int32)
    keys[:, 0] = sets.unit_keys[anchor_pair]
    if params.points > 1:
        positions = chosen + (chosen >= anchor_pos[:, None])  # skip the anchor in the unit's key list
        keys[:, 1:] = sets.unit_keys[np.minimum(first[:, None] + positions, len(sets.unit_keys) - 1)]
    return keys, np.minimum(params.points, n)


def _sampled_report(sets: KeySets, params: RiskParams, population: dict[str, float] | None, started: float) -> RiskReport:
    """The per-zone figures of the sampled estimate, from the S risks of every entry."""
    drawn = draw_knowledge(sets, params)
    counts = _anonymity(sets, drawn.by_width, len(drawn.entry_zone) * params.draws)
    return zone_report(drawn.zones, drawn.entry_zone, counts, params, population, (sets.units, sets.keys), started)


def zone_report(
    zones: np.ndarray,
    entry_zone: np.ndarray,
    counts: np.ndarray,
    params: RiskParams,
    population: dict[str, float] | None,
    size: tuple[int, int],
    started: float,
) -> RiskReport:
    """The per-zone figures from the anonymity count of every knowledge set (S per entry, entries in unit then
    zone order); `size`: the key sets' units and keys."""
    risks = (1.0 / counts).reshape(len(entry_zone), params.draws)
    entry_mean, entry_worst = risks.mean(axis=1), risks.max(axis=1)
    report = RiskReport(units=size[0], keys=size[1])
    for code, zone in enumerate(zones):
        mine = entry_zone == code
        n_units = int(mine.sum())
        if not n_units:
            continue
        share = journalist = None
        if population and population.get(zone):
            share = min(1.0, n_units / population[zone])
            journalist = float(np.mean(np.minimum(1.0, share * risks[mine]).mean(axis=1)))
        report.zones.append(
            ZoneRisk(
                zone=str(zone),
                units=n_units,
                mean=float(np.mean(entry_mean[mine])),
                at_risk=float(np.mean(entry_mean[mine] > params.threshold)),
                worst=float(np.max(entry_worst[mine])),
                journalist=journalist,
                panel_share=share,
            )
        )
    # pooled: every entry's mean (one per unit and zone it was seen in), zone by zone as the exhaustive mode
    report.pooled = float(np.mean(entry_mean[np.argsort(entry_zone, kind="stable")])) if len(entry_mean) else 0.0
    report.seconds = time.perf_counter() - started
    return report


CANDIDATES = 2_000_000  # (draw, unit) candidates examined at a time by `_anonymity` (bounds its memory)


def _anonymity(sets: KeySets, groups: list[tuple[np.ndarray, np.ndarray]], total: int) -> np.ndarray:
    """max(1, number of units holding every key) of each drawn set (`groups`: row numbers and the sets of one
    width), by row: the units of each set's rarest key, kept while they hold the next rarest key, and so on.
    Exactly what InvertedIndex.anonymity computes set by set (its early exit only stops at a count of 0 or 1).

    The sets go in chunks of about CANDIDATES candidates (`kernels.anonymity_counts`: the candidates narrowed
    key by key, the keys with a bitset first by a bit test, the others by a galloping search of their postings;
    a set whose keys all have bitsets, its rarest held by many units, counted by the AND of the bitsets;
    `kernels.dense_keys`, built once here and shared by every chunk)."""
    sizes = np.diff(sets.key_offsets)
    out = np.empty(total, dtype=np.int64)
    chunks = []
    for rows, keysets in groups:
        keysets = rarest_first(keysets, sizes)
        load = np.cumsum(sizes[keysets[:, 0]])
        start = 0
        while start < len(keysets):
            end = max(start + 1, int(np.searchsorted(load, (load[start - 1] if start else 0) + CANDIDATES)))
            chunks.append((rows[start:end], keysets[start:end]))
            start = end
    count_chunks(sets, chunks, out)
    return out


def rarest_first(keysets: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Each row's keys ordered by how many units hold them (`sizes`), ties by key code, as InvertedIndex orders
    them; int64."""
    keysets = keysets.astype(np.int64)
    return np.take_along_axis(keysets, np.lexsort((keysets, sizes[keysets]), axis=1), axis=1)


def count_chunks(sets: KeySets, chunks: list[tuple[np.ndarray, np.ndarray]], out: np.ndarray, exact: bool = False) -> None:
    """The counts of every chunk (row numbers, sets rarest first) written to their rows of `out`, or, `exact`,
    the numbers of units of `sets` holding each set added to them (`risk.ranges`: the units in ranges)."""
    if not chunks:
        return
    shared = (sets, kernels.dense_keys(sets.key_offsets, sets.key_units, sets.units), exact)  # built once, read by all
    spark = tasks.spark_tasks()
    if spark is not None:  # the chunks as Spark tasks, the key sets broadcast to the executors once
        for (rows, _), counts in zip(chunks, spark.map_shared(_anonymity_task, shared, [k for _, k in chunks])):
            _store(out, rows, counts, exact)
        return

    def count(task: tuple[np.ndarray, np.ndarray]) -> None:  # each task writes its own rows of `out`
        _store(out, task[0], _anonymity_task(shared, task[1]), exact)

    # Threads: the kernel holds no GIL and the chunks are independent.
    with ThreadPoolExecutor(max_workers=max(1, min(os.cpu_count() or 1, len(chunks)))) as pool:
        list(pool.map(count, chunks))


def _store(out: np.ndarray, rows: np.ndarray, counts: np.ndarray, add: bool) -> None:
    if add:
        out[rows] += counts
    else:
        out[rows] = counts


def _anonymity_task(shared: tuple[KeySets, kernels.DenseKeys, bool], keysets: np.ndarray) -> np.ndarray:
    """The counts of one chunk of sets (each row's keys rarest first), with the key sets and their bitsets."""
    sets, dense, exact = shared
    return kernels.anonymity_counts(sets.key_offsets, sets.key_units, np.ascontiguousarray(keysets), dense, exact)


def _draw_risks(index: InvertedIndex, keys: np.ndarray, anchors: np.ndarray, params: RiskParams) -> np.ndarray:
    """1 / anonymity-set size for every knowledge set of one unit and anchor zone, enumerated (exhaustive mode):
    each anchor with each (p - 1)-subset of the unit's other keys."""
    p = params.points
    risks = []
    for anchor in anchors:
        others = keys[keys != anchor]
        for rest in itertools.combinations(others.tolist(), min(p - 1, len(others))):
            risks.append(1.0 / index.anonymity([int(anchor), *rest]))
    return np.array(risks)
