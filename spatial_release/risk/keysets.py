"""The window's released key sets, coded in DuckDB and streamed into the estimator's compact arrays.

DuckDB reads the parts of the window (`KeySource`: (unit, key, cell_id) rows of Parquet files or a view, or
this release's memberships joined to its published keys), numbers the units and keys in their sort order (as
pandas.factorize(sort=True) would, so the estimator's figures are the same as from a DataFrame), and streams
the coded pairs in record batches, which compiled loops sort and make distinct in both directions (by unit, by
key); units and keys a part names but no pair holds are then dropped and the codes renumbered.
Python never holds a row per ping or per membership row, nor any key string but one per distinct key: memory
is the unit and key tables plus, while they are built, about 12 bytes per (unit, key) row read (the streamed
pair and its place in the unit-major order; the streamed pairs are dropped before the key-major copy is
made), and 8 bytes per distinct pair after; DuckDB spills within its memory limit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from spatial_release.fileio import scratch_folder
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


def _int32_pair(batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
    return batch.column(0).to_numpy().astype(np.int32, copy=False), batch.column(1).to_numpy().astype(np.int32, copy=False)


def _batches(con: duckdb.DuckDBPyConnection, query: str, total: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Stream `query` (two integer columns) as int32 array pairs, `total` rows in all (else RuntimeError)."""
    at = 0
    for batch in con.sql(query).to_arrow_reader(BATCH_ROWS):
        n = batch.num_rows
        if at + n > total:
            raise RuntimeError(f"the key sets changed while read: more than the {total:,} pairs counted")
        yield _int32_pair(batch)
        at += n
    if at != total:
        raise RuntimeError(f"the key sets changed while read: {at:,} pairs streamed, {total:,} counted")


@dataclass(frozen=True)
class KeySource:
    """One part of the window's key sets as DuckDB queries. `units` (column unit) names every unit the part
    may hold and `keys` (columns key, cell_id) every key, with a cell of its risk zone; either may name more
    (`exact=False`: a membership's units, some counted only in withheld cells; every published key). `pairs`
    (columns u, k) is the part's rows coded through the tables risk_units(unit, u) and risk_keys(key, k) that
    `load_key_sets` numbers over every part. Rows may repeat: a repeated (unit, key) counts once."""

    units: str
    keys: str
    pairs: str
    exact: bool = True

    @classmethod
    def of_rows(cls, relation: str) -> KeySource:
        """The part of a relation with columns unit, key, cell_id (a key set file, a DataFrame); a row with no
        unit or no key holds nothing."""
        rows = f"(SELECT unit, key, cell_id FROM {relation} WHERE unit IS NOT NULL AND key IS NOT NULL)"
        return cls(
            units=f"SELECT unit FROM {rows}",
            keys=f"SELECT key, cell_id FROM {rows}",
            pairs=f"SELECT u.u, k.k FROM {rows} s JOIN risk_units u ON u.unit = s.unit JOIN risk_keys k ON k.key = s.key",
        )


def _number(con: duckdb.DuckDBPyConnection, sources: list[KeySource]) -> None:
    """risk_units and risk_keys: every unit and key the parts name, numbered in their sort order (as
    pandas.factorize(sort=True) would); a key's cell is the least of those named with it."""
    units = " UNION ALL ".join(f"SELECT unit FROM ({s.units})" for s in sources)
    keys = " UNION ALL ".join(f"SELECT key, cell_id FROM ({s.keys})" for s in sources)
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE risk_units AS SELECT unit, (row_number() OVER (ORDER BY unit) - 1)"
        f"::INTEGER AS u FROM (SELECT DISTINCT unit FROM ({units}) WHERE unit IS NOT NULL)"
    )
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE risk_keys AS SELECT key, cell_id, (row_number() OVER (ORDER BY key)"
        f" - 1)::INTEGER AS k FROM (SELECT key, min(cell_id) AS cell_id FROM ({keys}) WHERE key IS NOT NULL GROUP BY key)"
    )


