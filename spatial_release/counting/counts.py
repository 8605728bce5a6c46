"""Count distinct units per (area, time bucket) and per margin, from validated pings, on a SQL engine.

`presence`: each unit counts once per bucket, in its dominant area (most pings; ties to the smallest area id),
so counts add up: a parent is the sum of its children and the total is the number of distinct units.
`visitors`: a unit counts in every area it visited; a parent counts each unit once, so
max(children) <= parent <= sum(children).
Margins of `presence` are sums of their children's counts, which is exact because each unit is in one area
per bucket; margins of `visitors` are distinct units counted from the memberships.

The work is one scan of the pings in SQL (project, bucket, assign to areas; see `counting.plan`) that counts
pings per (unit, bucket, area), the exact assignment of the unsure coordinates, then group-bys. Presence over
one zoning whose area keys compare like its ids, on DuckDB with integer unit ids, packs unit, bucket and area
into one integer per ping and finds the dominant areas by sorting those in numpy (`counting.packed`; the scan
itself runs in this process, pyarrow and numpy on the engine's threads, when the files' footers and the
projection allow: `counting.arrayscan`), then sums the parents' and totals' counts in numpy; with
other unit ids or on Spark it packs bucket and area into one key and uses the keys as ranks
(`_scan_presence_by_area`); visitors, linked zonings and other keys go through `_scan_generic` and a
dictionary of ranks. All three give the same tables (tests/test_counting_paths.py). Everything the engine
handles is integer-keyed: area keys, bucket numbers (hours by arithmetic, other buckets through a 15-minute
slot table), ranks of area ids, parents' codes; ids and instants are decoded at the end, on the small count
tables.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from spatial_release.counting.arrayscan import ArrayScan, Footers, read_footers
from spatial_release.counting.buckets import SLOT_US, BucketSlots, CountingError, bucket_slots, period_buckets
from spatial_release.counting.decoded import DecodedKeys
from spatial_release.counting.engines import DuckDBEngine, Engine
from spatial_release.counting.outputs import write_membership, write_membership_arrays, write_outside, write_parquet
from spatial_release.counting.packed import (
    PackedCounts,
    Packing,
    PeriodMismatch,
    packing_for,
    presence_from_keys,
    run_starts,
    scan_packed,
)
from spatial_release.counting.pings import area_filter, data_extent, register_pings, usable_area
from spatial_release.counting.plan import ZoningPlan, zoning_sql
from spatial_release.levels import LEAF, at_rung
from spatial_release.memory import hugepage_advice_off
from spatial_release.period import Period
from spatial_release.policy import Policy
from spatial_release.progress import Progress, ProgressEvent, silent

RANK_BASE = 4294967296  # 2^32: presence packs (ping count, -rank) into one BIGINT to take the max in one pass


@dataclass(frozen=True)
class CountResult:
    cell_counts_path: Path  # cell_id, bucket_start, n : every non-empty (cell, bucket), before suppression
    margin_counts_path: Path  # level, area_id, bucket_start, n
    membership_path: Path  # unit, bucket_start, cell_id: who was counted where (internal)
    outside_path: Path  # pings in no area of the main geometry
    groups: int
    units: int  # distinct units over the period
    unit_buckets: int  # distinct (unit, bucket) pairs
    pings_located: int
    pings_outside: int
    unsure_coordinates: int  # distinct coordinates assigned exactly (pyproj, STRtree) instead of in SQL
    linked_covers_main: dict[str, bool]  # per linked zoning: every located ping lies in one of its areas
    methods: dict[str, str]  # per zoning: how pings were assigned
    seconds: dict[str, float] = field(default_factory=dict)


def _bucket_sql(slots: BucketSlots, engine: Engine, ts: str = "ts") -> str:
    """The bucket number of a ping from its 15-minute slot (NULL outside the period): by arithmetic when the
    buckets are even (hours), else by looking the slot up in the period's slot table."""
    d = engine.dialect
    index = f"CAST(floor({d.epoch_us(ts)} / {SLOT_US}) AS BIGINT) - {slots.first_slot}"
    n_slots = len(slots.slot_bucket)
    even = slots.arithmetic()
    if even is not None:
        offset, per = even
        shifted = f"{index} + {offset}" if offset else index
        return f"CASE WHEN {index} BETWEEN 0 AND {n_slots - 1} THEN {d.int_div(shifted, str(per))} END"
    return f"CASE WHEN {index} BETWEEN 0 AND {n_slots - 1} THEN {d.array_at(slots.slot_bucket, f'{index} + 1')} END"


def _keyed_sql(plans: Sequence[ZoningPlan], slots: BucketSlots, engine: Engine, source: str = "pings") -> str:
    """WITH ... keyed AS (unit, b, lon, lat, unsure, k_0, k_1, ...): every ping of `source` with its bucket and
    area keys."""
    columns: dict = {}  # projection layers -> (x, y) column names, shared by zonings in the same CRS
    parts = []
    for i, plan in enumerate(plans):
        p = plan.projection
        if p is not None and p.layers not in columns:
            columns[p.layers] = (p, f"px_{len(columns)}", f"py_{len(columns)}")
        _, x, y = columns[p.layers] if p is not None else (None, "", "")
        parts.append(zoning_sql(plan, i, x, y))
    proj, carry = f"SELECT unit, lon, lat, {_bucket_sql(slots, engine)} AS b FROM {source}", ["unit", "lon", "lat", "b"]
    for projection, x, y in columns.values():
        proj = projection.relation(f"({proj})", carry, x, y)
        carry += [x, y]
    depth = max((len(part.layers) for part in parts), default=0)
    for level in range(depth):  # each zoning's cell columns, one SELECT per layer
        cols = [(name, expr) for part in parts if level < len(part.layers) for name, expr in part.layers[level]]
        proj = f"SELECT {', '.join(carry)}, {', '.join(f'{e} AS {n}' for n, e in cols)} FROM ({proj})"
        carry += [n for n, _ in cols]
    joins = " ".join(part.lookup_join for part in parts)
    classes = "".join(f", lookup_{i}.cls AS cls_{i}" for i, part in enumerate(parts) if part.lookup_join)
    unsure = " OR ".join(part.unsure for part in parts)
    keys = ", ".join(f"{part.key} AS k_{i}" for i, part in enumerate(parts))
    return f"""
        WITH proj AS ({proj}),
        classed AS (SELECT proj.*{classes} FROM proj {joins}),
        keyed AS (SELECT unit, b, lon, lat, ({unsure}) AS unsure, {keys} FROM classed)"""


