"""Raw trace files -> validated pings (unit, UTC instant, lon, lat) plus a quarantine of rejected pings.

Files are read with DuckDB as text (`all_varchar`), so that a malformed value becomes a quarantined row with
its reason instead of an exception that loses the whole file. A trip row yields two pings (origin and
destination), each validated on its own: a trip that ends after the period keeps its origin.
Row numbers are 1-based data rows (a CSV's header is line 1, so data row N is line N + 1).
"""

from __future__ import annotations

import glob
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from spatial_release.fileio import atomic_path
from spatial_release.period import Period
from spatial_release.policy import Policy, SourceSpec
from spatial_release.progress import Progress, silent

PING_COLUMNS = ("unit", "ts", "lon", "lat")
QUARANTINE_COLUMNS = ("file", "row", "trip_end", "reason", "detail", "unit_raw", "time_raw", "lon_raw", "lat_raw")


class IngestError(ValueError):
    """A trace file cannot be used at all (missing, unreadable, or without a mapped column)."""


class RejectedShareExceeded(IngestError):
    """More pings were rejected than the policy's `source.max_rejected_share` allows."""


@dataclass(frozen=True)
class IngestResult:
    pings_path: Path
    quarantine_path: Path
    files: tuple[str, ...]
    input_columns: tuple[str, ...]
    rows_read: int
    pings_read: int
    pings_valid: int
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    examples: tuple[str, ...] = ()

    @property
    def pings_rejected(self) -> int:
        return sum(self.rejected_by_reason.values())

    @property
    def rejected_share(self) -> float:
        return self.pings_rejected / self.pings_read if self.pings_read else 0.0

    def rejected_share_problem(self, limit: float) -> str | None:
        """A sentence describing why the rejected share is over `limit`, or None when it is within it."""
        if self.pings_read == 0:
            return f"no pings were read from {list(self.files)}"
        if self.rejected_share <= limit:
            return None
        reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(self.rejected_by_reason.items()))
        return (
            f"{self.pings_rejected} of {self.pings_read} pings rejected ({self.rejected_share:.2%}), over the "
            f"policy's limit of {limit:.2%} ({reasons}); first rejected: {'; '.join(self.examples)}; "
            f"all rejected rows are in {self.quarantine_path}"
        )


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


def resolve_trace_paths(policy: Policy, traces: Sequence[str | Path] = (), period: Period | None = None) -> list[Path]:
    """Explicit paths (or globs) win over the policy's `source.paths`; both must match at least one file."""
    patterns = [str(t) for t in traces] or expand_patterns([str(policy.resolve(p)) for p in policy.source.paths],
                                                          period)
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


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _ident(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


def _register_raw(con: duckdb.DuckDBPyConnection, path: Path, file_format: str, name: str) -> dict[str, str]:
    """Make `name` the file's rows with a 1-based `__row`; return its column types.

    Parquet is a view (streamed, never loaded whole: files can hold hundreds of millions of pings); CSV is
    read as text into a table, because its row numbers come from the order of the read."""
    try:
        if file_format == "csv":
            # row_number() over () follows file order: DuckDB preserves insertion order for this scan.
            con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT row_number() OVER () AS __row, * "
                        f"FROM read_csv({_sql_str(str(path))}, all_varchar = true, header = true)")
        else:
            con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * EXCLUDE (file_row_number), "
                        f"file_row_number + 1 AS __row FROM read_parquet({_sql_str(str(path))}, "
                        "file_row_number = true)")
        rows = con.execute(f"SELECT column_name, column_type FROM (DESCRIBE {name})").fetchall()
    except duckdb.Error as exc:
        raise IngestError(f"{path}: cannot read as {file_format}: {exc}") from None
    return {col: dtype for col, dtype in rows}


def _check_columns(path: Path, columns: Iterable[str], source: SourceSpec) -> None:
    present = set(columns)
    missing = [c for c in source.required_columns() if c not in present]
    if missing:
        raise IngestError(
            f"{path}: missing column(s) {missing} that the policy's source section maps; "
            f"the file has {sorted(present - {'__row'})}"
        )


def _timestamp_sql(column: str, dtype: str, source: SourceSpec) -> tuple[str, str]:
    """(raw text, UTC instant) expressions for a time column, by its stored type."""
    col = _ident(column)
    if dtype.startswith("TIMESTAMP WITH TIME ZONE"):
        return f"CAST({col} AS VARCHAR)", col
    if dtype.startswith("TIMESTAMP"):
        return f"CAST({col} AS VARCHAR)", f"timezone({_sql_str(source.timezone)}, {col})"
    formats = "[" + ", ".join(_sql_str(f) for f in source.time_formats) + "]"
    parsed = f"try_strptime(trim(CAST({col} AS VARCHAR)), {formats})"
    return f"CAST({col} AS VARCHAR)", f"timezone({_sql_str(source.timezone)}, {parsed})"


