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
class CountResult:
    cell_counts_path: Path  # cell_id, bucket_start, n : every non-empty (cell, bucket), before suppression
    margin_counts_path: Path  # level, area_id, bucket_start, n
    hierarchy_path: Path  # cell_id plus one column per parent level
    groups: int
    units: int  # distinct units over the period
    unit_buckets: int  # distinct (unit, bucket) pairs


def _lit(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _connect() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    return con


def _membership_sql(policy: Policy, located: Path) -> str:
    bucket = f"time_bucket({policy.time.bucket_interval_sql()}, ts, {_lit(policy.time.timezone)})"
    observed = (
        f"SELECT unit, cell_id, {bucket} AS bucket_start, count(*) AS n_pings "
        f"FROM read_parquet({_lit(str(located))}) GROUP BY ALL"
    )
    if policy.measure == "visitors":
        return f"SELECT unit, bucket_start, cell_id FROM ({observed})"
    return (
        "SELECT unit, bucket_start, first(cell_id ORDER BY n_pings DESC, cell_id ASC) AS cell_id "
        f"FROM ({observed}) GROUP BY unit, bucket_start"
    )


def _copy(con: duckdb.DuckDBPyConnection, query: str, target: Path) -> None:
    with atomic_path(target) as tmp:
        con.execute(f"COPY ({query}) TO {_lit(str(tmp))} (FORMAT parquet)")


def count_units(policy: Policy, located: Path, hierarchy: pd.DataFrame, out_dir: Path) -> CountResult:
    con = _connect()
    con.execute(f"CREATE TEMP TABLE membership AS {_membership_sql(policy, located)}")
    con.register("hierarchy_frame", hierarchy)
    con.execute("CREATE TEMP TABLE hierarchy AS SELECT * FROM hierarchy_frame")
    cells_path, margins_path = out_dir / "cell_counts.parquet", out_dir / "margin_counts.parquet"
    hierarchy_path = out_dir / "hierarchy.parquet"
    _copy(con, "SELECT cell_id, bucket_start, count(DISTINCT unit) AS n FROM membership "
               "GROUP BY ALL ORDER BY cell_id, bucket_start", cells_path)
    margin_queries = [
        f"SELECT {_lit(level)} AS level, h.{level} AS area_id, m.bucket_start, count(DISTINCT m.unit) AS n "
        f"FROM membership m JOIN hierarchy h USING (cell_id) GROUP BY ALL"
        for level in policy.geometry.level_names()
    ]
    margin_queries.append(
        "SELECT 'total' AS level, 'total' AS area_id, bucket_start, count(DISTINCT unit) AS n "
        "FROM membership GROUP BY ALL"
    )
    _copy(con, " UNION ALL ".join(margin_queries) + " ORDER BY level, area_id, bucket_start", margins_path)
    _copy(con, "SELECT * FROM hierarchy ORDER BY cell_id", hierarchy_path)
    groups, units, unit_buckets = con.execute(
        "SELECT (SELECT count(*) FROM (SELECT DISTINCT cell_id, bucket_start FROM membership)), "
        "count(DISTINCT unit), count(DISTINCT (unit, bucket_start)) FROM membership"
    ).fetchone()
    con.close()
    return CountResult(cells_path, margins_path, hierarchy_path, groups, units, unit_buckets)


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
