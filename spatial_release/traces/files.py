"""Trace files: which files a release reads (explicit paths or the policy's `source.paths`, `{month}`
expanded), opening each as CSV or Parquet through DuckDB with 1-based row numbers, and checking, before any
work starts, that every file opens and has every column the policy maps, each one column of one value a row
(`check_trace_files`)."""

from __future__ import annotations

import glob
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from spatial_release.errors import UserError
from spatial_release.period import Period
from spatial_release.policy import Policy, SourceSpec
from spatial_release.traces.sql import duckdb_problem, ident, sql_str


class IngestError(UserError, ValueError):
    """A trace file cannot be used at all (missing, unreadable, or without a mapped column)."""


def _months(period: Period) -> list[str]:
    out, year, month = [], period.start.year, period.start.month
    while (year, month) < (period.end.year, period.end.month):
        out.append(f"{year}{month:02d}")
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return out


def expand_patterns(patterns: Sequence[str], period: Period | None) -> list[str]:
    """`{month}` in a path stands for each month of the period as YYYYMM (monthly export files)."""
    out: list[str] = []
    for pattern in patterns:
        if "{month}" in pattern:
            if period is None:
                raise IngestError(f"{pattern}: '{{month}}' needs a period")
            out += [pattern.replace("{month}", month) for month in _months(period)]
        else:
            out.append(pattern)
    return out


def _glob_regex(pattern: str) -> str:
    """A glob pattern (`*` and `?` within one folder) as a regular expression; other characters literal."""
    return "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in pattern)


def trace_months(policy: Policy) -> set[str] | None:
    """The months (YYYYMM) for which every `{month}` path of the policy's `source.paths` has a file; None when
    no path has `{month}` (the file names do not say which periods the data covers)."""
    monthly = [str(policy.resolve(p)) for p in policy.source.paths if "{month}" in p]
    if not monthly:
        return None
    found: set[str] | None = None
    for pattern in monthly:
        head, _, tail = pattern.partition("{month}")
        shape = re.compile(_glob_regex(head) + "([0-9]{6})" + _glob_regex(tail.replace("{month}", "??????")))
        months = {m[1] for m in (shape.fullmatch(path) for path in glob.glob(pattern.replace("{month}", "??????"))) if m}
        found = months if found is None else found & months
    return found or set()


def periods_with_traces(policy: Policy) -> list[Period] | None:
    """The periods of the policy's cadence all of whose months have their trace files (`trace_months`), in
    order; None when the file names do not say (no `{month}` path, or the built-in generator)."""
    months = trace_months(policy) if policy.source.paths else None
    if months is None:
        return None
    labels = set()
    for month in months:
        year, number = int(month[:4]), int(month[4:])
        labels.add(f"{year}-{number:02d}" if policy.period == "month" else f"{year}-Q{(number - 1) // 3 + 1}")
    periods = [Period.parse(label) for label in sorted(labels)]
    return [p for p in periods if set(_months(p)) <= months]


def missing_trace_files(policy: Policy, period: Period) -> list[str]:
    """The policy's `source.paths` patterns (`{month}` expanded over `period`) that match no file: what a
    release of the period would refuse to start on. Empty for the built-in generator."""
    patterns = expand_patterns([str(policy.resolve(p)) for p in policy.source.paths], period)
    return [pattern for pattern in patterns if not glob.glob(pattern)]


def resolve_trace_paths(policy: Policy, traces: Sequence[str | Path] = (), period: Period | None = None) -> list[Path]:
    """The trace files of a release, resolved. traces: explicit paths or globs; they win over the policy's
    `source.paths` (relative to the policy file, `{month}` expanded over `period`). Every pattern must
    match at least one file (IngestError naming it)."""
    patterns = [str(t) for t in traces] or expand_patterns([str(policy.resolve(p)) for p in policy.source.paths], period)
    if not patterns:
        raise IngestError(f"{policy.path}: field 'source.paths' is empty and no trace files were given")
    files: list[Path] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern))
        if not matches:
            raise IngestError(f"{pattern}: no trace file matches this path")
        files.extend(Path(m).resolve() for m in matches)
    return files