def _key_zones(
    con: duckdb.DuckDBPyConnection, zone_of_cells: Callable[[pd.Series], pd.Series], used: np.ndarray | None
) -> np.ndarray:
    """The risk zone of each numbered key (of the `used` ones only, when given). Raises ValueError naming keys
    without one."""
    cells = con.sql("SELECT cell_id FROM risk_keys ORDER BY k").to_arrow_table().column(0).to_pandas()
    codes = np.arange(len(cells)) if used is None else np.flatnonzero(used)
    cells = cells.iloc[codes].reset_index(drop=True)
    key_zone = cells.map(zone_of_cells(cells.drop_duplicates())).to_numpy(dtype=object)
    if pd.isna(key_zone).any():
        missing = con.execute(
            "SELECT key FROM risk_keys WHERE k IN (SELECT unnest($1)) ORDER BY k LIMIT 3",
            [codes[np.flatnonzero(pd.isna(key_zone))[:3]].tolist()],
        ).fetchall()
        raise ValueError(f"keys without a risk zone: {[m[0] for m in missing]}")
    return key_zone


def _compacted(codes: np.ndarray, used: np.ndarray) -> np.ndarray:
    """Codes renumbered over the `used` ones only, in the same order: the numbering the used ones alone get."""
    if used.all():
        return codes
    return (np.cumsum(used, dtype=np.int32) - 1)[codes]