INTEGER_TYPES = ("BIGINT", "INTEGER", "SMALLINT", "TINYINT", "UBIGINT", "UINTEGER", "USMALLINT", "UTINYINT")


def _unit_sql(column: str, dtype: str) -> str:
    """Integer ids stay integers (cheaper to count than text); anything else is trimmed text."""
    if dtype in INTEGER_TYPES:
        return f"CAST({_ident(column)} AS BIGINT)"
    return f"trim(CAST({_ident(column)} AS VARCHAR))"


NUMERIC_TYPES = INTEGER_TYPES + ("DOUBLE", "FLOAT", "REAL", "HUGEINT")


def _coordinate_sql(column: str, dtype: str) -> str:
    """Numeric columns are read as numbers; text is parsed (a failure is NULL, quarantined with its text)."""
    if dtype in NUMERIC_TYPES or dtype.startswith("DECIMAL"):
        return f"CAST({_ident(column)} AS DOUBLE)"
    return f"TRY_CAST(trim(CAST({_ident(column)} AS VARCHAR)) AS DOUBLE)"


def _blank_sql(column: str, dtype: str) -> str:
    """The value is missing: NULL, or blank text. Typed columns are never formatted as text on the hot path."""
    if dtype == "VARCHAR":
        return f"({_ident(column)} IS NULL OR trim({_ident(column)}) = '')"
    return f"({_ident(column)} IS NULL)"


def _ping_select(raw: str, path: Path, end: str, unit: str, time: str, lon: str, lat: str,
                 types: dict[str, str], source: SourceSpec) -> str:
    # The *_raw text columns only feed the quarantine: valid pings never pay for formatting them.
    time_raw, ts = _timestamp_sql(time, types[time], source)
    return f"""
        SELECT {_sql_str(str(path))} AS file, __row AS row, {_sql_str(end)} AS trip_end,
               {_unit_sql(unit, types[unit])} AS unit_raw,
               {_blank_sql(unit, types[unit])} AS unit_missing,
               {time_raw} AS time_raw,
               {_blank_sql(time, types[time])} AS time_missing,
               CAST({_ident(lon)} AS VARCHAR) AS lon_raw,
               CAST({_ident(lat)} AS VARCHAR) AS lat_raw,
               {ts} AS ts,
               {_coordinate_sql(lon, types[lon])} AS lon,
               {_coordinate_sql(lat, types[lat])} AS lat
        FROM {raw}"""


def _pings_of_file(raw: str, path: Path, types: dict[str, str], source: SourceSpec) -> str:
    if source.format == "pings":
        return _ping_select(raw, path, "", source.unit, source.time, source.lon, source.lat, types, source)  # type: ignore[arg-type]
    ends = {"origin": source.origin, "destination": source.destination}
    return " UNION ALL ".join(
        _ping_select(raw, path, name, source.unit, end.time, end.lon, end.lat, types, source)  # type: ignore[union-attr]
        for name, end in ends.items()
    )


def _reason_sql(start_utc: str, end_utc: str, formats: list[str]) -> tuple[str, str]:
    """(reason, detail) CASE expressions; the first failing rule wins, so each row has one reason."""
    rules = [
        ("unit_missing", "missing_unit_id", "'the unit id is empty'"),
        ("time_missing", "missing_timestamp", "'the timestamp is empty'"),
        ("ts IS NULL", "unparseable_timestamp",
         f"'timestamp \"' || time_raw || '\" matches none of the formats ' || {_sql_str(str(formats))} "
         "|| ' (or does not exist in the time zone)'"),
        ("lon IS NULL OR lat IS NULL", "coordinate_not_a_number",
         "'lon/lat \"' || coalesce(lon_raw, 'NULL') || '\", \"' || coalesce(lat_raw, 'NULL') || '\"' "
         "|| ' is not a number'"),
        ("isnan(lon) OR isnan(lat)", "coordinate_not_a_number",
         "'lon/lat ' || lon_raw || ', ' || lat_raw || ' is NaN'"),
        ("NOT (lon BETWEEN -180 AND 180) OR NOT (lat BETWEEN -90 AND 90)", "coordinate_out_of_range",
         "'lon/lat ' || lon_raw || ', ' || lat_raw || ' outside [-180, 180] x [-90, 90]'"),
        ("lon = 0 AND lat = 0", "coordinate_null_island",
         "'lon/lat 0, 0 is the usual placeholder of a missing GPS fix'"),
        (f"ts < TIMESTAMPTZ {start_utc} OR ts >= TIMESTAMPTZ {end_utc}", "outside_period",
         "'instant ' || strftime(ts, '%Y-%m-%dT%H:%M:%SZ') || ' is outside the period'"),
    ]
    reason = "CASE " + " ".join(f"WHEN {cond} THEN '{name}'" for cond, name, _ in rules) + " END"
    detail = "CASE " + " ".join(f"WHEN {cond} THEN {text}" for cond, _, text in rules) + " END"
    return reason, detail