def _file_format(path: Path, declared: str) -> str:
    if declared != "auto":
        return declared
    name = path.name.lower()
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith((".csv", ".csv.gz", ".txt", ".tsv")):
        return "csv"
    raise IngestError(f"{path}: cannot tell the file format from the name; set source.file_format")


def _read_sql(path: Path, file_format: str) -> str:
    if file_format == "csv":
        # The header is line 1, always: left to itself the sniffer may skip lines and take a data row (a
        # person's id and whereabouts) for the header when the first rows are ragged.
        return f"read_csv({sql_str(str(path))}, all_varchar = true, header = true, skip = 0)"
    return f"read_parquet({sql_str(str(path))}, file_row_number = true)"


@contextmanager
def _reading(path: Path, file_format: str) -> Iterator[None]:
    try:
        yield
    except duckdb.Error as exc:
        raise IngestError(f"{path}: cannot read as {file_format}: {duckdb_problem(exc)}") from None


def _parquet_view_sql(name: str, path: Path, replace: str = "") -> str:
    return (
        f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * EXCLUDE (file_row_number){replace}, "
        f"file_row_number + 1 AS __row FROM {_read_sql(path, 'parquet')}"
    )


def _register_raw(con: duckdb.DuckDBPyConnection, path: Path, file_format: str, name: str) -> dict[str, str]:
    """Make `name` the file's rows with a 1-based `__row`; return its column types.

    Parquet is a view (streamed, never loaded whole: files can hold hundreds of millions of pings); CSV is
    read as text into a table, because its row numbers come from the order of the read. A Parquet INT96
    timestamp column is a TIMESTAMP WITH TIME ZONE (`_int96_as_utc`)."""
    with _reading(path, file_format):
        if file_format == "csv":
            # row_number() over () follows file order: DuckDB preserves insertion order for this scan.
            con.execute(
                f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT row_number() OVER () AS __row, * "
                f"FROM {_read_sql(path, file_format)}"
            )
        else:
            con.execute(_parquet_view_sql(name, path))  # DuckDB reads the footer first: its error is the clearer
            utc = _int96_as_utc(path)
            if utc:
                con.execute(_parquet_view_sql(name, path, utc))
        rows = con.execute(f"SELECT column_name, column_type FROM (DESCRIBE {name})").fetchall()
    return {col: dtype for col, dtype in rows}


def _int96_columns(path: Path) -> list[str]:
    """The file's top-level columns stored as Parquet INT96 (a nested column's path is not its name)."""
    try:
        schema = pq.read_metadata(path).schema
    except (pa.ArrowException, OSError) as exc:
        raise IngestError(f"{path}: cannot read as parquet: {exc}") from None
    columns = (schema.column(i) for i in range(len(schema)))
    return [c.name for c in columns if c.physical_type == "INT96" and c.path == c.name]


def _int96_as_utc(path: Path) -> str:
    """A REPLACE clause making each INT96 column an instant. INT96 timestamps (Spark, Hive, Impala and
    other legacy writers) hold UTC, but DuckDB reads them as a TIMESTAMP without a zone, which ingest takes
    for a wall-clock time in the policy's zone: 13:00Z would become 18:00Z under America/New_York.
    timezone('UTC', ...) names the zone, whatever the connection's own."""
    replaced = [f"timezone('UTC', {ident(c)}) AS {ident(c)}" for c in _int96_columns(path)]
    return f" REPLACE ({', '.join(replaced)})" if replaced else ""


