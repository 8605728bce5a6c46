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

A release's key sets are kept for the later releases of its window and for reviews as a coded key set file
(`write_coded`, read back by `coded_file_source`): the names of its units and keys once, and its pairs as
integer codes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spatial_release.fileio import atomic_path, scratch_folder
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
    # raises ValueError when the part's files cannot give the rows they claim (a coded key set file's codes)
    validate: Callable[[duckdb.DuckDBPyConnection], None] | None = None
    # relations the queries name that are held in memory, not read from files: registered on the connection
    frames: Mapping[str, pd.DataFrame] = field(default_factory=dict)

    def register(self, con: duckdb.DuckDBPyConnection) -> None:
        for name, frame in self.frames.items():
            con.register(name, frame)

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


def _number(con: duckdb.DuckDBPyConnection, sources: list[KeySource]) -> tuple[int, int]:
    """risk_units and risk_keys: every unit and key the parts name (each part checked first, `validate`),
    numbered in their sort order (as pandas.factorize(sort=True) would); a key's cell is the least of those
    named with it. Returns how many units and keys are numbered."""
    for source in sources:
        source.register(con)
        if source.validate is not None:
            source.validate(con)
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
    return _scalar(con, "SELECT count(*) FROM risk_units"), _scalar(con, "SELECT count(*) FROM risk_keys")


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
    n_units, n_keys = _number(con, sources)
    # The coded pairs are streamed as they come out of the joins, repeats and all, and sorted and made distinct
    # in compiled loops (kernels.unit_major_batches, key_major): a DISTINCT and two ORDER BYs in DuckDB spill
    # within the memory limit and cost several times the join itself. Not counted first: counting is a second
    # pass over the joins.
    coded = " UNION ALL ".join(f"SELECT u, k FROM ({s.pairs})" for s in sources)
    over = ranges_above is not None and rows_hint is not None and rows_hint > ranges_above
    batches = None if over else _streamed(con, coded, ranges_above)
    if batches is None:
        return _in_ranges(con, sources, coded, zone_of_cells, n_units, n_keys, scratch)
    return _whole(con, batches, n_units, n_keys, zone_of_cells)[0]


def _whole(
    con: duckdb.DuckDBPyConnection,
    batches: list[tuple[np.ndarray, np.ndarray]],
    n_units: int,
    n_keys: int,
    zone_of_cells: Callable[[pd.Series], pd.Series],
) -> tuple[KeySets, np.ndarray, np.ndarray]:
    """The KeySets of the streamed coded pairs, and which of the numbered units and keys they hold (the
    others are dropped and the codes renumbered: a unit counted only in withheld cells)."""
    unit_offsets, unit_keys = kernels.unit_major_batches(batches, n_units, n_keys)
    held_units = np.diff(unit_offsets) > 0
    unit_offsets = np.concatenate(([0], unit_offsets[1:][held_units]))
    held_keys = kernels.codes_held(unit_keys, n_keys)
    key_zone = _key_zones(con, zone_of_cells, held_keys)
    # unit_major's view holds every row read, repeats too: keep the distinct pairs only
    unit_keys = unit_keys.copy() if held_keys.all() else _compacted(unit_keys, held_keys)
    key_offsets, key_units = kernels.key_major(unit_offsets, unit_keys, len(key_zone), np.int32)
    return KeySets(key_zone, unit_offsets, unit_keys, key_offsets, key_units), held_units, held_keys


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


# ------------------------------------------------------------------ the coded key set file
#
# A release's key sets are kept (risk/unit_keys.internal.parquet) for the later releases of its window and for
# reviews. Kept as (unit, key, cell_id) strings, writing them is a large share of the risk step and every
# reader codes the strings again (bench/RESULTS.md). The coded file holds the arrays the estimate reads:
# one Parquet file (so one atomic rename) of three kinds of rows, told apart by which codes are null:
#   unit rows  (u, NULL, unit name, NULL)     u = 0..units-1, in the units' sort order
#   key rows   (NULL, k, key name, cell_id)   k = 0..keys-1, in the keys' sort order; cell_id: the least cell
#                                              named with the key (the one its risk zone is read from)
#   pair rows  (u, k, NULL, NULL)             every distinct (unit, key) pair, unit-major
# Its schema metadata marks the format and the number of rows of each kind, which a reader checks.

