"""Contribution bounding: each unit keeps at most B buckets of the period and at most C areas per bucket,
chosen by a seeded hash of its own rows, so that which rows a unit keeps depends on that unit alone (the
bounding is a stable transformation: adding or removing a unit changes only that unit's kept rows).

The bounding is one SQL query (`bounding_sql`) that DuckDB and Spark run alike: the seeded hash is the md5 of
the seed, the unit, the bucket's epoch microseconds and the cell id as text, ranked per unit (buckets) and
per unit and bucket (cells). The same seed keeps the same rows on either engine."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import duckdb
import pandas as pd

from spatial_release.counting.engines import Dialect, DuckDBDialect, Engine
from spatial_release.levels import LEAF, TOTAL, at_rung

MEMBERSHIP_COLUMNS = ("unit", "bucket_start", "cell_id")


def bounding_sql(source: str, max_buckets: int, max_areas: int, seed: int, dialect: Dialect) -> str:
    """The rows (unit, bucket_us, cell_id) of `source` (a table or view with MEMBERSHIP_COLUMNS) that survive
    bounding: per unit the `max_buckets` buckets of smallest seeded hash, and per kept (unit, bucket) the
    `max_areas` cells of smallest seeded hash. A row's hash depends on its own values and the seed only, never
    on the row order or other units. `bucket_us`: the bucket start in microseconds since the epoch (UTC)."""
    salt = f"{int(seed)}:"
    return f"""
WITH m AS (
    SELECT DISTINCT unit, CAST(unit AS STRING) AS unit_s,
           CAST({dialect.epoch_us("bucket_start")} AS BIGINT) AS bucket_us, CAST(cell_id AS STRING) AS cell_id
    FROM {source}
),
p AS (
    SELECT unit_s, bucket_us,
           row_number() OVER (
               PARTITION BY unit_s
               ORDER BY md5(concat('{salt}buckets:', unit_s, ':', CAST(bucket_us AS STRING))), bucket_us
           ) AS r
    FROM (SELECT DISTINCT unit_s, bucket_us FROM m) AS q
),
k AS (
    SELECT m.unit, m.bucket_us, m.cell_id,
           row_number() OVER (
               PARTITION BY m.unit_s, m.bucket_us
               ORDER BY md5(concat('{salt}areas:', m.unit_s, ':', CAST(m.bucket_us AS STRING), ':', m.cell_id)),
                        m.cell_id
           ) AS r
    FROM m JOIN p ON m.unit_s = p.unit_s AND m.bucket_us = p.bucket_us
    WHERE p.r <= {int(max_buckets)}
)
SELECT unit, bucket_us, cell_id FROM k WHERE r <= {int(max_areas)}
"""


def bound_contributions_on(engine: Engine, source: str, max_buckets: int, max_areas: int, seed: int) -> pd.DataFrame:
    """`bounding_sql` run on `engine` (DuckDB or Spark) over its table `source`: the kept rows (unit,
    bucket_start in UTC, cell_id), sorted."""
    sql = bounding_sql(source, max_buckets, max_areas, seed, engine.dialect)
    return _from_sql(engine.fetch(f"SELECT * FROM ({sql}) AS bounded ORDER BY unit, bucket_us, cell_id"))


def bound_contributions(membership: pd.DataFrame, max_buckets: int, max_areas: int, seed: int) -> pd.DataFrame:
    """`bounding_sql` on an in-memory DuckDB over `membership` (unit, bucket_start, cell_id): the kept rows,
    each a row of the input, with the input's column types."""
    missing = [c for c in MEMBERSHIP_COLUMNS if c not in membership.columns]
    if missing:
        raise ValueError(f"membership: columns {missing} missing (expected {list(MEMBERSHIP_COLUMNS)})")
    rows = membership[list(MEMBERSHIP_COLUMNS)]
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.register("membership_rows", rows)
        sql = bounding_sql("membership_rows", max_buckets, max_areas, seed, DuckDBDialect())
        kept = _from_sql(con.execute(f"SELECT * FROM ({sql}) AS bounded ORDER BY unit, bucket_us, cell_id").df())
    finally:
        con.close()
    return typed_like(kept, rows)


