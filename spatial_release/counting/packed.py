"""Presence counted from one packed integer per ping: sorted in numpy, then run lengths instead of hash tables.

When the unit ids are integers, each ping's (unit, bucket, area) fits one BIGINT
    key = ((unit - unit_min) * n_buckets + bucket) * slots + slot,
with slot = area key + 1, 0 for a ping in no area, and `slots - 1` for an unsure ping (near an edge, assigned
exactly afterwards). DuckDB computes the key in the same scan as the SQL projection (`counts._keyed_sql`);
numpy sorts the keys (a vectorised sort of 10 M integers takes about 0.1 s here, against 2-3 s for the two
hash aggregations over (unit, bucket, area) and then (unit, bucket) that it replaces), and every group is
then a run of equal values:
- runs of equal keys are the pings per (unit, bucket, area);
- runs of equal key // slots are the (unit, bucket) pairs, their areas in ascending order, so the dominant
  area (most pings, ties to the smallest key, which is the smallest id as `keys_sort_like_ids` requires) is
  the first run holding the pair's largest count;
- the leaf counts are the run lengths of (rank * n_buckets + bucket) over the dominant areas, sorted again.
The result is the same membership and the same counts as the SQL paths (tests/test_counting_paths.py
compares the three on pings with ties, edges and pings in no area). Used for presence over one zoning on
DuckDB (the data comes to this process); Spark, text unit ids and keys that would not fit keep the SQL paths.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from spatial_release.counting.buckets import BucketSlots
from spatial_release.counting.engines import DuckDBEngine, Engine
from spatial_release.counting.plan import ZoningPlan

KEY_LIMIT = 2**62  # packed keys stay below this, far from BIGINT's overflow in the SQL that computes them
_INTEGER_UNITS = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER"}


@dataclass(frozen=True)
class Packing:
    unit_min: int
    n_buckets: int
    slots: int  # area keys + 2: slot 0 is "in no area", the last one "unsure"
    unit_type: pa.DataType  # the pings' unit column type, kept in the membership

    @property
    def unsure(self) -> int:
        return self.slots - 1

    def key_sql(self) -> str:
        """The packed key over `keyed`'s columns; NULL for a ping outside the period's buckets."""
        slot = f"CASE WHEN unsure THEN {self.unsure} ELSE coalesce(k_0 + 1, 0) END"
        return (f"CASE WHEN b IS NOT NULL THEN ((CAST(unit AS BIGINT) - {self.unit_min}) * {self.n_buckets} + b) "
                f"* {self.slots} + {slot} END")


def packing_for(engine: Engine, measure: str, plans: Sequence[ZoningPlan], slots: BucketSlots) -> Packing | None:
    """The packing of these pings, or None when the packed path does not apply: not DuckDB, not presence over
    one zoning whose keys compare like its ids, unit ids that are not integers, no pings, or keys that would
    not fit (units x buckets x areas of 2^62 or more)."""
    if not isinstance(engine, DuckDBEngine) or measure != "presence" or len(plans) != 1:
        return None
    plan = plans[0]
    if plan.key_bound is None or not plan.keys_sort_like_ids:
        return None
    kind = engine.fetch("SELECT typeof(unit) AS t FROM pings LIMIT 1")
    if kind.empty or kind.iloc[0]["t"] not in _INTEGER_UNITS:
        return None
    low, high = engine.con.execute("SELECT min(unit), max(unit) FROM pings").fetchall()[0]
    n_buckets, n_slots = len(slots.buckets), plan.key_bound + 2
    if (int(high) - int(low) + 1) * n_buckets * n_slots >= KEY_LIMIT:
        return None
    unit_type = engine.con.sql("SELECT unit FROM pings LIMIT 0").to_arrow_table().schema.field("unit").type
    return Packing(int(low), n_buckets, n_slots, unit_type)


@dataclass(frozen=True)
class PackedScan:
    keys: np.ndarray  # packed keys of the pings placed in an area (sorted)
    pings_outside: int  # pings in no area of the zoning (not counting those beyond the usable area)
    outside_coordinates: pd.DataFrame  # ulon, ulat: the distinct coordinates of those pings
    unsure_coordinates: int  # distinct unsure coordinates assigned exactly


class PeriodMismatch(Exception):
    """Pings whose instants fall in none of the period's buckets (`count` of them)."""

    def __init__(self, count: int):
        super().__init__(count)
        self.count = count