FILE_FORMAT = b"spatial_release.coded_key_sets"
FILE_VERSION = b"1"
_SCHEMA = pa.schema([("u", pa.int32()), ("k", pa.int32()), ("name", pa.string()), ("cell_id", pa.string())])
_WRITE_ROWS = 4_000_000


def _parquet(path: Path) -> str:
    return "read_parquet('" + str(path).replace("'", "''") + "')"


def coded_file_counts(path: Path) -> dict[str, int] | None:
    """The units, keys and pairs a coded key set file says it holds, or None for a file of (unit, key,
    cell_id) rows. Raises ValueError naming the file when it claims the format but not its version, or is no
    readable Parquet file (a truncated one)."""
    try:
        metadata = pq.read_schema(path).metadata or {}
    except pa.ArrowException as error:
        raise ValueError(f"{path}: not a readable key set file ({error})") from None
    if metadata.get(FILE_FORMAT) is None:
        return None
    if metadata[FILE_FORMAT] != FILE_VERSION:
        raise ValueError(f"{path}: coded key set file of version {metadata[FILE_FORMAT]!r}, expected {FILE_VERSION!r}")
    try:
        return {name: int(metadata[name.encode()]) for name in ("units", "keys", "pairs")}
    except (KeyError, ValueError) as error:
        raise ValueError(f"{path}: coded key set file without its row counts ({error})") from None


def file_rows(path: Path) -> int:
    """The (unit, key) rows of a key set file of either kind, from its Parquet metadata (no scan)."""
    counts = coded_file_counts(path)
    return pq.ParquetFile(path).metadata.num_rows if counts is None else counts["pairs"]


@dataclass(frozen=True)
class CodedKeySets:
    """Key sets as a coded key set file holds them: the sets, and the names of their keys and units by code,
    with each key's cell (the least cell named with it, the one its risk zone is read from)."""

    sets: KeySets
    key_names: pa.StringArray
    unit_names: pa.StringArray
    key_cells: pa.StringArray


def _coded_names(
    con: duckdb.DuckDBPyConnection, sets: KeySets, held_units: np.ndarray, held_keys: np.ndarray
) -> CodedKeySets:
    """`sets` with the names of their units and keys, from the tables risk_units and risk_keys (`_number`) of
    which they hold `held_units` and `held_keys`."""
    names = con.sql("SELECT unit FROM risk_units ORDER BY u").to_arrow_table().column(0).combine_chunks()
    keys = con.sql("SELECT key, cell_id FROM risk_keys ORDER BY k").to_arrow_table()
    names = names.filter(pa.array(held_units)).cast(pa.string())
    keys = keys.filter(pa.array(held_keys))
    if (len(names), keys.num_rows) != (sets.units, sets.keys):
        raise RuntimeError(f"key sets of {sets.units} units and {sets.keys} keys named by {len(names)} and {keys.num_rows}")
    key_names, cells = (keys.column(c).combine_chunks().cast(pa.string()) for c in ("key", "cell_id"))
    return CodedKeySets(sets, key_names, names, cells)


