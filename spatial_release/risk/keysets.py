"""The window's released key sets, coded in DuckDB and streamed into the estimator's compact arrays.

DuckDB reads the (unit, key, cell_id) rows (Parquet files or a view), numbers the distinct units and keys in
their sort order (as pandas.factorize(sort=True) would, so the estimator's figures are the same as from a
DataFrame), and streams the coded pairs in record batches into int32 arrays, which compiled loops sort and
make distinct in both directions (by unit, by key).
Python never holds a row per ping or per membership row, nor any key string but one per distinct key: memory
is the unit and key tables plus, while they are built, about 12 bytes per (unit, key) row read (the streamed
pair and its place in the unit-major order; the streamed pairs are dropped before the key-major copy is
made), and 8 bytes per distinct pair after; DuckDB spills within its memory limit.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator

import duckdb
import numpy as np
import pandas as pd

from spatial_release.risk import kernels
from spatial_release.risk.estimator import KeySets
from spatial_release.risk.ranges import KeyRanges, range_bounds, spill_ranges

BATCH_ROWS = 1_000_000
MEMORY_LIMIT = "1GB"


def connect(spill: str) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection for the key sets: UTC (keys name UTC instants), bounded memory, spills to `spill`."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
    con.execute(f"SET temp_directory = '{spill}'")
    con.execute("SET preserve_insertion_order = false")
    return con


def _scalar(con: duckdb.DuckDBPyConnection, query: str):
    return con.execute(query).fetchall()[0][0]


def _batches(con: duckdb.DuckDBPyConnection, query: str, total: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Stream `query` (two integer columns) as int32 array pairs, `total` rows in all (else RuntimeError)."""
    at = 0
    for batch in con.sql(query).to_arrow_reader(BATCH_ROWS):
        n = batch.num_rows
        if at + n > total:
            raise RuntimeError(f"the key sets changed while read: more than the {total:,} pairs counted")
        yield (
            batch.column(0).to_numpy().astype(np.int32, copy=False),
            batch.column(1).to_numpy().astype(np.int32, copy=False),
        )
        at += n
    if at != total:
        raise RuntimeError(f"the key sets changed while read: {at:,} pairs streamed, {total:,} counted")


def _pairs(con: duckdb.DuckDBPyConnection, query: str, total: int) -> tuple[np.ndarray, np.ndarray]:
    """Stream `query` (two integer columns) into two int32 arrays of `total` rows."""
    first, second = np.empty(total, dtype=np.int32), np.empty(total, dtype=np.int32)
    at = 0
    for units, keys in _batches(con, query, total):
        first[at : at + len(units)] = units
        second[at : at + len(keys)] = keys
        at += len(units)
    return first, second


def load_key_sets(
    con: duckdb.DuckDBPyConnection,
    source: str,
    zone_of_cells: Callable[[pd.Series], pd.Series],
    ranges_above: int | None = None,
) -> KeySets | KeyRanges:
    """KeySets of the rows of `source` (a relation with columns unit, key, cell_id; set semantics: a
    repeated (unit, key) counts once). zone_of_cells: the risk zone of each cell id (index: cell id).
    Raises ValueError when a key has no risk zone. With more than `ranges_above` rows, the coded rows go to
    disk in ranges of units instead (`risk.ranges`: the estimate reads one range at a time)."""
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE risk_units AS SELECT unit, (row_number() OVER (ORDER BY unit) - 1)"
        f"::INTEGER AS u FROM (SELECT DISTINCT unit FROM {source})"
    )
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE risk_keys AS SELECT key, cell_id, (row_number() OVER (ORDER BY key)"
        f" - 1)::INTEGER AS k FROM (SELECT key, min(cell_id) AS cell_id FROM {source} GROUP BY key)"
    )
    n_units = _scalar(con, "SELECT count(*) FROM risk_units")
    cells = con.sql("SELECT cell_id FROM risk_keys ORDER BY k").to_arrow_table().column(0).to_pandas()
    zones = zone_of_cells(cells.drop_duplicates())
    key_zone = cells.map(zones).to_numpy(dtype=object)
    if pd.isna(key_zone).any():
        missing = con.execute(
            "SELECT key FROM risk_keys WHERE k IN (SELECT unnest($1)) ORDER BY k LIMIT 3",
            [np.flatnonzero(pd.isna(key_zone))[:3].tolist()],
        ).fetchall()
        raise ValueError(f"keys without a risk zone: {[m[0] for m in missing]}")
    # The coded pairs are streamed as they come out of the join, repeats and all, and sorted and made distinct
    # in compiled loops (kernels.unit_major, key_major): a DISTINCT and two ORDER BYs in DuckDB took about 40 s of the
    # 50 M-ping risk step, spilling within the 1 GB limit; the join alone streams in about 5 s.
    total = _scalar(con, f"SELECT count(*) FROM {source} WHERE unit IS NOT NULL AND key IS NOT NULL")
    coded = f"SELECT u.u, k.k FROM {source} s JOIN risk_units u ON u.unit = s.unit JOIN risk_keys k ON k.key = s.key"
    if ranges_above is not None and total > ranges_above:
        return spill_ranges(_batches(con, coded, total), key_zone, range_bounds(n_units, total))
    units, keys = _pairs(con, coded, total)
    unit_offsets, unit_keys = kernels.unit_major(units, keys, n_units, len(key_zone))
    del units, keys  # the streamed pairs (8 bytes a row) go before anything else is made
    unit_keys = unit_keys.copy()  # unit_major's view holds every row read, repeats too: keep the distinct pairs
    key_offsets, key_units = kernels.key_major(unit_offsets, unit_keys, len(key_zone), np.int32)
    return KeySets(key_zone, unit_offsets, unit_keys, key_offsets, key_units)


def window_key_sets(
    selects: list[str],
    zone_of_cells: Callable[[pd.Series], pd.Series],
    frames: dict[str, pd.DataFrame] | None = None,
    ranges_above: int | None = None,
) -> KeySets | KeyRanges:
    """KeySets of the union of `selects` (queries with columns unit, key, cell_id, e.g. over Parquet files),
    which may name the DataFrames of `frames` as tables, read in DuckDB with its spill folder in a
    temporary directory; KeyRanges above `ranges_above` rows (see `load_key_sets`)."""
    with tempfile.TemporaryDirectory(prefix="risk-keys-") as spill:
        con = connect(spill)
        try:
            for name, frame in (frames or {}).items():
                con.register(name, frame)
            con.execute(
                "CREATE TEMP VIEW window_keys AS "
                + " UNION ALL ".join(f"SELECT unit, key, cell_id FROM ({select})" for select in selects)
            )
            return load_key_sets(con, "window_keys", zone_of_cells, ranges_above)
        finally:
            con.close()