def _used_in_sql(con: duckdb.DuckDBPyConnection, pairs: str, n_units: int, n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """The units and keys the coded pairs hold, from one pass in DuckDB (for ranges, which are spilled as the
    pairs stream and so must be numbered before)."""
    used_units, used_keys = np.zeros(n_units, dtype=bool), np.zeros(n_keys, dtype=bool)
    rows = con.sql(f"SELECT u, k FROM ({pairs}) GROUP BY GROUPING SETS ((u), (k))").to_arrow_table()
    for used, column in ((used_units, "u"), (used_keys, "k")):
        codes = rows.column(column).fill_null(-1).to_numpy()
        used[codes[codes >= 0]] = True
    return used_units, used_keys


def _streamed(con: duckdb.DuckDBPyConnection, query: str, limit: int | None) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """The int32 array pairs of `query` (two integer columns) in batches, or None as soon as they hold more
    than `limit` rows (what was read is dropped)."""
    batches, rows = [], 0
    for batch in con.sql(query).to_arrow_reader(BATCH_ROWS):
        rows += batch.num_rows
        if limit is not None and rows > limit:
            return None
        batches.append(_int32_pair(batch))
    return batches


def _in_ranges(
    con: duckdb.DuckDBPyConnection,
    sources: list[KeySource],
    coded: str,
    zone_of_cells: Callable[[pd.Series], pd.Series],
    n_units: int,
    n_keys: int,
    scratch: Path | None,
) -> KeyRanges:
    """The coded pairs spilled in ranges of units (`risk.ranges`), numbered over the units and keys they
    hold before they stream (a range is written as its pairs come)."""
    total = _scalar(con, f"SELECT count(*) FROM ({coded})")
    held_units, held_keys = (
        (np.ones(n_units, dtype=bool), np.ones(n_keys, dtype=bool))
        if all(s.exact for s in sources)
        else _used_in_sql(con, coded, n_units, n_keys)
    )
    key_zone = _key_zones(con, zone_of_cells, held_keys)
    batches = ((_compacted(units, held_units), _compacted(keys, held_keys)) for units, keys in _batches(con, coded, total))
    return spill_ranges(batches, key_zone, range_bounds(int(held_units.sum()), total), scratch)


def load_key_sets(
    con: duckdb.DuckDBPyConnection,
    sources: list[KeySource],
    zone_of_cells: Callable[[pd.Series], pd.Series],
    ranges_above: int | None = None,
    scratch: Path | None = None,
    rows_hint: int | None = None,
) -> KeySets | KeyRanges:
    """KeySets of the parts `sources` (set semantics: a repeated (unit, key) counts once), numbered over the
    units and keys they hold. zone_of_cells: the risk zone of each cell id (index: cell id). Raises ValueError
    when a key has no risk zone. With more than `ranges_above` rows, the coded rows go to disk in ranges of
    units instead (`risk.ranges`: the estimate reads one range at a time); `rows_hint` (how many rows the parts
    hold, e.g. from their files' metadata) takes that road at once instead of after streaming `ranges_above`
    rows. Either road gives the same figures, so a wrong hint costs time, never a figure."""
    if not sources:
        raise ValueError("no key sets to read: the window names no part")
    _number(con, sources)
    n_units = _scalar(con, "SELECT count(*) FROM risk_units")
    n_keys = _scalar(con, "SELECT count(*) FROM risk_keys")
    # The coded pairs are streamed as they come out of the joins, repeats and all, and sorted and made distinct
    # in compiled loops (kernels.unit_major_batches, key_major): a DISTINCT and two ORDER BYs in DuckDB took
    # about 40 s of the 50 M-ping risk step, spilling within the 1 GB limit; the join alone streams in about
    # 5 s. Not counted first: counting is a second pass over the joins (3.3 s at 50 M pings).
    coded = " UNION ALL ".join(f"SELECT u, k FROM ({s.pairs})" for s in sources)
    over = ranges_above is not None and rows_hint is not None and rows_hint > ranges_above
    batches = None if over else _streamed(con, coded, ranges_above)
    if batches is None:
        return _in_ranges(con, sources, coded, zone_of_cells, n_units, n_keys, scratch)
    unit_offsets, unit_keys = kernels.unit_major_batches(batches, n_units, n_keys)
    # drop the units and keys the parts named but no pair holds (a unit counted only in withheld cells)
    unit_offsets = np.concatenate(([0], unit_offsets[1:][np.diff(unit_offsets) > 0]))
    held_keys = kernels.codes_held(unit_keys, n_keys)
    key_zone = _key_zones(con, zone_of_cells, held_keys)
    # unit_major's view holds every row read, repeats too: keep the distinct pairs only
    unit_keys = unit_keys.copy() if held_keys.all() else _compacted(unit_keys, held_keys)
    key_offsets, key_units = kernels.key_major(unit_offsets, unit_keys, len(key_zone), np.int32)
    return KeySets(key_zone, unit_offsets, unit_keys, key_offsets, key_units)


def window_key_sets(
    selects: list[str],
    zone_of_cells: Callable[[pd.Series], pd.Series],
    frames: dict[str, pd.DataFrame] | None = None,
    ranges_above: int | None = None,
    coded: list[KeySource] | None = None,
    scratch: Path | None = None,
    rows_hint: int | None = None,
) -> KeySets | KeyRanges:
    """KeySets of the union of `selects` (queries with columns unit, key, cell_id, e.g. over Parquet files),
    which may name the DataFrames of `frames` as tables, and of the parts `coded`, read in DuckDB with its
    spill folder and the ranges' files in a scratch folder in `scratch` (`fileio.scratch_folder`); KeyRanges
    above `ranges_above` rows (see `load_key_sets`)."""
    with scratch_folder(scratch, "risk-keys") as spill:
        con = connect(spill)
        try:
            for name, frame in (frames or {}).items():
                con.register(name, frame)
            sources = list(coded or [])
            if selects:
                con.execute(
                    "CREATE TEMP VIEW window_keys AS "
                    + " UNION ALL ".join(f"SELECT unit, key, cell_id FROM ({select})" for select in selects)
                )
                sources.append(KeySource.of_rows("window_keys"))
            return load_key_sets(con, sources, zone_of_cells, ranges_above, scratch, rows_hint)
        finally:
            con.close()
