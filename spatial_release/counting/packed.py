"""Presence counted from one packed integer per ping: sorted in numpy, then run lengths instead of hash tables.

When the unit ids are integers, each ping's (unit, bucket, area) fits one BIGINT of bit fields
    key = ((unit - unit_min) << bucket_bits | bucket) << slot_bits | slot,
with slot = area key + 1, 0 for a ping in no area, and all ones for an unsure ping (near an edge, assigned
exactly afterwards). The scan computes the key with the projection: in this process (`counting.arrayscan`),
or in DuckDB's SQL (`counts._keyed_sql`) when the files' footers or the zoning do not allow; numpy sorts the
keys (a vectorised sort, instead of two hash aggregations over (unit, bucket, area) and then (unit,
bucket)), and every group is then a run of equal values:
- runs of equal keys are the pings per (unit, bucket, area);
- runs of equal key >> slot_bits are the (unit, bucket) pairs, their areas in ascending order; the dominant
  area (most pings, ties to the smallest key, which is the smallest id as `keys_sort_like_ids` requires) is
  one max per pair (`presence_from_keys`, over ranges of units on the engine's threads);
- the leaf counts are the run lengths of (rank << bucket_bits | bucket) over the dominant areas, sorted again.
The result is the same membership and the same counts as the SQL paths (tests/test_counting_paths.py
compares them on pings with ties and edges, and on zones with pings in no zone). Used for presence over one zoning on
DuckDB (the data comes to this process); Spark, text unit ids and keys that would not fit keep the SQL paths.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from spatial_release.counting.arrayscan import ArrayScan, Footers
from spatial_release.counting.buckets import BucketSlots
from spatial_release.counting.engines import DuckDBEngine, Engine
from spatial_release.counting.plan import ZoningPlan

KEY_BITS = 62  # packed keys stay below 2^62, clear of BIGINT's overflow in the SQL that computes them
# Memory of the packed path in this process, per ping: the scan's Arrow result (key and two mostly-NULL
# coordinate columns, 24 bytes) and the keys (8 bytes); bench/release_bench.py measures the peak with DuckDB's
# own buffers. The path is taken only when this fits in DuckDB's memory limit, the budget the user
# set for counting; past it the SQL paths run, and spill.
BYTES_PER_PING = 32
_UNITS = {
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "bytes": 1,
}
_INTEGER_UNITS = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER"}


@dataclass(frozen=True)
class Packing:
    """key = (((unit - unit_min) << bucket_bits | bucket) << slot_bits) | slot: bit fields, so that taking a
    key apart is shifts and masks (numpy's integer division cost more than the sort)."""

    unit_min: int
    bucket_bits: int
    slot_bits: int  # slots: area key + 1, 0 for "in no area", the largest value for "unsure"
    unit_type: pa.DataType  # the pings' unit column type, kept in the membership

    @property
    def unsure(self) -> int:
        return (1 << self.slot_bits) - 1

    def key_sql(self) -> str:
        """The packed key over `keyed`'s columns; NULL for a ping outside the period's buckets."""
        slot = f"CASE WHEN unsure THEN {self.unsure} ELSE coalesce(k_0 + 1, 0) END"
        return (
            f"CASE WHEN b IS NOT NULL THEN ((CAST(unit AS BIGINT) - {self.unit_min}) * {1 << self.bucket_bits} "
            f"+ b) * {1 << self.slot_bits} + {slot} END"
        )


def packing_for(
    engine: Engine, measure: str, plans: Sequence[ZoningPlan], slots: BucketSlots, footers: Footers | None = None
) -> Packing | None:
    """The packing of these pings, or None when the packed path does not apply: not DuckDB, not presence over
    one zoning whose keys compare like its ids with an SQL projection, unit ids that are not integers, a
    NULL unit id or coordinate, no pings, more pings than DuckDB's memory limit holds at `BYTES_PER_PING`,
    or fields that would not fit: units, buckets and areas in 62 bits, and as many pings as there are beside
    the area's bits (`presence_from_keys` packs a run's ping count above its slot). footers: the pings'
    Parquet footers (`arrayscan.read_footers`), which tell the unit ids' type and range, the row count and
    that nothing is NULL without a scan (all the files' rows: a superset of the `pings` view's); None: a
    query over the `pings` view finds them."""
    if not isinstance(engine, DuckDBEngine) or measure != "presence" or len(plans) != 1:
        return None
    plan = plans[0]
    # no SQL projection: every ping is unsure, and the packed path would assign them row by row in pandas
    if plan.key_bound is None or not plan.keys_sort_like_ids or plan.projection is None:
        return None
    if footers is not None:
        low, high, rows, complete, unit_type = footers.unit_min, footers.unit_max, footers.rows, True, footers.unit_type
    else:
        kind = engine.fetch("SELECT typeof(unit) AS t FROM pings LIMIT 1")
        if kind.empty or kind.iloc[0]["t"] not in _INTEGER_UNITS:
            return None
        low, high, rows, complete = engine.con.execute(
            "SELECT min(unit), max(unit), count(*), count(unit) = count(*) AND count(lon) = count(*) "
            "AND count(lat) = count(*) FROM pings"
        ).fetchall()[0]
        unit_type = engine.con.sql("SELECT unit FROM pings LIMIT 0").to_arrow_table().schema.field("unit").type
    # a NULL unit id or coordinate (ingest quarantines them): the SQL paths count what they are given
    if not complete or int(rows) * BYTES_PER_PING > _memory_limit(engine):
        return None
    unit_bits = (int(high) - int(low)).bit_length()
    bucket_bits = max(len(slots.buckets) - 1, 1).bit_length()
    slot_bits = (plan.key_bound + 1).bit_length()  # slots 0 .. key_bound + 1, the last for unsure pings
    if unit_bits + bucket_bits + slot_bits > KEY_BITS or int(rows).bit_length() + slot_bits > KEY_BITS:
        return None
    return Packing(int(low), bucket_bits, slot_bits, unit_type)


def _memory_limit(engine: DuckDBEngine) -> float:
    """DuckDB's memory limit in bytes, as the engine reports it ('1.8 GiB'); unlimited if unreadable."""
    text = str(engine.con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]).strip()
    number, _, unit = text.partition(" ")
    try:
        return float(number) * _UNITS[unit]
    except (ValueError, KeyError):
        return float("inf")