def _describe_raw(con: duckdb.DuckDBPyConnection, path: Path, file_format: str) -> dict[str, str]:
    """The file's column types from its header or footer alone, without reading its rows."""
    with _reading(path, file_format):
        rows = con.execute(f"DESCRIBE SELECT * FROM {_read_sql(path, file_format)}").fetchall()
    return {row[0]: row[1] for row in rows}


def _mapped_fields(source: SourceSpec) -> dict[str, list[str]]:
    """Each mapped column with the policy fields that name it (e.g. 'lat' <- source.lat)."""
    fields: dict[str, str | None] = {"source.unit": source.unit}
    if source.format == "pings":
        fields.update({"source.time": source.time, "source.lon": source.lon, "source.lat": source.lat})
    else:
        for name, end in (("origin", source.origin), ("destination", source.destination)):
            fields.update({f"source.{name}.{part}": getattr(end, part) for part in ("time", "lon", "lat")})
    out: dict[str, list[str]] = {}
    for name, column in fields.items():
        if column is None:  # SourceSpec's validator requires every column of its format
            raise ValueError(f"policy field {name} names no column")
        out.setdefault(column, []).append(name)
    return out


def _check_columns(path: Path, columns: Iterable[str], source: SourceSpec) -> None:
    present = set(columns) - {"__row"}
    missing = {column: names for column, names in _mapped_fields(source).items() if column not in present}
    if missing:
        # The file's own header is not listed: in a file without one, the first line is a person's data.
        fields = ", ".join(f"'{column}' (field {' and '.join(names)})" for column, names in missing.items())
        raise IngestError(
            f"{path}: missing column(s) {list(missing)} that the policy maps: {fields}; the "
            f"file has {len(present)} column(s)"
        )


# DuckDB's names of the types that hold more than one value a row: LIST (`T[]`), ARRAY (`T[n]`), STRUCT, MAP,
# UNION, and VARIANT (Parquet's semi-structured values).
_NESTED_TYPES = ("STRUCT", "MAP", "UNION", "VARIANT")


def _nested_kind(dtype: str) -> str | None:
    """The kind of a nested column type ('LIST', 'STRUCT'...), or None for a scalar one."""
    if dtype.endswith("[]"):
        return "LIST"
    if dtype.endswith("]"):
        return "ARRAY"
    return next((kind for kind in _NESTED_TYPES if dtype.startswith(kind)), None)


def _check_scalar_columns(path: Path, types: dict[str, str], source: SourceSpec) -> None:
    """Every mapped column holds one value a row. A nested one (a Parquet list, struct, map) was read as its
    text, so a struct of an id and anything else counted one device as several, or failed in a cast that
    named no file. The type's fields are not quoted: they are the file's, not the policy's."""
    nested = {column: _nested_kind(types[column]) for column in _mapped_fields(source)}
    found = {column: kind for column, kind in nested.items() if kind}
    if found:
        fields = _mapped_fields(source)
        listed = ", ".join(
            f"column '{column}' (field {' and '.join(fields[column])}) is a {kind}" for column, kind in found.items()
        )
        raise IngestError(f"{path}: {listed}: a mapped column must hold one value a row (text, a number or a timestamp)")


def _written_names(con: duckdb.DuckDBPyConnection, path: Path, file_format: str) -> list[str]:
    """The file's column names as written: a Parquet schema's, a CSV's header line read as data (DuckDB
    renames a repeated name, `device_1`, wherever it reads a header)."""
    if file_format == "parquet":
        try:
            return pq.read_schema(path).names
        except (pa.ArrowException, OSError) as exc:
            raise IngestError(f"{path}: cannot read as parquet: {exc}") from None
    with _reading(path, file_format):
        header = con.execute(
            f"SELECT * FROM read_csv({sql_str(str(path))}, all_varchar = true, header = false, skip = 0) LIMIT 1"
        ).fetchone()
    return [str(name) for name in header or ()]