def scan_packed(engine: DuckDBEngine, keyed_sql: str, packing: Packing,
                exact_keys) -> PackedScan:
    """One scan: each ping's packed key, with the coordinates of the pings in no area or unsure; the unsure
    ones assigned by `exact_keys` (their distinct coordinates, as in the SQL paths). Raises PeriodMismatch."""
    table = engine.con.sql(
        f"""{keyed_sql} SELECT {packing.key_sql()} AS key,
                   CASE WHEN unsure OR k_0 IS NULL THEN lon END AS ulon,
                   CASE WHEN unsure OR k_0 IS NULL THEN lat END AS ulat FROM keyed""").to_arrow_table()
    key = table.column("key").combine_chunks()
    if key.null_count:
        raise PeriodMismatch(key.null_count)
    keys = key.to_numpy(zero_copy_only=False).astype(np.int64, copy=True)
    odd_positions = pc.indices_nonzero(pc.is_valid(table.column("ulon").combine_chunks())).to_numpy()
    odd = table.select(["ulon", "ulat"]).take(odd_positions).to_pandas()
    del table, key
    slot = keys[odd_positions] % packing.slots
    unsure = slot == packing.unsure
    distinct = odd.loc[unsure].drop_duplicates(ignore_index=True)
    if len(distinct):
        fixed = exact_keys(distinct)  # ulon, ulat, f_0 (-1: in no area)
        found = odd.loc[unsure].merge(fixed, on=["ulon", "ulat"], how="left")["f_0"].to_numpy(np.int64)
        slot[unsure] = found + 1  # -1 (in no area) becomes slot 0
        keys[odd_positions] = keys[odd_positions] - keys[odd_positions] % packing.slots + slot
    nowhere = slot == 0
    outside = odd.loc[nowhere].drop_duplicates(ignore_index=True)
    keys = np.delete(keys, odd_positions[nowhere])
    keys.sort()
    return PackedScan(keys, int(nowhere.sum()), outside, len(distinct))


def _run_starts(values: np.ndarray) -> np.ndarray:
    """Indices where a run of equal values starts in a sorted array."""
    if len(values) == 0:
        return np.empty(0, np.int64)
    change = np.empty(len(values), bool)
    change[0] = True
    np.not_equal(values[1:], values[:-1], out=change[1:])
    return np.flatnonzero(change)


def _run_lengths(starts: np.ndarray, total: int) -> np.ndarray:
    return np.diff(starts, append=total)


@dataclass(frozen=True)
class PackedCounts:
    member: pa.Table  # unit, b, rank: one row per (unit, bucket), sorted by unit then bucket
    leaf: pa.Table  # rank, b, n: sorted by rank then bucket
    units: int


def presence_from_keys(keys: np.ndarray, packing: Packing) -> PackedCounts:
    """The dominant area of every (unit, bucket) and the leaf counts, from the sorted packed keys."""
    starts = _run_starts(keys)
    pings = _run_lengths(starts, len(keys))  # pings per (unit, bucket, area)
    area_runs = keys[starts]
    del keys
    pair = area_runs // packing.slots  # (unit - unit_min) * n_buckets + bucket
    pair_starts = _run_starts(pair)
    most = np.maximum.reduceat(pings, pair_starts) if len(pair_starts) else pings[:0]
    pair_of_run = np.repeat(np.arange(len(pair_starts)), _run_lengths(pair_starts, len(pair)))
    top = np.flatnonzero(pings == most[pair_of_run])
    first_top = top[_run_starts(pair_of_run[top])]  # areas ascend within a pair: the first top is the smallest
    chosen_pair, rank = pair[first_top], area_runs[first_top] % packing.slots - 1
    unit, bucket = chosen_pair // packing.n_buckets + packing.unit_min, chosen_pair % packing.n_buckets
    units = len(_run_starts(unit))
    leaf_key = np.sort(rank * packing.n_buckets + bucket)
    leaf_starts = _run_starts(leaf_key)
    leaf_runs = leaf_key[leaf_starts]
    member = pa.table({"unit": pa.array(unit).cast(packing.unit_type), "b": pa.array(bucket),
                       "rank": pa.array(rank)})
    leaf = pa.table({"rank": pa.array(leaf_runs // packing.n_buckets), "b": pa.array(leaf_runs % packing.n_buckets),
                     "n": pa.array(_run_lengths(leaf_starts, len(leaf_key)))})
    return PackedCounts(member, leaf, units)


__all__ = ["KEY_LIMIT", "PackedCounts", "PackedScan", "Packing", "PeriodMismatch", "packing_for",
           "presence_from_keys", "scan_packed"]