@dataclass
class PackedScan:
    keys: np.ndarray | None  # packed keys of the pings, unsorted, -1 where not placed in an area; None once taken
    located: int  # how many: pings placed in an area
    pings_outside: int  # pings in no area of the zoning (not counting those beyond the usable area)
    outside_coordinates: pd.DataFrame  # ulon, ulat: the distinct coordinates of those pings
    unsure_coordinates: int  # distinct unsure coordinates assigned exactly

    def take_keys(self) -> np.ndarray:
        """The keys, no longer held here, so that `presence_from_keys` can free them as soon as it is done
        with them (8 bytes a ping)."""
        keys, self.keys = self.keys, None
        if keys is None:
            raise ValueError("the packed keys were already taken")
        return keys


class PeriodMismatch(Exception):
    """Pings whose instants fall in none of the period's buckets (`count` of them)."""

    def __init__(self, count: int):
        super().__init__(count)
        self.count = count


def scan_packed(
    engine: DuckDBEngine,
    keyed_sql: str,
    packing: Packing,
    exact_keys: Callable[[pd.DataFrame], pd.DataFrame],
    arrays: ArrayScan | None = None,
) -> PackedScan:
    """One scan: each ping's packed key, with the coordinates of the pings in no area or unsure; the unsure
    ones assigned by `exact_keys` (their distinct coordinates, as in the SQL paths). Raises PeriodMismatch.
    arrays: the scan done in this process (`counting.arrayscan`) instead of keyed_sql's."""
    if arrays is not None:
        threads = int(engine.describe()["threads"])
        keys, odd_positions, lon, lat, beyond, off_period = arrays.run(threads)
        if off_period:
            raise PeriodMismatch(off_period)
        odd = pd.DataFrame({"ulon": lon, "ulat": lat})
        return _finish_scan(keys, odd_positions, odd, packing, exact_keys, beyond)
    table = engine.con.sql(
        f"""{keyed_sql} SELECT {packing.key_sql()} AS key,
                   CASE WHEN unsure OR k_0 IS NULL THEN lon END AS ulon,
                   CASE WHEN unsure OR k_0 IS NULL THEN lat END AS ulat FROM keyed"""
    ).to_arrow_table()
    if table.column("key").null_count:
        raise PeriodMismatch(table.column("key").null_count)
    keys, odd_positions, odd = _keys_and_odd_rows(table)
    del table
    return _finish_scan(keys, odd_positions, odd, packing, exact_keys)