def _quarantine_column(name: str) -> str:
    return "CAST(unit_raw AS VARCHAR) AS unit_raw" if name == "unit_raw" else name


def ingest_traces(policy: Policy, period: Period, files: Sequence[Path], out_dir: Path,
                  progress: Progress = silent) -> IngestResult:
    """Read, map and validate every file; write `pings.parquet` and `quarantine.parquet` into out_dir.

    Validation is a view over the files, read once for the valid pings and once for the quarantine, so
    memory stays bounded whatever the number of pings."""
    source = policy.source
    out_dir.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET preserve_insertion_order = false")
    con.execute(f"SET temp_directory = {_sql_str(str(out_dir / 'spill'))}")
    start, end = period.utc_window(policy.time.timezone)
    reason, detail = _reason_sql(_sql_str(start.isoformat()), _sql_str(end.isoformat()), source.time_formats)
    columns: set[str] = set()
    selects: list[str] = []
    rows_read = 0
    for i, path in enumerate(files):
        if not path.is_file():
            raise IngestError(f"{path}: trace file not found")
        types = _register_raw(con, path, _file_format(path, source.file_format), f"raw_{i}")
        _check_columns(path, types, source)
        columns.update(c for c in types if c != "__row")
        rows = con.execute(f"SELECT count(*) FROM raw_{i}").fetchone()[0]
        rows_read += rows
        selects.append(_pings_of_file(f"raw_{i}", path, types, source))
        progress(f"ingest: {path.name}: {rows:,} rows")
    con.execute(f"CREATE TEMP VIEW checked AS SELECT *, {reason} AS reason, {detail} AS detail "
                f"FROM ({' UNION ALL '.join(selects)})")
    pings_path = out_dir / "pings.parquet"
    quarantine_path = out_dir / "quarantine.parquet"
    started = time.perf_counter()
    with atomic_path(pings_path) as tmp:
        con.execute(
            f"COPY (SELECT unit_raw AS unit, ts, lon, lat FROM checked WHERE reason IS NULL) "
            f"TO {_sql_str(str(tmp))} (FORMAT parquet)"
        )
    progress(f"ingest: valid pings written in {time.perf_counter() - started:.1f} s")
    with atomic_path(quarantine_path) as tmp:
        con.execute(
            f"COPY (SELECT {', '.join(_quarantine_column(c) for c in QUARANTINE_COLUMNS)} FROM checked "
            "WHERE reason IS NOT NULL "
            f"ORDER BY file, row, trip_end) TO {_sql_str(str(tmp))} (FORMAT parquet)"
        )
    con.execute(f"CREATE TEMP TABLE rejected AS SELECT * FROM read_parquet({_sql_str(str(quarantine_path))})")
    by_reason = dict(con.execute("SELECT reason, count(*) FROM rejected GROUP BY reason ORDER BY reason").fetchall())
    examples = tuple(
        f"{file} row {row}{' ' + trip_end if trip_end else ''}: {reason_} ({detail_})"
        for file, row, trip_end, reason_, detail_ in con.execute(
            "SELECT file, row, trip_end, reason, detail FROM rejected ORDER BY file, row, trip_end LIMIT 3"
        ).fetchall()
    )
    valid = con.execute(f"SELECT count(*) FROM read_parquet({_sql_str(str(pings_path))})").fetchone()[0]
    pings_read = valid + sum(by_reason.values())
    con.close()
    return IngestResult(
        pings_path=pings_path,
        quarantine_path=quarantine_path,
        files=tuple(str(f) for f in files),
        input_columns=tuple(sorted(columns)),
        rows_read=rows_read,
        pings_read=pings_read,
        pings_valid=pings_read - sum(by_reason.values()),
        rejected_by_reason=by_reason,
        examples=examples,
    )