def _stage_a_sql(plans: Sequence[ZoningPlan], slots: BucketSlots, engine: Engine) -> str:
    """One row per (unit, bucket, areas of every zoning), unsure pings kept apart with their coordinates."""
    areas = ", ".join(f"CASE WHEN unsure THEN NULL ELSE k_{i} END AS a_{i}" for i in range(len(plans)))
    area_cols = ", ".join(f"a_{i}" for i in range(len(plans)))
    return f"""{_keyed_sql(plans, slots, engine)},
        marked AS (SELECT unit, b, unsure AS u, {areas},
                          CASE WHEN unsure OR k_0 IS NULL THEN lon END AS ulon,
                          CASE WHEN unsure OR k_0 IS NULL THEN lat END AS ulat FROM keyed)
        SELECT unit, b, u, {area_cols}, ulon, ulat, count(*) AS n FROM marked
        GROUP BY unit, b, u, {area_cols}, ulon, ulat"""


def _resolve_exactly(coords: pd.DataFrame, plans: Sequence[ZoningPlan], batch: int = 1_000_000) -> pd.DataFrame:
    """Exact area keys (-1: in no area) of each distinct unsure coordinate, for every zoning."""
    lon, lat = coords["ulon"].to_numpy(float), coords["ulat"].to_numpy(float)
    out = {"ulon": lon, "ulat": lat}
    for i, plan in enumerate(plans):
        keys = [plan.exact_keys(lon[s : s + batch], lat[s : s + batch]) for s in range(0, len(lon), batch)]
        out[f"f_{i}"] = np.concatenate(keys).astype(np.int64) if keys else np.empty(0, np.int64)
    return pd.DataFrame(out)


def _located_sql(n_zonings: int) -> str:
    sure = ", ".join(f"a_{i}" for i in range(n_zonings))
    fixed = ", ".join(f"nullif(f.f_{i}, -1) AS a_{i}" for i in range(n_zonings))
    return f"""
        SELECT unit, b, {sure}, n, CASE WHEN a_0 IS NULL THEN ulon END AS ulon,
               CASE WHEN a_0 IS NULL THEN ulat END AS ulat FROM obs WHERE NOT u
        UNION ALL
        SELECT o.unit, o.b, {fixed}, o.n, CASE WHEN f.f_0 = -1 THEN o.ulon END AS ulon,
               CASE WHEN f.f_0 = -1 THEN o.ulat END AS ulat
        FROM obs o JOIN fix f ON o.ulon = f.ulon AND o.ulat = f.ulat WHERE o.u"""


def _presence_sql(rows: str) -> str:
    """One row per (unit, bucket): the area with most pings, ties to the smallest rank (smallest id), found by
    one max over (pings * 2^32 + (2^32 - 1 - rank)) instead of a sort or a window."""
    top = RANK_BASE - 1
    return (
        f"SELECT o.unit, o.b, {top} - (max(o.n * {RANK_BASE} + ({top} - o.rank)) % {RANK_BASE}) AS rank "
        f"FROM ({rows}) o GROUP BY o.unit, o.b"
    )


def _membership_sql(measure: str, z: int, single: bool, unsure_buckets: Sequence[int]) -> str:
    """(unit, b, rank) rows of zoning z: one per unit and bucket (presence) or per visited area (visitors)."""
    ranked = f"SELECT l.unit, l.b, d.rank, l.n FROM located l JOIN dict_{z} d ON d.area = l.a_{z} WHERE l.a_0 IS NOT NULL"
    if measure == "visitors":
        return f"SELECT DISTINCT unit, b, rank FROM ({ranked}) r"
    if not single:
        summed = f"SELECT unit, b, rank, CAST(sum(n) AS BIGINT) AS n FROM ({ranked}) r GROUP BY unit, b, rank"
        return _presence_sql(summed)
    # With one zoning the scan already left one row per (unit, bucket, area), except where an unsure
    # coordinate was assigned exactly into an area the unit also has sure pings in. So only the buckets that
    # hold unsure pings are summed again (a literal list: no join over all rows); the rest go as they are.
    sure = "SELECT o.unit, o.b, d.rank, o.n FROM obs o JOIN dict_0 d ON d.area = o.a_0 WHERE NOT o.u"
    if not unsure_buckets:
        return _presence_sql(sure)
    listed = ", ".join(str(int(b)) for b in unsure_buckets)
    redone = (
        f"SELECT unit, b, rank, CAST(sum(n) AS BIGINT) AS n FROM ({ranked}) r WHERE r.b IN ({listed}) GROUP BY unit, b, rank"
    )
    return f"{_presence_sql(sure + f' AND o.b NOT IN ({listed})')} UNION ALL {_presence_sql(redone)}"


@dataclass(frozen=True)
class Rung:
    """A coarser time rung of the policy's ladder: the coarse bucket number of each of the policy's buckets."""

    name: str
    of_bucket: np.ndarray  # policy bucket number -> coarse bucket number
    buckets: pd.Series  # coarse bucket number -> bucket start (UTC)