def _finish_scan(
    keys: np.ndarray,
    odd_positions: np.ndarray,
    odd: pd.DataFrame,
    packing: Packing,
    exact_keys: Callable[[pd.DataFrame], pd.DataFrame],
    beyond: np.ndarray | None = None,
) -> PackedScan:
    """The unsure pings (odd rows whose slot is all ones) assigned exactly; the pings in no area (slot 0) and
    those at the `beyond` positions (not pings of the count) marked -1."""
    slot = keys[odd_positions] & packing.unsure  # the slot field (unsure is all ones)
    unsure = slot == packing.unsure
    distinct = odd.loc[unsure].drop_duplicates(ignore_index=True)
    if len(distinct):
        fixed = exact_keys(distinct)  # ulon, ulat, f_0 (-1: in no area)
        found = odd.loc[unsure].merge(fixed, on=["ulon", "ulat"], how="left")["f_0"].to_numpy(np.int64)
        slot[unsure] = found + 1  # -1 (in no area) becomes slot 0
        keys[odd_positions] = (keys[odd_positions] & ~packing.unsure) | slot
    nowhere = slot == 0
    outside = odd.loc[nowhere].drop_duplicates(ignore_index=True)
    keys[odd_positions[nowhere]] = -1  # not counted
    beyond_n = 0
    if beyond is not None and len(beyond):
        keys[beyond] = -1
        beyond_n = len(beyond)
    located = len(keys) - int(nowhere.sum()) - beyond_n
    return PackedScan(keys, located, int(nowhere.sum()), outside, len(distinct))


def _keys_and_odd_rows(table: pa.Table) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
    """The keys as one writable array, and the positions and coordinates of the rows that kept theirs (in
    no area or unsure), batch by batch: batches whose coordinates are all NULL, nearly all of them, are
    passed over on their null count, without combining the columns first."""
    keys = np.empty(table.num_rows, np.int64)
    positions, coordinates = [], []
    offset = 0
    for batch in table.to_batches():
        rows = batch.num_rows
        keys[offset : offset + rows] = batch.column(0).to_numpy(zero_copy_only=False)
        lon = batch.column(1)
        if lon.null_count < rows:
            found = pc.indices_nonzero(pc.is_valid(lon))
            positions.append(found.to_numpy() + offset)
            coordinates.append(batch.select([1, 2]).take(found))
        offset += rows
    odd = (
        pa.Table.from_batches(coordinates).to_pandas()
        if coordinates
        else pd.DataFrame({"ulon": np.empty(0), "ulat": np.empty(0)})
    )
    return keys, np.concatenate(positions) if positions else np.empty(0, np.int64), odd


def run_starts(values: np.ndarray) -> np.ndarray:
    """Indices where a run of equal values starts in a sorted array."""
    if len(values) == 0:
        return np.empty(0, np.int64)
    change = np.empty(len(values), bool)
    change[0] = True
    np.not_equal(values[1:], values[:-1], out=change[1:])
    return np.flatnonzero(change)


def _run_lengths(starts: np.ndarray, total: int) -> np.ndarray:
    lengths = np.empty(len(starts), np.int64)
    if len(starts):
        np.subtract(starts[1:], starts[:-1], out=lengths[:-1])
        lengths[-1] = total - starts[-1]
    return lengths


@dataclass(frozen=True)
class PackedCounts:
    member: pa.Table  # unit, b, rank: one row per (unit, bucket), sorted by unit then bucket
    leaf: pa.Table  # rank, b, n: sorted by rank then bucket
    units: int


def _narrow(values: np.ndarray, bits: int) -> np.ndarray:
    """int32 when every value has at most 31 bits (half the memory of the membership's columns)."""
    return values.astype(np.int32) if bits <= 31 else values


def presence_from_keys(keys: np.ndarray, packing: Packing, threads: int = 1) -> PackedCounts:
    """The dominant area of every (unit, bucket) and the leaf counts, from the packed keys, in any order, -1
    for a ping not counted (taken over: sorted in place, freed on the way). The sorted keys are cut into
    ranges of units, one per thread, each counted on its own (`_presence_of_sorted`): no unit spans two
    ranges, so the memberships follow each other and only the leaf counts are merged."""
    shift = packing.bucket_bits + packing.slot_bits
    keys.sort()  # in place; the dropped pings (-1) come first
    bounds = [int(i) for i in np.searchsorted(keys, _unit_bounds(keys, shift, max(1, threads)))]
    pieces = [keys[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)]
    del keys
    if len(pieces) == 1:
        parts = [_presence_of_sorted(pieces.pop(), packing)]
    else:
        with ThreadPoolExecutor(len(pieces)) as pool:
            parts = list(pool.map(lambda piece: _presence_of_sorted(piece, packing), pieces))
        del pieces
    if len(parts) == 1:
        leaf_keys, leaf_n = parts[0].leaf_keys, parts[0].leaf_n
    else:
        leaf_keys, leaf_n = np.concatenate([p.leaf_keys for p in parts]), np.concatenate([p.leaf_n for p in parts])
        order = np.argsort(leaf_keys, kind="stable")  # sorted runs, merged
        leaf_keys, leaf_n = leaf_keys[order], leaf_n[order]
        starts = run_starts(leaf_keys)
        leaf_keys, leaf_n = leaf_keys[starts], np.add.reduceat(leaf_n, starts) if len(starts) else leaf_n
    bucket_mask = (1 << packing.bucket_bits) - 1
    leaf = pa.table(
        {"rank": pa.array(leaf_keys >> packing.bucket_bits), "b": pa.array(leaf_keys & bucket_mask), "n": pa.array(leaf_n)}
    )

    def column(name: str, cast: pa.DataType | None = None) -> pa.ChunkedArray:
        chunks = [pa.array(getattr(p, name)) for p in parts]
        return pa.chunked_array([c.cast(cast) for c in chunks] if cast is not None else chunks)

    member = pa.table({"unit": column("unit", packing.unit_type), "b": column("bucket"), "rank": column("rank")})
    return PackedCounts(member, leaf, sum(p.units for p in parts))