def write_coded(
    con: duckdb.DuckDBPyConnection, path: Path, sets: KeySets, held_units: np.ndarray, held_keys: np.ndarray
) -> CodedKeySets:
    """Write `sets` as a coded key set file, naming its units and keys from the tables risk_units and
    risk_keys (`_number`) of which they hold `held_units` and `held_keys`; atomically. Returns the sets with
    the names written."""
    coded = _coded_names(con, sets, held_units, held_keys)
    n_units, n_keys, n_pairs = sets.units, sets.keys, len(sets.unit_keys)
    metadata = {FILE_FORMAT: FILE_VERSION, b"units": b"%d" % n_units, b"keys": b"%d" % n_keys, b"pairs": b"%d" % n_pairs}
    schema = _SCHEMA.with_metadata(metadata)
    no_code = lambda n: pa.nulls(n, pa.int32())  # noqa: E731
    no_name = lambda n: pa.nulls(n, pa.string())  # noqa: E731
    with atomic_path(path) as tmp:
        # no dictionary and no statistics for the codes: with pyarrow's defaults the pairs take several times
        # as long to write (bench/RESULTS.md)
        with pq.ParquetWriter(
            tmp, schema, compression="snappy", use_dictionary=["name", "cell_id"], write_statistics=False
        ) as out:
            codes = pa.array(np.arange(n_units, dtype=np.int32))
            out.write_batch(pa.record_batch([codes, no_code(n_units), coded.unit_names, no_name(n_units)], schema=schema))
            codes = pa.array(np.arange(n_keys, dtype=np.int32))
            out.write_batch(pa.record_batch([no_code(n_keys), codes, coded.key_names, coded.key_cells], schema=schema))
            pair_units = np.repeat(np.arange(n_units, dtype=np.int32), np.diff(sets.unit_offsets))
            for start in range(0, n_pairs, _WRITE_ROWS):
                stop = min(start + _WRITE_ROWS, n_pairs)
                columns = [pair_units[start:stop], sets.unit_keys[start:stop].astype(np.int32, copy=False)]
                out.write_batch(
                    pa.record_batch([*map(pa.array, columns), no_name(stop - start), no_name(stop - start)], schema=schema)
                )
    return coded


def _check_coded_file(con: duckdb.DuckDBPyConnection, path: Path, counts: dict[str, int]) -> None:
    """Raise ValueError naming `path` unless its rows are what a coded key set file's readers join on: unit and
    key rows numbered 0..n-1 once each, with distinct names (and a cell for each key), and pairs whose codes
    are numbered, each unit and key holding one at least, as many as the metadata says. (A code without its
    name row would drop its pairs from the joins silently.)"""
    f = _parquet(path)
    row = con.execute(
        "SELECT "
        "count(*) FILTER (WHERE u IS NOT NULL AND k IS NULL), count(DISTINCT u) FILTER (WHERE k IS NULL), "
        "count(DISTINCT name) FILTER (WHERE k IS NULL), min(u) FILTER (WHERE k IS NULL), max(u) FILTER (WHERE k IS NULL), "
        "count(*) FILTER (WHERE k IS NOT NULL AND u IS NULL), count(DISTINCT k) FILTER (WHERE u IS NULL), "
        "count(DISTINCT name) FILTER (WHERE u IS NULL), count(cell_id) FILTER (WHERE u IS NULL), "
        "min(k) FILTER (WHERE u IS NULL), max(k) FILTER (WHERE u IS NULL), "
        "count(*) FILTER (WHERE u IS NOT NULL AND k IS NOT NULL), count(DISTINCT u) FILTER (WHERE k IS NOT NULL), "
        "count(DISTINCT k) FILTER (WHERE u IS NOT NULL), min(u) FILTER (WHERE k IS NOT NULL), "
        "max(u) FILTER (WHERE k IS NOT NULL), min(k) FILTER (WHERE u IS NOT NULL), max(k) FILTER (WHERE u IS NOT NULL), "
        f"count(*) FILTER (WHERE u IS NULL AND k IS NULL) FROM {f}"
    ).fetchone()
    assert row is not None
    _refuse_coded_rows(path, counts, tuple(row))


@dataclass(frozen=True)
class CodedRows:
    """A coded key set file's rows read whole, split by kind (`check_coded_table`): the unit rows' codes and
    names, the key rows' codes, names and cells, the pairs' codes, and the pairs' one-pass scan."""

    unit_codes: np.ndarray
    unit_names: pa.Array
    key_codes: np.ndarray
    key_names: pa.Array
    key_cells: pa.Array
    pair_units: np.ndarray
    pair_keys: np.ndarray
    scan: kernels.PairScan