def ladder_rungs(policy: Policy, period: Period, slots: BucketSlots) -> list[Rung]:
    """The rungs of the policy's time ladder over the period, each mapped from the policy's buckets through
    the 15-minute slot tables: every slot of one policy bucket must fall in one coarse bucket (checked)."""
    rungs = []
    for name in policy.time.ladder:
        coarse = bucket_slots(policy, period, name)
        of_bucket = np.full(len(slots.buckets), -1, np.int64)
        for fine_b, coarse_b in zip(slots.slot_bucket, coarse.slot_bucket):
            if of_bucket[fine_b] not in (-1, coarse_b):
                raise CountingError(
                    f"the {policy.time.bucket} bucket starting {slots.buckets[fine_b]} spans two "
                    f"{name} buckets in {policy.time.timezone}: the time ladder does not nest"
                )
            of_bucket[fine_b] = coarse_b
        starts = pd.Series(pd.to_datetime(coarse.buckets, utc=True)).astype("datetime64[us, UTC]")
        rungs.append(Rung(name, of_bucket, starts))
    return rungs


def _count_rungs(engine: Engine, plan: ZoningPlan, z: int, decoded: DecodedKeys, rungs: Sequence[Rung]) -> list[pa.Table]:
    """Figures of every level of zoning z at each coarser rung: the distinct units counted in the area in at
    least one of the policy's buckets inside the coarse bucket (the union of the finer memberships, for
    presence and visitors alike: one bike on seven days is one unit of the week)."""
    frames: list[pa.Table] = []
    if not rungs:
        return frames
    hierarchy = plan.hierarchy(pd.Series(decoded.ids, dtype=object))  # the same codes as hier_{z} (factorize)
    names = {
        level: np.asarray(pd.factorize(hierarchy[level].astype(str).to_numpy(object))[1], dtype=object).astype(str)
        for level in plan.parent_levels
    }
    for r, rung in enumerate(rungs):
        engine.register_frame(
            f"rung_{z}_{r}", pd.DataFrame({"b": np.arange(len(rung.of_bucket), dtype=np.int64), "cb": rung.of_bucket})
        )
        coarse = DecodedKeys(decoded.ids, rung.buckets, decoded.ranks)
        joined = f"member_{z} m JOIN rung_{z}_{r} t ON t.b = m.b"
        leaf = engine.fetch(f"SELECT m.rank, t.cb AS b, count(DISTINCT m.unit) AS n FROM {joined} GROUP BY m.rank, t.cb")
        frames.append(coarse.table(leaf, at_rung(plan.level, rung.name)))
        for level in plan.parent_levels:
            sql = (
                f"SELECT h.{level} AS parent, t.cb AS b, count(DISTINCT m.unit) AS n FROM {joined} "
                f"JOIN hier_{z} h ON h.rank = m.rank GROUP BY h.{level}, t.cb"
            )
            frames.append(coarse.table(engine.fetch(sql), at_rung(level, rung.name), area="parent", names=names[level]))
        totals = engine.fetch(f"SELECT t.cb AS b, count(DISTINCT m.unit) AS n FROM {joined} GROUP BY t.cb")
        frames.append(
            coarse.table(totals.assign(total_area=plan.total_level), at_rung(plan.total_level, rung.name), area="total_area")
        )
    return frames


def _ids_of(plan: ZoningPlan, keys: np.ndarray) -> np.ndarray:
    return plan.ids_of_keys(keys).astype(object) if len(keys) else np.empty(0, object)


def _materialize_membership(engine: Engine, z: int, member_sql: str) -> None:
    """member_<z> from member_sql and its leaf counts leaf_<z> (rank, b, n)."""
    engine.materialize(f"member_{z}", member_sql)
    engine.materialize(f"leaf_{z}", f"SELECT rank, b, count(*) AS n FROM member_{z} GROUP BY rank, b")


def _packed_decoded(plan: ZoningPlan, buckets: pd.Series, given: PackedCounts) -> DecodedKeys:
    """The areas the packed path counted (keys as ranks), from its leaf counts (sorted by rank)."""
    ranks = given.leaf.column("rank").to_numpy()
    keys = ranks[run_starts(ranks)] if len(ranks) else np.empty(0, np.int64)
    return DecodedKeys(_ids_of(plan, keys), buckets, keys)


