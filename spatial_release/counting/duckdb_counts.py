"""Count distinct units per (cell, time bucket) and per margin (parent level x bucket, bucket total).

`presence`: each unit counts once per bucket, in its dominant cell (most pings; ties to the smallest cell id),
so counts add up: a parent is the sum of its children and the total is the number of distinct units.
`visitors`: a unit counts in every cell it visited; a parent counts each unit once, so
max(children) <= parent <= sum(children).
Margins are counted as distinct units from the memberships for both measures, never by summing children,
so the same code is right for both.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb
import pandas as pd

from spatial_release.fileio import atomic_path
from spatial_release.period import Period
from spatial_release.policy import Policy


@dataclass(frozen=True)
class Zoning:
    """One zoning counted over the located pings: the main geometry (leaf level `cell`) or a linked one."""

    leaf_level: str  # "cell" for the main geometry, else the linked zoning's name
    column: str  # column of located.parquet holding the area id
    hierarchy: pd.DataFrame  # cell_id plus one column per parent level (named after the level)
    parent_levels: tuple[str, ...]
    total_level: str  # "total" for the main geometry, "<name>_total" for a linked zoning


@dataclass(frozen=True)
class CountResult:
    cell_counts_path: Path  # cell_id, bucket_start, n : every non-empty (cell, bucket), before suppression
    margin_counts_path: Path  # level, area_id, bucket_start, n
    groups: int
    units: int  # distinct units over the period
    unit_buckets: int  # distinct (unit, bucket) pairs
    linked_covers_main: dict[str, bool]  # per linked zoning: every located ping lies in one of its areas


def _lit(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _connect() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    return con


def _membership_sql(policy: Policy, located: Path, column: str) -> str:
    """(unit, bucket_start, area) rows: one per unit and bucket for presence, one per visited area for visitors."""
    bucket = f"time_bucket({policy.time.bucket_interval_sql()}, ts, {_lit(policy.time.timezone)})"
    observed = (
        f"SELECT unit, {column} AS area, {bucket} AS bucket_start, count(*) AS n_pings "
        f"FROM read_parquet({_lit(str(located))}) WHERE {column} IS NOT NULL GROUP BY ALL"
    )
    if policy.measure == "visitors":
        return f"SELECT unit, bucket_start, area FROM ({observed})"
    return (
        "SELECT unit, bucket_start, first(area ORDER BY n_pings DESC, area ASC) AS area "
        f"FROM ({observed}) GROUP BY unit, bucket_start"
    )


def _copy(con: duckdb.DuckDBPyConnection, query: str, target: Path) -> None:
    with atomic_path(target) as tmp:
        con.execute(f"COPY ({query}) TO {_lit(str(tmp))} (FORMAT parquet)")


def _margin_queries(zoning: Zoning, membership: str, hierarchy: str) -> list[str]:
    queries = []
    if zoning.leaf_level != "cell":
        queries.append(f"SELECT {_lit(zoning.leaf_level)} AS level, area AS area_id, bucket_start, "
                       f"count(DISTINCT unit) AS n FROM {membership} GROUP BY ALL")
    for level in zoning.parent_levels:
        queries.append(
            f"SELECT {_lit(level)} AS level, h.\"{level}\" AS area_id, m.bucket_start, count(DISTINCT m.unit) AS n "
            f"FROM {membership} m JOIN {hierarchy} h ON h.cell_id = m.area GROUP BY ALL")
    queries.append(f"SELECT {_lit(zoning.total_level)} AS level, {_lit(zoning.total_level)} AS area_id, "
                   f"bucket_start, count(DISTINCT unit) AS n FROM {membership} GROUP BY ALL")
    return queries


def count_units(policy: Policy, located: Path, zonings: list[Zoning], out_dir: Path) -> CountResult:
    """Counts every zoning over the same located pings. The first zoning is the main geometry."""
    con = _connect()
    margin_queries: list[str] = []
    for z, zoning in enumerate(zonings):
        membership, hierarchy = f"membership_{z}", f"hierarchy_{z}"
        con.execute(f"CREATE TEMP TABLE {membership} AS {_membership_sql(policy, located, zoning.column)}")
        con.register(f"{hierarchy}_frame", zoning.hierarchy)
        con.execute(f"CREATE TEMP TABLE {hierarchy} AS SELECT * FROM {hierarchy}_frame")
        margin_queries += _margin_queries(zoning, membership, hierarchy)
    cells_path, margins_path = out_dir / "cell_counts.parquet", out_dir / "margin_counts.parquet"
    # who was counted where: internal, kept for the risk estimate and reviews, never published
    _copy(con, "SELECT unit, bucket_start, area AS cell_id FROM membership_0 ORDER BY unit, bucket_start, cell_id",
          out_dir / "membership.internal.parquet")
    _copy(con, "SELECT area AS cell_id, bucket_start, count(DISTINCT unit) AS n FROM membership_0 "
               "GROUP BY ALL ORDER BY cell_id, bucket_start", cells_path)
    _copy(con, " UNION ALL ".join(margin_queries) + " ORDER BY level, area_id, bucket_start", margins_path)
    groups, units, unit_buckets = con.execute(
        "SELECT (SELECT count(*) FROM (SELECT DISTINCT area, bucket_start FROM membership_0)), "
        "count(DISTINCT unit), count(DISTINCT (unit, bucket_start)) FROM membership_0"
    ).fetchone()
    covers = {
        zoning.leaf_level: con.execute(
            f"SELECT count(*) = 0 FROM read_parquet({_lit(str(located))}) WHERE {zoning.column} IS NULL"
        ).fetchone()[0]
        for zoning in zonings[1:]
    }
    con.close()
    return CountResult(cells_path, margins_path, groups, units, unit_buckets, covers)


def period_buckets(policy: Policy, period: Period) -> list[datetime]:
    """Every bucket start (UTC) that overlaps the period, in the policy's time zone."""
    start, end = period.utc_window(policy.time.timezone)
    con = _connect()
    rows = con.execute(
        f"SELECT DISTINCT time_bucket({policy.time.bucket_interval_sql()}, t, {_lit(policy.time.timezone)}) AS b "
        f"FROM generate_series(TIMESTAMPTZ {_lit(start.isoformat())}, TIMESTAMPTZ {_lit(end.isoformat())} "
        "- INTERVAL 1 microsecond, INTERVAL 1 hour) AS g(t) ORDER BY b"
    ).fetchall()
    con.close()
    return [row[0] for row in rows]