def check_coded_table(path: Path, table: pa.Table, counts: dict[str, int]) -> CodedRows:
    """`_check_coded_file` on the file's rows already read whole (columns u, k, name, cell_id): the same checks
    in numpy over the arrays, not a second scan of the file; the pairs' figures in one compiled pass
    (`kernels.scan_pairs`, against the numbers the metadata declares). Returns the rows split by kind."""
    u, k = table.column("u"), table.column("k")
    u_set, k_set = pc.is_valid(u), pc.is_valid(k)
    unit_row, key_row = pc.and_(u_set, pc.invert(k_set)), pc.and_(pc.invert(u_set), k_set)
    pair = pc.and_(u_set, k_set)
    unit_codes = pc.filter(u, unit_row).to_numpy()
    key_codes = pc.filter(k, key_row).to_numpy()
    pair_units, pair_keys = pc.filter(u, pair).to_numpy(), pc.filter(k, pair).to_numpy()
    scan = kernels.scan_pairs(pair_units, pair_keys, counts["units"], counts["keys"])
    pair_figures: tuple[int | None, ...]
    if scan.in_range:
        held_units = int(np.count_nonzero(scan.unit_counts))
        pair_figures = (held_units, scan.keys_held, scan.unit_min, scan.unit_max, scan.key_min, scan.key_max)
    else:  # codes the scan could not count (the file is refused below): the exact figures for the message
        pair_figures = (_distinct(pair_units), _distinct(pair_keys), *_min_max(pair_units), *_min_max(pair_keys))
    neither = len(u) - len(unit_codes) - len(key_codes) - len(pair_units)
    names = table.column("name")
    unit_names, key_names = pc.filter(names, unit_row), pc.filter(names, key_row)
    key_cells = pc.filter(table.column("cell_id"), key_row)
    row = (
        len(unit_codes),
        _distinct(unit_codes),
        pc.count_distinct(unit_names).as_py(),
        *_min_max(unit_codes),
        len(key_codes),
        _distinct(key_codes),
        pc.count_distinct(key_names).as_py(),
        pc.count(key_cells).as_py(),
        *_min_max(key_codes),
        len(pair_units),
        *pair_figures,
        neither,
    )
    _refuse_coded_rows(path, counts, row)
    as_array = lambda column: column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column  # noqa: E731
    return CodedRows(
        unit_codes, as_array(unit_names), key_codes, as_array(key_names), as_array(key_cells), pair_units, pair_keys, scan
    )


def _distinct(codes: np.ndarray) -> int:
    """How many distinct codes: a counting pass when they are small non-negative integers, else a sort."""
    if not len(codes):
        return 0
    low, high = int(codes.min()), int(codes.max())
    if low >= 0 and high < 4 * len(codes) + 1_000_000:
        return int(np.count_nonzero(np.bincount(codes, minlength=high + 1)))
    return len(np.unique(codes))


def _min_max(codes: np.ndarray) -> tuple[int | None, int | None]:
    return (int(codes.min()), int(codes.max())) if len(codes) else (None, None)


def _refuse_coded_rows(path: Path, counts: dict[str, int], row: tuple) -> None:
    """Raise ValueError naming `path` when the figures of its rows (`_check_coded_file`'s query, in its order)
    are not those of a valid coded key set file of `counts`."""
    units, keys, pairs = counts["units"], counts["keys"], counts["pairs"]
    (u_rows, u_codes, u_names, u_min, u_max, k_rows, k_codes, k_names, k_cells, k_min, k_max) = row[:11]
    (p_rows, p_units, p_keys, pu_min, pu_max, pk_min, pk_max, neither) = row[11:]
    wrong = []
    if (u_rows, u_codes, u_names) != (units, units, units) or (units and (u_min, u_max) != (0, units - 1)):
        wrong.append(
            f"unit rows: {u_rows} rows, {u_codes} codes in [{u_min}, {u_max}], {u_names} names; "
            f"expected {units} of each, codes 0..{units - 1}"
        )
    if (k_rows, k_codes, k_names, k_cells) != (keys, keys, keys, keys) or (keys and (k_min, k_max) != (0, keys - 1)):
        wrong.append(
            f"key rows: {k_rows} rows, {k_codes} codes in [{k_min}, {k_max}], {k_names} names, {k_cells} cells; "
            f"expected {keys} of each, codes 0..{keys - 1}"
        )
    if p_rows != pairs or (p_units, p_keys) != (units, keys):
        wrong.append(
            f"pair rows: {p_rows} pairs holding {p_units} units and {p_keys} keys; "
            f"expected {pairs} pairs holding all {units} and {keys}"
        )
    elif pairs and (pu_min < 0 or pk_min < 0 or pu_max >= units or pk_max >= keys):
        wrong.append(
            f"pair rows: codes outside the numbered units and keys (units [{pu_min}, {pu_max}], keys [{pk_min}, {pk_max}])"
        )
    if neither:
        wrong.append(f"{neither} rows with neither a unit nor a key code")
    if wrong:
        raise ValueError(f"{path}: not a valid coded key set file: " + "; ".join(wrong))