def _check_unambiguous_columns(con: duckdb.DuckDBPyConnection, path: Path, file_format: str, source: SourceSpec) -> None:
    """Each mapped column names one column of the file, whatever the case. DuckDB renames a repeated name
    (`device`, `device_1`; `device`, `Device_1`), so the policy's `device` read the first of two columns
    named `device`, or of `device` and `Device`, silently (and `DEVICE` beside `device` was reported missing).
    The names are counted, never quoted: a file without a header has a person's data in its first line."""
    names = [name.lower() for name in _written_names(con, path, file_format)]
    for column, fields in _mapped_fields(source).items():
        same = names.count(column.lower())
        if same > 1:
            raise IngestError(
                f"{path}: {same} columns are named '{column}' (ignoring case), which field {' and '.join(fields)} "
                "maps: which one it means is ambiguous; rename or drop the others"
            )


def open_file(con: duckdb.DuckDBPyConnection, path: Path, source: SourceSpec, name: str | None) -> dict[str, str]:
    """Check one trace file has every mapped column and return its column types; register it as `name`
    for the scan, or (None) only read its header or footer."""
    if not path.is_file():
        raise IngestError(f"{path}: trace file not found")
    file_format = _file_format(path, source.file_format)
    types = _register_raw(con, path, file_format, name) if name else _describe_raw(con, path, file_format)
    _check_unambiguous_columns(con, path, file_format, source)
    _check_columns(path, types, source)
    _check_scalar_columns(path, types, source)
    return types


def check_trace_files(policy: Policy, period: Period, traces: Sequence[str | Path] = ()) -> list[Path]:
    """What can be known of the trace files without reading their rows, checked before a release starts so
    that a user's mistake is reported before any work: every path matches a file, each file opens as its
    format (a CSV's header, a Parquet footer) and has every column the policy maps. Returns the files
    (none for a policy that generates synthetic traces). policy, period: what `resolve_trace_paths` needs;
    traces: the explicit paths or globs, if any. Raises IngestError naming the file and the policy field."""
    if not (traces or policy.source.paths):
        if policy.source.synthetic is None:
            raise IngestError(
                f"{policy.path}: field 'source.paths' is empty, no trace files were given and the "
                "policy has no 'source.synthetic' section"
            )
        return []
    files = resolve_trace_paths(policy, traces, period)
    con = duckdb.connect()
    try:
        for path in files:
            open_file(con, path, policy.source, None)
    finally:
        con.close()
    return files


def _unreadable_column(con: duckdb.DuckDBPyConnection, path: Path, source: SourceSpec) -> IngestError | None:
    """An IngestError naming `path` and its first column that does not read (a mapped one first), or None.
    Each column is read from the file alone: through the registered view, a column the reader cannot convert
    (even one the policy does not map: its statistics are converted) fails every query."""
    file_format = _file_format(path, source.file_format)
    fields = _mapped_fields(source)
    others = [c for c in _describe_raw(con, path, file_format) if c not in fields and c != "file_row_number"]
    for column in [*fields, *others]:
        try:
            con.execute(f"SELECT bit_xor(hash({ident(column)})) FROM {_read_sql(path, file_format)}").fetchall()
        except duckdb.Error as inner:
            named = f"field {' and '.join(fields[column])}" if column in fields else "not mapped by the policy"
            return IngestError(f"{path}: cannot read as {file_format}: column '{column}' ({named}): {duckdb_problem(inner)}")
    return None


def unreadable_file(con: duckdb.DuckDBPyConnection, files: Sequence[Path], source: SourceSpec, exc: Exception) -> Exception:
    """The error to raise when a read of the trace files failed: an IngestError
    naming the file and the column that cannot be read, or the original error if none is to blame. A corrupt
    Parquet page shows only when it is decoded, and so does a timestamp the reader cannot convert (a Parquet
    TIMESTAMP(MILLIS) past the microsecond range of about 290,000 years)."""
    for path in files:
        found = _unreadable_column(con, path, source)
        if found is not None:
            return found
    return exc