def _unit_bounds(keys: np.ndarray, shift: int, parts: int) -> list[int]:
    """Key bounds [0, b_1, ..., top) cutting the keys into `parts` ranges of about as many pings, at unit
    boundaries (b_i = unit << shift), from a sample of the keys (in any order)."""
    top = int(np.iinfo(np.int64).max)
    if parts == 1 or len(keys) < 100_000:
        return [0, top]
    sample = keys[:: max(1, len(keys) // 8192)]
    units = np.sort(sample[sample >= 0] >> shift)
    if len(units) == 0:
        return [0, top]
    cuts = sorted({int(units[len(units) * i // parts]) for i in range(1, parts)} - {0})
    return [0, *(cut << shift for cut in cuts), top]


@dataclass
class _Presence:
    """One range of units: the membership (sorted by unit, then bucket), and its leaf counts (distinct
    rank << bucket_bits | bucket, ascending, and their counts)."""

    unit: np.ndarray
    bucket: np.ndarray
    rank: np.ndarray
    leaf_keys: np.ndarray
    leaf_n: np.ndarray
    units: int


def _presence_of_sorted(keys: np.ndarray, packing: Packing) -> _Presence:
    """The dominant area of every (unit, bucket) of the sorted keys: one max per (unit, bucket) over
    (pings << slot_bits | (mask - slot)): most pings, then the smallest slot, which is the smallest area key.
    Arrays are updated in place where they can be (memory, not time, is the limit on large inputs), and the
    areas, buckets and leaf keys are 32-bit when their fields fit (half the memory traffic, and the sort)."""
    slot_bits, bucket_bits = packing.slot_bits, packing.bucket_bits
    slot_mask, bucket_mask = (1 << slot_bits) - 1, (1 << bucket_bits) - 1
    total = len(keys)
    starts = run_starts(keys)
    area = keys[starts]
    del keys
    score = _run_lengths(starts, total)  # pings per (unit, bucket, area), then the score
    del starts
    score <<= slot_bits
    slot = area & slot_mask
    slot ^= slot_mask  # mask - slot
    score |= slot
    del slot
    area >>= slot_bits  # now (unit - unit_min) << bucket_bits | bucket
    pair = area
    pair_starts = run_starts(pair)
    best = np.maximum.reduceat(score, pair_starts) if len(pair_starts) else score
    del score
    best &= slot_mask
    best ^= slot_mask  # the dominant slot
    best -= 1  # its area key
    rank = _narrow(best, slot_bits)
    del best
    pair = pair[pair_starts]
    del pair_starts
    bucket = _narrow(pair & bucket_mask, bucket_bits)
    pair >>= bucket_bits
    pair += packing.unit_min
    unit = pair
    units = int(np.count_nonzero(unit[1:] != unit[:-1])) + 1 if len(unit) else 0
    leaf_key = rank << bucket_bits if slot_bits + bucket_bits <= 31 else rank.astype(np.int64) << bucket_bits
    leaf_key |= bucket
    leaf_key.sort()
    leaf_starts = run_starts(leaf_key)
    leaf_runs = leaf_key[leaf_starts].astype(np.int64)
    leaf_n = _run_lengths(leaf_starts, len(leaf_key))
    del leaf_key, leaf_starts
    return _Presence(unit, bucket, rank, leaf_runs, leaf_n, units)


__all__ = [
    "KEY_BITS",
    "PackedCounts",
    "PackedScan",
    "Packing",
    "PeriodMismatch",
    "packing_for",
    "presence_from_keys",
    "run_starts",
    "scan_packed",
]