def check_coded_file(path: Path) -> dict[str, int]:
    """The units, keys and pairs of a coded key set file, after checking its rows against them in a scan of the
    file (`_check_coded_file`; a reader that holds the rows already checks them with `check_coded_table`): no
    reader may take a file cut short, or one whose codes name no unit or key, as fewer key sets. ValueError
    naming the file."""
    counts = coded_file_counts(path)
    if counts is None:
        raise ValueError(f"{path}: not a coded key set file")
    con = duckdb.connect()
    try:
        _check_coded_file(con, path, counts)
    finally:
        con.close()
    return counts


def coded_file_source(path: Path) -> KeySource:
    """The part of a coded key set file (`write_coded`), its codes joined to the window's numbering through
    the names of its units and keys (a few hundred thousand rows): no key string per pair. Checked before it
    is read (`_check_coded_file`)."""
    counts = coded_file_counts(path)
    if counts is None:
        raise ValueError(f"{path}: not a coded key set file")
    f = _parquet(path)
    unit_rows = f"(SELECT u AS at, name FROM {f} WHERE k IS NULL)"
    key_rows = f"(SELECT k AS at, name, cell_id FROM {f} WHERE u IS NULL)"
    return KeySource(
        units=f"SELECT name AS unit FROM {unit_rows}",
        keys=f"SELECT name AS key, cell_id FROM {key_rows}",
        pairs=(
            f"SELECT um.u, km.k FROM (SELECT u, k FROM {f} WHERE u IS NOT NULL AND k IS NOT NULL) p "
            f"JOIN (SELECT f.at, r.u FROM {unit_rows} f JOIN risk_units r ON r.unit = f.name) um ON um.at = p.u "
            f"JOIN (SELECT f.at, r.k FROM {key_rows} f JOIN risk_keys r ON r.key = f.name) km ON km.at = p.k"
        ),
        exact=True,
        validate=lambda con: _check_coded_file(con, path, counts),
    )


def file_rows_query(path: Path) -> str:
    """A DuckDB query of the (unit, key, cell_id) rows of a key set file of either kind (of a coded one, each
    key with its least cell)."""
    f = _parquet(path)
    if coded_file_counts(path) is None:
        return f"SELECT unit, key, cell_id FROM {f}"
    return (
        f"SELECT un.name AS unit, kn.name AS key, kn.cell_id "
        f"FROM (SELECT u, k FROM {f} WHERE u IS NOT NULL AND k IS NOT NULL) p "
        f"JOIN (SELECT u, name FROM {f} WHERE k IS NULL) un ON un.u = p.u "
        f"JOIN (SELECT k, name, cell_id FROM {f} WHERE u IS NULL) kn ON kn.k = p.k"
    )


def code_and_keep(
    source: KeySource,
    zone_of_cells: Callable[[pd.Series], pd.Series],
    limit: int,
    scratch: Path | None,
    path: Path,
) -> CodedKeySets | None:
    """The KeySets of one part (as `load_key_sets` codes it alone) with their names, also written to `path` as
    a coded key set file; None, with nothing written, as soon as the part streams more than `limit` rows (or its join runs
    out of DuckDB's memory)."""
    with scratch_folder(scratch, "risk-keys") as spill:
        con = connect(spill)
        try:
            n_units, n_keys = _number(con, [source])
            try:
                batches = _streamed(con, f"SELECT u, k FROM ({source.pairs})", limit)
            except duckdb.OutOfMemoryException:
                # the join's published side outgrew DuckDB's limit (a window of about a billion rows, on the
                # ranged road): a part that large is over `limit` anyway
                return None
            if batches is None:
                return None
            sets, held_units, held_keys = _whole(con, batches, n_units, n_keys, zone_of_cells)
            return write_coded(con, path, sets, held_units, held_keys)
        finally:
            con.close()