def typed_like(kept: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """Kept rows (unit, bucket_start in UTC, cell_id, as an engine hands them back) with the column types of
    the membership `rows` they were kept from, so the counts downstream do not depend on the engine."""
    buckets = kept["bucket_start"]
    if getattr(rows["bucket_start"].dtype, "tz", None) is None and pd.api.types.is_datetime64_any_dtype(
        rows["bucket_start"]
    ):
        buckets = buckets.dt.tz_localize(None)
    return kept.assign(
        unit=kept["unit"].astype(rows["unit"].dtype),
        bucket_start=buckets.astype(rows["bucket_start"].dtype),
        cell_id=kept["cell_id"].astype(rows["cell_id"].dtype),
    )


def _from_sql(kept: pd.DataFrame) -> pd.DataFrame:
    bucket = pd.to_datetime(kept["bucket_us"].astype("int64"), unit="us", utc=True)
    return pd.DataFrame({"unit": kept["unit"], "bucket_start": bucket, "cell_id": kept["cell_id"]}).reset_index(drop=True)


def bounded_counts(
    bounded: pd.DataFrame, parents: Sequence[tuple[str, Callable[[str], str]]], total: bool = True
) -> pd.DataFrame:
    """Distinct units per (level, area_id, bucket_start) of the bounded membership: the cells (level `cell`),
    each parent level in `parents` (level name, map from the level below's area id to its parent's), and the
    bucket total. A unit counts once per area and bucket, whatever the measure (presence or visitors)."""
    frames = [_distinct(bounded, LEAF)]
    area = bounded["cell_id"].astype(str)
    for level, parent_of in parents:
        ids = pd.unique(area)
        area = area.map(dict(zip(ids, (parent_of(a) for a in ids))))
        frames.append(_distinct(bounded.assign(cell_id=area.to_numpy()), level))
    if total:
        frames.append(_distinct(bounded.assign(cell_id=TOTAL), TOTAL))
    return pd.concat(frames, ignore_index=True)


def rung_membership(bounded: pd.DataFrame, coarse_of: Mapping[pd.Timestamp, pd.Timestamp]) -> pd.DataFrame:
    """A unit's areas over the policy's buckets inside each bucket of a coarser time rung (`coarse_of`: the
    rung's bucket of each of the policy's buckets), from its bounded rows: at most B coarse buckets and B x C
    (coarse bucket, area) pairs per unit, so a rung's figures have the sensitivity of the policy's bucket."""
    coarse = bounded["bucket_start"].map(coarse_of)
    if coarse.isna().any():
        raise ValueError(f"{int(coarse.isna().sum())} bounded rows have a bucket outside the time ladder's map")
    return bounded.assign(bucket_start=coarse.to_numpy()).drop_duplicates(ignore_index=True)


def ladder_counts(
    bounded: pd.DataFrame,
    parents: Sequence[tuple[str, Callable[[str], str]]],
    rungs: Mapping[str, Mapping[pd.Timestamp, pd.Timestamp]],
) -> pd.DataFrame:
    """`bounded_counts` at the policy's bucket and at each coarser rung of the time ladder (levels `<level>@<rung>`),
    every rung counted from the same bounded membership."""
    frames = [bounded_counts(bounded, parents)]
    for rung, coarse_of in rungs.items():
        counts = bounded_counts(rung_membership(bounded, coarse_of), parents)
        frames.append(counts.assign(level=[at_rung(level, rung) for level in counts["level"]]))
    return pd.concat(frames, ignore_index=True)


def _distinct(rows: pd.DataFrame, level: str) -> pd.DataFrame:
    counts = rows.groupby(["cell_id", "bucket_start"], sort=True)["unit"].nunique().reset_index(name="n")
    return counts.rename(columns={"cell_id": "area_id"}).assign(level=level)[["level", "area_id", "bucket_start", "n"]]