def _sum_by(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys (non-negative integers), ascending, and the sum of the values of each."""
    if len(keys) == 0:
        return keys, values
    if int(keys.max()) < 2**25:  # a dense count: the sums of small integers are exact in float64
        sums = np.bincount(keys, weights=values)
        present = np.flatnonzero(np.bincount(keys))
        return present, sums[present].astype(np.int64)
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], values[order]
    starts = run_starts(keys)
    return keys[starts], np.add.reduceat(values, starts)


def _hierarchy_codes(plan: ZoningPlan, decoded: DecodedKeys) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per parent level: the code of each counted area's parent (in `decoded.ids` order) and the parent ids
    the codes stand for."""
    if plan.key_hierarchy is not None and decoded.ranks is not None:
        hierarchy = plan.key_hierarchy(decoded.ranks)  # from the keys: no parsing of ids
    else:
        hierarchy = plan.hierarchy(pd.Series(decoded.ids, dtype=object))
    coded = {level: pd.factorize(hierarchy[level].astype(str).to_numpy(object)) for level in plan.parent_levels}
    return {
        level: (codes.astype(np.int64), np.asarray(names, dtype=object).astype(str))
        for level, (codes, names) in coded.items()
    }


def _count_packed(
    engine: Engine, plan: ZoningPlan, z: int, given: PackedCounts, decoded: DecodedKeys, rungs: Sequence[Rung]
) -> tuple[DecodedKeys, pa.Table, list[pa.Table]]:
    """The packed path's tables (presence, keys as ranks), from its arrays: the leaf counts as they are,
    their ids as dictionary codes (`DecodedKeys.coded_table`); each parent's counts and the totals as sums of
    the leaf counts (a unit is in one area per bucket), summed in numpy. The membership is a view of its
    arrays in the engine (no copy of its rows), for the coarser rungs of a time ladder."""
    assert isinstance(engine, DuckDBEngine), "the packed path runs on DuckDB only (packing_for)"
    engine.register_arrow_view(f"member_{z}", given.member)
    rank, b, n = (given.leaf.column(name).to_numpy() for name in ("rank", "b", "n"))
    positions = decoded.positions(rank)
    leaf = decoded.coded_table(positions, b, n)
    margins = []
    if plan.level != LEAF:
        margins.append(decoded.table(pd.DataFrame({"rank": rank, "b": b, "n": n}), plan.level))
    parents = _hierarchy_codes(plan, decoded)
    n_buckets = max(len(decoded.buckets), 1)
    for level, (codes, names) in parents.items():
        keys, sums = _sum_by(codes[positions] * n_buckets + b, n)
        counts = pd.DataFrame({"parent": keys // n_buckets, "b": keys % n_buckets, "n": sums})
        margins.append(decoded.table(counts, level, area="parent", names=names))
    bucket, totals = _sum_by(b.astype(np.int64), n)
    totals_frame = pd.DataFrame({"b": bucket, "n": totals, "total_area": plan.total_level})
    margins.append(decoded.table(totals_frame, plan.total_level, area="total_area"))
    if rungs:  # the rungs' figures are distinct units over coarser buckets: SQL over the membership
        engine.register_frame(
            f"hier_{z}", pd.DataFrame({"rank": decoded.ranks, **{level: codes for level, (codes, _) in parents.items()}})
        )
        margins += _count_rungs(engine, plan, z, decoded, rungs)
    return decoded, leaf, margins


def _rank_keyed(engine: Engine, plan: ZoningPlan, z: int, buckets: pd.Series, member_sql: Callable[[], str]) -> DecodedKeys:
    """Zoning z's tables when member_sql gives area keys as ranks: the areas counted, from the (small) leaf
    table."""
    _materialize_membership(engine, z, member_sql())
    keys = np.sort(engine.fetch(f"SELECT DISTINCT rank AS area FROM leaf_{z}")["area"].to_numpy(np.int64))
    return DecodedKeys(_ids_of(plan, keys), buckets, keys)


def _dictionary_keyed(
    engine: Engine, plan: ZoningPlan, z: int, buckets: pd.Series, keys_sql: str, member_sql: Callable[[], str]
) -> DecodedKeys:
    """Zoning z's tables when area keys do not compare like ids: dict_<z> gives each key its rank in id order,
    for member_sql to join."""
    keys = engine.fetch(keys_sql)["area"].to_numpy(np.int64)
    ids = _ids_of(plan, keys)
    order = np.argsort(ids.astype(str), kind="stable")
    ranks = np.empty(len(keys), np.int64)
    ranks[order] = np.arange(len(keys))
    engine.register_frame(f"dict_{z}", pd.DataFrame({"area": keys, "rank": ranks}))
    decoded = DecodedKeys(ids[order], buckets)
    _materialize_membership(engine, z, member_sql())
    return decoded


def _register_hierarchy(engine: Engine, plan: ZoningPlan, z: int, decoded: DecodedKeys) -> dict[str, np.ndarray]:
    """hier_<z>: each area's parents as integer codes, so the engine groups on integers; returns, per parent
    level, the parent ids its codes stand for."""
    hierarchy = plan.hierarchy(pd.Series(decoded.ids, dtype=object))
    parents = {level: pd.factorize(hierarchy[level].astype(str).to_numpy(object)) for level in plan.parent_levels}
    engine.register_frame(
        f"hier_{z}",
        pd.DataFrame({"rank": decoded.ranks, **{level: codes.astype(np.int64) for level, (codes, _) in parents.items()}}),
    )
    return {level: np.asarray(names, dtype=object).astype(str) for level, (_, names) in parents.items()}


def _parent_sql(measure: str, z: int, level: str) -> str:
    if measure == "presence":  # each unit is in one area per bucket, so a parent is the sum of its children
        return (
            f"SELECT h.{level} AS parent, c.b, CAST(sum(c.n) AS BIGINT) AS n FROM leaf_{z} c "
            f"JOIN hier_{z} h ON h.rank = c.rank GROUP BY h.{level}, c.b"
        )
    return (
        f"SELECT h.{level} AS parent, m.b, count(DISTINCT m.unit) AS n FROM member_{z} m "
        f"JOIN hier_{z} h ON h.rank = m.rank GROUP BY h.{level}, m.b"
    )


def _total_sql(measure: str, z: int) -> str:
    if measure == "presence":
        return f"SELECT b, CAST(sum(n) AS BIGINT) AS n FROM leaf_{z} GROUP BY b"
    return f"SELECT b, count(DISTINCT unit) AS n FROM member_{z} GROUP BY b"


def _margin_tables(
    engine: Engine,
    plan: ZoningPlan,
    z: int,
    measure: str,
    decoded: DecodedKeys,
    leaf_counts: pd.DataFrame,
    parent_names: dict[str, np.ndarray],
) -> list[pa.Table]:
    """Margin frames of zoning z at the policy's bucket: its own level (unless it is the leaf), every parent
    level and the total."""
    margins = []
    if plan.level != LEAF:
        margins.append(decoded.table(leaf_counts, plan.level))
    for level in plan.parent_levels:  # parents as integer codes in the engine, named on the way out
        counts = engine.fetch(_parent_sql(measure, z, level))
        margins.append(decoded.table(counts, level, area="parent", names=parent_names[level]))
    # a total's one area is named as its level
    totals = engine.fetch(_total_sql(measure, z)).assign(total_area=plan.total_level)
    margins.append(decoded.table(totals, plan.total_level, area="total_area"))
    return margins


def _count_zoning(
    engine: Engine,
    plan: ZoningPlan,
    z: int,
    measure: str,
    buckets: pd.Series,
    keys_sql: str,
    member_sql: Callable[[], str],
    key_ranks: bool = False,
    rungs: Sequence[Rung] = (),
    given: PackedCounts | None = None,
    given_keys: DecodedKeys | None = None,
) -> tuple[DecodedKeys, pa.Table, list[pa.Table]]:
    """Leaf counts (area_id, bucket_start, n) and margin frames (level, area_id, bucket_start, n), with the
    figures of every coarser time rung among the margins (`_count_rungs`).

    key_ranks: member_sql gives area keys as ranks, which `plan.keys_sort_like_ids` allows (no dictionary
    join); else it joins dict_<z> (area key -> rank in id order). given: the membership and leaf counts
    already computed (`counting.packed`, keys as ranks), taken instead of member_sql, with given_keys its
    areas (`_packed_decoded`)."""
    if given is not None:
        return _count_packed(engine, plan, z, given, given_keys or _packed_decoded(plan, buckets, given), rungs)
    if key_ranks:
        decoded = _rank_keyed(engine, plan, z, buckets, member_sql)
    else:
        decoded = _dictionary_keyed(engine, plan, z, buckets, keys_sql, member_sql)
    parent_names = _register_hierarchy(engine, plan, z, decoded)
    leaf_counts = engine.fetch(f"SELECT rank, b, n FROM leaf_{z} ORDER BY rank, b")  # rank order is id order
    leaf = decoded.table(leaf_counts)
    margins = _margin_tables(engine, plan, z, measure, decoded, leaf_counts, parent_names)
    margins += _count_rungs(engine, plan, z, decoded, rungs)
    return decoded, leaf, margins


def _timed(seconds: dict[str, float], name: str, started: float) -> float:
    now = time.perf_counter()
    seconds[name] = round(now - started, 3)
    return now


def _outside_period(off: int, pings: Sequence[Path], period: Period) -> CountingError:
    return CountingError(
        f"{off} ping(s) in {[str(p) for p in pings]} fall outside period "
        f"{period.label}; the pings must come from the ingest step for the same period"
    )


def _check_period(engine: Engine, table: str, pings: Sequence[Path], period: Period) -> None:
    off = int(
        engine.fetch(
            f"SELECT CAST(coalesce(sum(CASE WHEN b IS NULL THEN n ELSE 0 END), 0) AS BIGINT) AS off FROM {table}"
        ).iloc[0]["off"]
    )
    if off:
        raise _outside_period(off, pings, period)


def _resolve_unsure(engine: Engine, plans: Sequence[ZoningPlan], table: str) -> tuple[int, list[int]]:
    """Assign the distinct unsure coordinates of `table` exactly (table `fix`); (how many, their buckets)."""
    unsure = engine.fetch(f"SELECT DISTINCT ulon, ulat FROM {table} WHERE u")
    engine.register_frame("fix", _resolve_exactly(unsure, plans))
    buckets = sorted(engine.fetch(f"SELECT DISTINCT b FROM {table} WHERE u")["b"].dropna().astype(int))
    return len(unsure), buckets


def _report_scan(progress: Progress, seconds: dict) -> None:
    progress(
        ProgressEvent(
            "counting",
            f"scanned the pings into (unit, bucket, area) rows in {seconds['scan']:.1f} s",
            seconds=seconds["scan"],
        )
    )


def _report_exact(progress: Progress, unsure_n: int, seconds: dict) -> None:
    text = f"assigned {unsure_n:,} distinct unsure coordinate(s) exactly in {seconds['exact']:.1f} s"
    progress(ProgressEvent("counting", text, seconds=seconds["exact"]))


def _scan_generic(
    engine: Engine,
    plans: Sequence[ZoningPlan],
    slots: BucketSlots,
    pings: Sequence[Path],
    period: Period,
    seconds: dict,
    progress: Progress,
) -> tuple[int, list[int]]:
    t = time.perf_counter()
    engine.materialize("obs", _stage_a_sql(plans, slots, engine))
    t = _timed(seconds, "scan", t)
    _check_period(engine, "obs", pings, period)
    _report_scan(progress, seconds)
    unsure_n, unsure_buckets = _resolve_unsure(engine, plans, "obs")
    engine.view("located", _located_sql(len(plans)))
    _timed(seconds, "exact", t)
    _report_exact(progress, unsure_n, seconds)
    return unsure_n, unsure_buckets


def _scan_presence_by_area(
    engine: Engine,
    plans: Sequence[ZoningPlan],
    slots: BucketSlots,
    pings: Sequence[Path],
    period: Period,
    seconds: dict,
    progress: Progress,
) -> tuple[int, list[int]]:
    """Presence for one zoning whose area keys compare like its ids (`ZoningPlan.keys_sort_like_ids`), so a
    key is its own rank: no dictionary join anywhere. One scan counts the pings per (unit, bucket, area) into
    `obs`, the bucket and area packed into one BIGINT `bk` (one key column less to hash; see
    `_BY_AREA_ROWS`): bk >= 0 a ping the SQL placed surely (in area bk % M - 1, or in none when bk % M = 0,
    with M = key_bound + 1); bk <= -2 an unsure ping of bucket -bk - 2, whose coordinates are kept (they
    are NULL elsewhere: mostly NULL columns cost little in the group-by); bk = -1 a ping outside the
    period. The distinct unsure coordinates are then assigned exactly, and the dominant area of each
    (unit, bucket) is one max per group (`_presence_sql`) over obs's rows."""
    t = time.perf_counter()
    key_bound = plans[0].key_bound
    assert key_bound is not None, "presence by area needs small area keys (see _count_pings)"
    d, m = engine.dialect, key_bound + 1
    keyed = _keyed_sql(plans, slots, engine)
    engine.materialize(
        "obs",
        f"""{keyed},
        marked AS (SELECT unit,
                          CASE WHEN b IS NULL THEN -1 WHEN unsure THEN -b - 2
                               ELSE b * {m} + coalesce(k_0 + 1, 0) END AS bk,
                          CASE WHEN unsure OR k_0 IS NULL THEN lon END AS ulon,
                          CASE WHEN unsure OR k_0 IS NULL THEN lat END AS ulat FROM keyed)
        SELECT unit, bk, ulon, ulat, count(*) AS n FROM marked GROUP BY unit, bk, ulon, ulat""",
    )
    engine.view("obs_rows", _BY_AREA_ROWS.format(div=d.int_div("bk", str(m)), m=m))
    t = _timed(seconds, "scan", t)
    _check_period(engine, "obs_rows", pings, period)
    _report_scan(progress, seconds)
    unsure_n, unsure_buckets = _resolve_unsure(engine, plans, "obs_rows")
    engine.view(
        "located",
        """
        SELECT unit, b, a_0, n, ulon, ulat FROM obs_rows WHERE NOT u AND b IS NOT NULL
        UNION ALL
        SELECT o.unit, o.b, nullif(f.f_0, -1) AS a_0, o.n, CASE WHEN f.f_0 = -1 THEN o.ulon END AS ulon,
               CASE WHEN f.f_0 = -1 THEN o.ulat END AS ulat
        FROM obs_rows o JOIN fix f ON o.ulon = f.ulon AND o.ulat = f.ulat WHERE o.u""",
    )
    _timed(seconds, "exact", t)
    _report_exact(progress, unsure_n, seconds)
    return unsure_n, unsure_buckets


# obs's rows unpacked: (unit, b, u: unsure, a_0: area surely placed, NULL if none or unsure, n, ulon, ulat)
_BY_AREA_ROWS = """
    SELECT unit, CASE WHEN bk >= 0 THEN {div} WHEN bk <= -2 THEN -bk - 2 END AS b, bk <= -2 AS u,
           CASE WHEN bk >= 0 AND bk % {m} > 0 THEN bk % {m} - 1 END AS a_0, n, ulon, ulat FROM obs"""


def _presence_by_area_sql(unsure_buckets: Sequence[int], m: int, dialect) -> str:
    """member_0 (unit, b, rank) of `_scan_presence_by_area`: obs's rows as they are, except in the buckets
    holding unsure pings (a literal list: no join over all rows), where the exactly assigned pings are
    summed with the sure ones of their area first."""
    bucket = dialect.int_div("bk", str(m))
    sure = f"SELECT unit, {bucket} AS b, bk % {m} - 1 AS rank, n FROM obs WHERE bk >= 0 AND bk % {m} > 0"
    if not unsure_buckets:
        return _presence_sql(sure)
    listed = ", ".join(str(int(b)) for b in unsure_buckets)
    redone = (
        "SELECT unit, b, a_0 AS rank, CAST(sum(n) AS BIGINT) AS n FROM located "
        f"WHERE a_0 IS NOT NULL AND b IN ({listed}) GROUP BY unit, b, a_0"
    )
    return f"{_presence_sql(f'{sure} AND {bucket} NOT IN ({listed})')} UNION ALL {_presence_sql(redone)}"


def _scan_packed(run: _CountRun, packing: Packing, footers: Footers | None) -> tuple[PackedCounts, int, int, int]:
    """Presence by packed keys (`counting.packed`): (counts, unsure coordinates, pings located, pings in no
    area); `outside_coordinates` is left in the engine for the outside file. The scan runs in this process
    (`counting.arrayscan`) when the footers and the zoning allow, else in SQL."""
    engine, plans, slots, pings, period, seconds, progress = (
        run.engine,
        run.plans,
        run.slots,
        run.pings,
        run.period,
        run.seconds,
        run.progress,
    )
    assert isinstance(engine, DuckDBEngine), "the packed path runs on DuckDB only (packing_for)"
    t = time.perf_counter()
    arrays = ArrayScan.plan(
        plans[0],
        footers,
        area_filter(pings, usable_area(run.policy)),
        slots,
        packing.unit_min,
        packing.bucket_bits,
        packing.slot_bits,
    )
    try:
        scan = scan_packed(
            engine, _keyed_sql(plans, slots, engine), packing, lambda coords: _resolve_exactly(coords, plans), arrays
        )
    except PeriodMismatch as exc:
        raise _outside_period(exc.count, pings, period) from None
    t = _timed(seconds, "scan", t)  # here: the scan and the exact assignment of the unsure coordinates
    progress(
        ProgressEvent(
            "counting",
            f"scanned the pings into packed (unit, bucket, area) keys in "
            f"{seconds['scan']:.1f} s, {scan.unsure_coordinates:,} distinct unsure "
            "coordinate(s) assigned exactly",
            seconds=seconds["scan"],
        )
    )
    engine.register_frame("outside_coordinates", scan.outside_coordinates)
    located = scan.located
    given = presence_from_keys(scan.take_keys(), packing, int(engine.describe()["threads"]))
    _timed(seconds, "dominant", t)  # the dominant areas and leaf counts, from the sorted keys
    return given, scan.unsure_coordinates, located, scan.pings_outside


def count_pings(
    policy: Policy,
    period: Period,
    pings: Sequence[Path],
    plans: Sequence[ZoningPlan],
    out_dir: Path,
    engine: Engine,
    progress: Progress = silent,
    packed_keys: bool = True,
) -> CountResult:
    """Count distinct units per (area, bucket) of every zoning over the same validated pings; write the
    count tables into out_dir and return their paths and figures (CountResult).

    policy: the unit, the measure (presence or visitors) and the time buckets. period: the buckets covered.
    pings: the validated pings' Parquet files (unit, ts, lon, lat). plans: how each zoning assigns a ping
    to an area (`counting.plan`); the first is the main geometry, the others linked zonings, which count
    only the pings inside the main geometry. out_dir: the counts folder (also the spill folder). engine:
    the SQL engine (DuckDB or Spark, `counting.engines`). progress: told what the scan does and how long.
    Raises CountingError when a ping falls outside the period's buckets (ingest should have quarantined
    it) or a bucket edge falls inside a 15-minute slot. With a time ladder, the margins also hold every
    level at each coarser rung (`<level>@<rung>`, see `_count_rungs`). packed_keys: False keeps to the SQL
    paths where `counting.packed` would apply (for comparing them; the results are the same). NumPy's huge
    page advice is off while it runs (`spatial_release.memory`)."""
    with hugepage_advice_off():
        return _count_pings(policy, period, pings, plans, out_dir, engine, progress, packed_keys)


@dataclass(frozen=True)
class _CountRun:
    """One count: its inputs, the period's buckets and rungs, and the seconds each phase took (filled in as
    it runs)."""

    policy: Policy
    period: Period
    pings: Sequence[Path]
    plans: Sequence[ZoningPlan]
    engine: Engine
    progress: Progress
    slots: BucketSlots
    rungs: list[Rung]
    buckets: pd.Series  # bucket number -> bucket start (UTC)
    seconds: dict[str, float] = field(default_factory=dict)


def _start_count(
    policy: Policy, period: Period, pings: Sequence[Path], plans: Sequence[ZoningPlan], engine: Engine, progress: Progress
) -> _CountRun:
    """The run's buckets and rungs (a ladder that does not nest fails here, before any scan), with the pings
    and the zonings' lookup tables registered on the engine."""
    slots = bucket_slots(policy, period)
    rungs = ladder_rungs(policy, period, slots)
    buckets = pd.Series(pd.to_datetime(slots.buckets, utc=True)).astype("datetime64[us, UTC]")
    register_pings(engine, pings, usable_area(policy))
    for i, plan in enumerate(plans):
        if plan.lookup is not None:
            engine.register_frame(f"lookup_{i}", plan.lookup.table)
    progress(
        ProgressEvent(
            "counting",
            f"counting on {engine.name}: scanning {len(pings)} file(s), assigning "
            "pings to " + "; ".join(f"{p.level}: {p.method}" for p in plans),
        )
    )
    return _CountRun(policy, period, pings, plans, engine, progress, slots, rungs, buckets)


@dataclass(frozen=True)
class _Scanned:
    """What the scan of the pings leaves for the counts, whichever path it took."""

    by_area: bool  # presence over one zoning whose keys compare like its ids: the keys are the ranks
    given: PackedCounts | None  # the packed path's membership and leaf counts
    given_keys: DecodedKeys | None  # and the areas it counted
    unsure_coordinates: int
    unsure_buckets: list[int]
    pings_located: int
    pings_outside: int  # in no area of the main geometry, not yet counting the pings beyond the usable area
    outside_sql: str  # the coordinates of the pings in no area


def _scan_pings(run: _CountRun, packed_keys: bool) -> _Scanned:
    engine, plans, measure = run.engine, run.plans, run.policy.measure
    footers = read_footers(run.pings) if packed_keys and isinstance(engine, DuckDBEngine) else None
    packing = packing_for(engine, measure, plans, run.slots, footers) if packed_keys else None
    by_area = measure == "presence" and len(plans) == 1 and plans[0].key_bound is not None and plans[0].keys_sort_like_ids
    if packing is not None:
        assert by_area, "the packed path's membership stands in for the by-area SQL (see _count_zoning)"
        given, unsure_n, pings_located, pings_outside = _scan_packed(run, packing, footers)
        given_keys = _packed_decoded(plans[0], run.buckets, given)
        return _Scanned(
            by_area,
            given,
            given_keys,
            unsure_n,
            [],
            pings_located,
            pings_outside,
            "SELECT ulon, ulat FROM outside_coordinates",
        )
    scan = _scan_presence_by_area if by_area else _scan_generic
    unsure_n, unsure_buckets = scan(engine, plans, run.slots, run.pings, run.period, run.seconds, run.progress)
    placed = engine.fetch(
        "SELECT CAST(coalesce(sum(CASE WHEN a_0 IS NOT NULL THEN n ELSE 0 END), 0) AS BIGINT) AS inside, "
        "CAST(coalesce(sum(CASE WHEN a_0 IS NULL THEN n ELSE 0 END), 0) AS BIGINT) AS outside FROM located"
    ).iloc[0]
    return _Scanned(
        by_area,
        None,
        None,
        unsure_n,
        unsure_buckets,
        int(placed["inside"]),
        int(placed["outside"]),
        "SELECT DISTINCT ulon, ulat FROM located WHERE a_0 IS NULL",
    )


def _count_one_zoning(
    run: _CountRun, scanned: _Scanned, z: int, plan: ZoningPlan
) -> tuple[DecodedKeys, pa.Table, list[pa.Table]]:
    engine, measure = run.engine, run.policy.measure
    keys_sql = f"SELECT DISTINCT a_{z} AS area FROM located WHERE a_0 IS NOT NULL AND a_{z} IS NOT NULL"
    if scanned.by_area:
        assert plan.key_bound is not None  # by_area: the one zoning's keys are small
        member_sql = partial(_presence_by_area_sql, scanned.unsure_buckets, plan.key_bound + 1, engine.dialect)
        return _count_zoning(
            engine,
            plan,
            z,
            measure,
            run.buckets,
            keys_sql,
            member_sql,
            key_ranks=True,
            rungs=run.rungs,
            given=scanned.given,
            given_keys=scanned.given_keys,
        )
    member_sql = partial(_membership_sql, measure, z, len(run.plans) == 1, scanned.unsure_buckets)
    return _count_zoning(engine, plan, z, measure, run.buckets, keys_sql, member_sql, rungs=run.rungs)


def _count_zonings(run: _CountRun, scanned: _Scanned) -> tuple[DecodedKeys, pa.Table, list[pa.Table]]:
    """The main zoning's decoded keys and leaf counts, and the margin frames of every zoning."""
    margin_frames: list[pa.Table] = []
    for z, plan in enumerate(run.plans):
        decoded, leaf, margins = _count_one_zoning(run, scanned, z, plan)
        if z == 0:
            main, cells = decoded, leaf
        margin_frames += margins
        run.progress(ProgressEvent("counting", f"counted {plan.level}"))  # group counts stay in counts.json (internal)
    return main, cells, margin_frames


def _write_count_tables(
    cells: pa.Table, margin_frames: Sequence[pa.Table], out_dir: Path, writer: ThreadPoolExecutor
) -> tuple[Path, Path]:
    """The cell counts written on the writer's thread (sorted by the engine, or by the packed path), the
    margins on this one."""
    cells_path, margins_path = out_dir / "cell_counts.parquet", out_dir / "margin_counts.parquet"
    cells_written = writer.submit(write_parquet, cells.rename_columns(["cell_id", "bucket_start", "n"]), cells_path)
    write_parquet(_sorted_margins(pa.concat_tables(margin_frames)), margins_path)
    cells_written.result()
    return cells_path, margins_path


def _sorted_margins(margins: pa.Table) -> pa.Table:
    """The margins sorted by level, area id and bucket start, as `sort_by` sorts them, but comparing strings
    only among the few distinct levels and ids (their ranks, then one integer lexsort): half the time."""
    ranks = []
    for column in ("level", "area_id"):
        coded = pc.dictionary_encode(margins.column(column)).combine_chunks()
        values = np.asarray(coded.dictionary.to_pylist(), dtype=object)  # str: code point order, as UTF-8 bytes
        rank = np.empty(len(values), np.int64)
        rank[np.argsort(values, kind="stable")] = np.arange(len(values))
        ranks.append(rank[coded.indices.to_numpy(zero_copy_only=False)])
    starts = margins.column("bucket_start").cast(pa.int64()).to_numpy()
    return margins.take(pa.array(np.lexsort((starts, ranks[1], ranks[0]))))


def _units_counted(engine: Engine, measure: str, given: PackedCounts | None) -> tuple[int, int]:
    """(distinct units, distinct (unit, bucket) pairs) of the main zoning's membership."""
    if given is not None:
        return int(given.units), int(given.member.num_rows)
    pairs = (
        "count(*)"
        if measure == "presence"  # presence has one row per (unit, bucket)
        else "(SELECT count(*) FROM (SELECT DISTINCT unit, b FROM member_0) s)"
    )
    summary = engine.fetch(f"SELECT count(DISTINCT unit) AS units, {pairs} AS unit_buckets FROM member_0").iloc[0]
    return int(summary["units"]), int(summary["unit_buckets"])


def _linked_coverage(engine: Engine, plans: Sequence[ZoningPlan]) -> dict[str, bool]:
    """Per linked zoning: every located ping lies in one of its areas."""
    return {
        plan.level: int(
            engine.fetch(f"SELECT count(*) AS n FROM located WHERE a_0 IS NOT NULL AND a_{z} IS NULL").iloc[0]["n"]
        )
        == 0
        for z, plan in enumerate(plans)
        if z > 0
    }


def _count_pings(
    policy: Policy,
    period: Period,
    pings: Sequence[Path],
    plans: Sequence[ZoningPlan],
    out_dir: Path,
    engine: Engine,
    progress: Progress,
    packed_keys: bool,
) -> CountResult:
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    run = _start_count(policy, period, pings, plans, engine, progress)
    scanned = _scan_pings(run, packed_keys)
    t = time.perf_counter()
    # the packed path's membership is written by pyarrow on a thread of its own, beside the counts, and so are
    # the cell counts; the SQL paths' membership by the engine, after them
    with ThreadPoolExecutor(2) as writer:
        membership = (
            writer.submit(write_membership_arrays, scanned.given_keys, scanned.given.member, out_dir)
            if scanned.given is not None and scanned.given_keys is not None
            else None
        )
        pings_outside = scanned.pings_outside + int(
            engine.fetch("SELECT count(*) AS n FROM pings_beyond").iloc[0]["n"]
        )  # never counted
        main, cells, margin_frames = _count_zonings(run, scanned)
        t = _timed(run.seconds, "count", t)

        cells_path, margins_path = _write_count_tables(cells, margin_frames, out_dir, writer)
        outside_path = write_outside(engine, out_dir, pings_outside, scanned.outside_sql)
        units, unit_buckets = _units_counted(engine, policy.measure, scanned.given)
        covers = _linked_coverage(engine, plans)
        membership_path = membership.result() if membership is not None else write_membership(engine, main, out_dir)
    seconds = run.seconds
    _timed(seconds, "write", t)
    seconds["total"] = round(time.perf_counter() - started, 3)
    progress(
        ProgressEvent(
            "counting",
            f"counting done in {seconds['total']:.1f} s: {scanned.pings_located:,} pings "
            f"located, {pings_outside:,} outside the geometry",
            share=1.0,
            seconds=seconds["total"],
            done=True,
        )
    )
    return CountResult(
        cells_path,
        margins_path,
        membership_path,
        outside_path,
        len(cells),
        units,
        unit_buckets,
        scanned.pings_located,
        pings_outside,
        scanned.unsure_coordinates,
        covers,
        {p.level: p.method for p in plans},
        seconds,
    )


__all__ = [
    "SLOT_US",
    "BucketSlots",
    "CountResult",
    "CountingError",
    "bucket_slots",
    "count_pings",
    "data_extent",
    "period_buckets",
    "register_pings",
    "usable_area",
]
