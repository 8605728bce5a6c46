"""Raw trace files -> validated pings (unit, UTC instant, lon, lat) plus a quarantine of rejected pings.

Files are read with DuckDB as text (`all_varchar`), so that a malformed value becomes a quarantined row with
its reason instead of an exception that loses the whole file. A trip row yields two pings (origin and
destination), each validated on its own: a trip that ends after the period keeps its origin.
Row numbers are 1-based data rows (a CSV's header is line 1, so data row N is line N + 1).

Time: every ping becomes the UTC instant its timestamp names, row by row, whatever mix of formats a file
has. A format with `%z` or `%Z` (or a literal trailing `Z`, which is UTC) names an instant. A format without
one names a wall-clock time in `source.timezone`, as does a typed Parquet TIMESTAMP; a TIMESTAMP WITH TIME
ZONE is already an instant. Wall-clock times at a change of the clocks follow one rule:
- a local time that does not exist (the hour skipped when clocks go forward, e.g. 02:30 on 2018-03-11 in
  New York) is quarantined as `nonexistent_local_time`: no instant is more right than another;
- a local time that happens twice (the hour repeated when clocks go back, e.g. 01:30 on 2018-11-04 in New
  York) is the earlier instant (daylight time, 05:30Z), as Python's zoneinfo reads it (fold=0). DuckDB's
  timezone() takes the later one and shifts skipped times by an hour, so it is not used for these: the
  offsets of the period's zone are computed here, with zoneinfo, and applied in SQL.

Unit ids: integer columns stay integers; a float column's integral values are the same unit as the integer
(1234.0 is 1234, in any file); other values are trimmed text. A missing id (null, NaN or infinite, blank
text, or one of the policy's `source.missing_unit_values`, compared case-insensitively after trimming) is
quarantined as `missing_unit_id`, never counted as a unit.
"""

from __future__ import annotations

import glob
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import duckdb

from spatial_release.errors import UserError
from spatial_release.fileio import atomic_path
from spatial_release.period import Period
from spatial_release.policy import Policy, SourceSpec
from spatial_release.progress import Progress, silent

PING_COLUMNS = ("unit", "ts", "lon", "lat")
QUARANTINE_COLUMNS = ("file", "row", "trip_end", "reason", "detail", "unit_raw", "time_raw", "lon_raw", "lat_raw")


class IngestError(UserError, ValueError):
    """A trace file cannot be used at all (missing, unreadable, or without a mapped column)."""


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
    valid_by_file: dict[str, int] = field(default_factory=dict)  # file name -> valid pings

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


def _duckdb_problem(exc: duckdb.Error) -> str:
    """DuckDB's complaint in two lines at most, without what would quote the file: a CSV error's 'Original
    Line' is a raw row; the SQL excerpt and the sniffer's search space say nothing to a user."""
    kept = []
    for line in str(exc).splitlines():
        if not line.strip() or line.startswith("The search space"):
            break
        if not line.lstrip().startswith(("Original Line", "LINE ")):
            kept.append(line.strip().removeprefix("Invalid Input Error: "))
    return " ".join(kept[:2])


def _read_sql(path: Path, file_format: str) -> str:
    if file_format == "csv":
        # The header is line 1, always: left to itself the sniffer may skip lines and take a data row (a
        # person's id and whereabouts) for the header when the first rows are ragged.
        return f"read_csv({_sql_str(str(path))}, all_varchar = true, header = true, skip = 0)"
    return f"read_parquet({_sql_str(str(path))}, file_row_number = true)"


@contextmanager
def _reading(path: Path, file_format: str) -> Iterator[None]:
    try:
        yield
    except duckdb.Error as exc:
        raise IngestError(f"{path}: cannot read as {file_format}: {_duckdb_problem(exc)}") from None


def _register_raw(con: duckdb.DuckDBPyConnection, path: Path, file_format: str, name: str) -> dict[str, str]:
    """Make `name` the file's rows with a 1-based `__row`; return its column types.

    Parquet is a view (streamed, never loaded whole: files can hold hundreds of millions of pings); CSV is
    read as text into a table, because its row numbers come from the order of the read."""
    with _reading(path, file_format):
        if file_format == "csv":
            # row_number() over () follows file order: DuckDB preserves insertion order for this scan.
            con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT row_number() OVER () AS __row, * "
                        f"FROM {_read_sql(path, file_format)}")
        else:
            con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * EXCLUDE (file_row_number), "
                        f"file_row_number + 1 AS __row FROM {_read_sql(path, file_format)}")
        rows = con.execute(f"SELECT column_name, column_type FROM (DESCRIBE {name})").fetchall()
    return {col: dtype for col, dtype in rows}


def _describe_raw(con: duckdb.DuckDBPyConnection, path: Path, file_format: str) -> dict[str, str]:
    """The file's column types from its header or footer alone, without reading its rows."""
    with _reading(path, file_format):
        rows = con.execute(f"DESCRIBE SELECT * FROM {_read_sql(path, file_format)}").fetchall()
    return {row[0]: row[1] for row in rows}


def _mapped_fields(source: SourceSpec) -> dict[str, list[str]]:
    """Each mapped column with the policy fields that name it (e.g. 'lat' <- source.lat)."""
    fields = {"source.unit": source.unit}
    if source.format == "pings":
        fields.update({"source.time": source.time, "source.lon": source.lon, "source.lat": source.lat})
    else:
        for name, end in (("origin", source.origin), ("destination", source.destination)):
            fields.update({f"source.{name}.{part}": getattr(end, part) for part in ("time", "lon", "lat")})
    out: dict[str, list[str]] = {}
    for name, column in fields.items():
        out.setdefault(column, []).append(name)  # type: ignore[arg-type]
    return out


def _check_columns(path: Path, columns: Iterable[str], source: SourceSpec) -> None:
    present = set(columns) - {"__row"}
    missing = {column: names for column, names in _mapped_fields(source).items() if column not in present}
    if missing:
        # The file's own header is not listed: in a file without one, the first line is a person's data.
        fields = ", ".join(f"'{column}' (field {' and '.join(names)})" for column, names in missing.items())
        raise IngestError(f"{path}: missing column(s) {list(missing)} that the policy maps: {fields}; the "
                          f"file has {len(present)} column(s)")


def _open_file(con: duckdb.DuckDBPyConnection, path: Path, source: SourceSpec, name: str | None) -> dict[str, str]:
    """Check one trace file has every mapped column and return its column types; register it as `name`
    for the scan, or (None) only read its header or footer."""
    if not path.is_file():
        raise IngestError(f"{path}: trace file not found")
    file_format = _file_format(path, source.file_format)
    types = _register_raw(con, path, file_format, name) if name else _describe_raw(con, path, file_format)
    _check_columns(path, types, source)
    return types


def check_trace_files(policy: Policy, period: Period, traces: Sequence[str | Path] = ()) -> list[Path]:
    """What can be known of the trace files without reading their rows, checked before a release starts so
    that a user's mistake is reported before any work: every path matches a file, each file opens as its
    format (a CSV's header, a Parquet footer) and has every column the policy maps. Returns the files
    (none for a policy that generates synthetic traces)."""
    if not (traces or policy.source.paths):
        return []
    files = resolve_trace_paths(policy, traces, period)
    con = duckdb.connect()
    try:
        for path in files:
            _open_file(con, path, policy.source, None)
    finally:
        con.close()
    return files


def _unreadable_file(con: duckdb.DuckDBPyConnection, files: Sequence[Path], source: SourceSpec,
                     exc: duckdb.Error) -> Exception:
    """The error to raise when the scan of all files failed: an IngestError naming the file that cannot be
    read (a corrupt Parquet page shows only when it is decoded), or the original error if none is to blame."""
    columns = ", ".join(_ident(c) for c in _mapped_fields(source))
    for i, path in enumerate(files):
        try:
            con.execute(f"SELECT bit_xor(hash({columns})) FROM raw_{i}").fetchall()
        except duckdb.Error as inner:
            return IngestError(f"{path}: cannot read as {_file_format(path, source.file_format)}: "
                               f"{_duckdb_problem(inner)}")
    return exc


# Formats naming an instant: an offset (%z) or a zone name (%Z); `%%` is a literal percent sign.
_OFFSET_DIRECTIVE = re.compile(r"%[zZ]")


def _names_instant(spec: str) -> bool:
    return bool(_OFFSET_DIRECTIVE.search(spec.replace("%%", "")))


def _names_utc(spec: str) -> bool:
    """ISO 8601's literal trailing Z (`%Y-%m-%dT%H:%M:%SZ`) is UTC, whatever the policy's time zone."""
    return spec.replace("%%", "").endswith("Z") and not _names_instant(spec)


@dataclass(frozen=True)
class LocalClock:
    """Wall-clock time -> UTC instant in one zone over a window, by the module's rule (skipped local times
    have no instant; repeated ones take the earlier). The window's offsets come from zoneinfo; outside the
    window (a day's margin past the period, so only pings quarantined as outside_period) DuckDB's
    timezone() is used."""

    zone: str
    first_local: datetime  # the window, as naive local times
    end_local: datetime
    # (last local time of this offset, exclusive; its offset; the local time the next offset starts at)
    changes: tuple[tuple[datetime, timedelta, datetime], ...]
    last_offset: timedelta

    @classmethod
    def around(cls, zone: str, start_utc: datetime, end_utc: datetime) -> "LocalClock":
        tz = ZoneInfo(zone)
        first, end = start_utc - timedelta(days=2), end_utc + timedelta(days=2)

        def offset(posix: int) -> timedelta:
            return datetime.fromtimestamp(posix, tz).utcoffset()  # type: ignore[return-value]

        changes, hour = [], 3600
        for lo in range(int(first.timestamp()), int(end.timestamp()), hour):
            hi = lo + hour
            if offset(lo) == offset(hi):
                continue
            while hi - lo > 1:  # the first second of the new offset (changes fall on whole seconds)
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if offset(mid) == offset(lo) else (lo, mid)
            at = datetime.fromtimestamp(hi, timezone.utc).replace(tzinfo=None)
            changes.append((at + offset(lo), offset(lo), at + offset(hi)))
        margin = timedelta(days=1)  # no zone is more than a day from UTC
        return cls(zone, first.replace(tzinfo=None) + margin, end.replace(tzinfo=None) - margin,
                   tuple(changes), offset(int(end.timestamp())))

    def _shift(self, local: str, offset: timedelta) -> str:
        # CAST to TIMESTAMPTZ reads the value as UTC: ingest's connection runs with TimeZone = 'UTC'.
        return f"CAST({local} - INTERVAL '{int(offset.total_seconds())} seconds' AS TIMESTAMPTZ)"

    def _outside(self, local: str) -> str:
        return f"({local} < TIMESTAMP '{self.first_local}' OR {local} >= TIMESTAMP '{self.end_local}')"

    def instant_sql(self, local: str) -> str:
        """The UTC instant of a naive local time expression; NULL where that local time does not exist."""
        whens = [f"WHEN {self._outside(local)} THEN timezone({_sql_str(self.zone)}, {local})"]
        for old_until, old_offset, new_from in self.changes:
            whens.append(f"WHEN {local} < TIMESTAMP '{old_until}' THEN {self._shift(local, old_offset)}")
            if new_from > old_until:  # clocks went forward: [old_until, new_from) never happened
                whens.append(f"WHEN {local} < TIMESTAMP '{new_from}' THEN NULL")
            # clocks went back: [new_from, old_until) happened twice and took the old (earlier) offset above
        return f"CASE {' '.join(whens)} ELSE {self._shift(local, self.last_offset)} END"

    def nonexistent_sql(self, local: str) -> str:
        """True where a naive local time falls in a gap of the clocks."""
        gaps = [f"({local} >= TIMESTAMP '{old_until}' AND {local} < TIMESTAMP '{new_from}')"
                for old_until, _, new_from in self.changes if new_from > old_until]
        return f"coalesce(NOT {self._outside(local)} AND ({' OR '.join(gaps)}), false)" if gaps else "false"


def _try_strptime(text: str, specs: list[str]) -> str | None:
    return f"try_strptime({text}, [{', '.join(_sql_str(f) for f in specs)}])" if specs else None


def _timestamp_sql(column: str, dtype: str, source: SourceSpec) -> tuple[str, str | None, str | None]:
    """(raw text, instant, local time) expressions of a time column, by its stored type. The ping's instant
    is the first of them that is not NULL, the local time read by a LocalClock."""
    col = _ident(column)
    raw = f"CAST({col} AS VARCHAR)"
    if dtype.startswith("TIMESTAMP WITH TIME ZONE"):
        return raw, col, None
    if dtype.startswith("TIMESTAMP"):
        return raw, None, col
    text = f"trim({raw})"
    instant_specs = [f for f in source.time_formats if _names_instant(f)]
    utc_specs = [f for f in source.time_formats if _names_utc(f)]
    local_specs = [f for f in source.time_formats if f not in instant_specs and f not in utc_specs]
    instants = [e for e in (_try_strptime(text, instant_specs),
                            f"CAST({_try_strptime(text, utc_specs)} AS TIMESTAMPTZ)" if utc_specs else None) if e]
    instant = f"coalesce({', '.join(instants)})" if instants else None
    return raw, instant, _try_strptime(text, local_specs)


INTEGER_TYPES = ("BIGINT", "INTEGER", "SMALLINT", "TINYINT", "UBIGINT", "UINTEGER", "USMALLINT", "UTINYINT")


# Integer ids counted as BIGINT; UBIGINT can exceed it and is read as text like HUGEINT.
ID_INTEGER_TYPES = tuple(t for t in INTEGER_TYPES if t != "UBIGINT")
FLOAT_TYPES = ("DOUBLE", "FLOAT", "REAL")
# What trim() removes from text ids and timestamps: a blank id is missing, whatever the blank is made of.
WHITESPACE = _sql_str(" \t\r\n\x0b\x0c")


def _is_fractional_type(dtype: str) -> bool:
    return dtype in FLOAT_TYPES or dtype.startswith("DECIMAL")


def _unit_sql(column: str, dtype: str) -> str:
    """Integer ids stay integers (cheaper to count than text). Integral floats are the integer's text, so
    that 1234.0 in one file and 1234 in another are one unit (a union of files of both types is text);
    other values are trimmed text."""
    col = _ident(column)
    if dtype in ID_INTEGER_TYPES:
        return f"CAST({col} AS BIGINT)"
    if _is_fractional_type(dtype):
        finite = f"isfinite({col}) AND " if dtype in FLOAT_TYPES else ""
        # TRY_CAST: DuckDB may evaluate the THEN branch on rows the condition excludes (NaN, 1e300)
        return (f"CASE WHEN {finite}{col} = trunc({col}) AND abs({col}) < 9.2e18 "
                f"THEN CAST(TRY_CAST({col} AS BIGINT) AS VARCHAR) ELSE CAST({col} AS VARCHAR) END")
    return f"trim(CAST({col} AS VARCHAR), {WHITESPACE})"


def _finite_numbers(values: Iterable[str]) -> list[float]:
    out = []
    for value in values:
        try:
            number = float(value.strip())
        except ValueError:
            continue
        if number == number and abs(number) != float("inf"):
            out.append(number)
    return out


def _unit_missing_sql(column: str, dtype: str, missing_values: Sequence[str]) -> str:
    """The unit id is missing: NULL, NaN or infinite, blank text, or a listed missing value (for a numeric
    column, the listed values that are numbers). Typed columns are never formatted as text for this."""
    col = _ident(column)
    numbers = _finite_numbers(missing_values)
    if dtype in ID_INTEGER_TYPES:
        listed = sorted({int(n) for n in numbers if n.is_integer()})
        return f"({col} IS NULL{f' OR {col} IN ({chr(44).join(map(str, listed))})' if listed else ''})"
    if _is_fractional_type(dtype):
        not_finite = f" OR NOT isfinite({col})" if dtype in FLOAT_TYPES else ""
        listed_sql = f" OR CAST({col} AS DOUBLE) IN ({', '.join(map(repr, sorted(set(numbers))))})" if numbers else ""
        return f"({col} IS NULL{not_finite}{listed_sql})"
    texts = sorted({value.strip().lower() for value in missing_values} | {""})
    return (f"({col} IS NULL OR lower(trim(CAST({col} AS VARCHAR), {WHITESPACE})) "
            f"IN ({', '.join(_sql_str(t) for t in texts)}))")


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
                 types: dict[str, str], source: SourceSpec, clock: LocalClock) -> str:
    # The *_raw text columns only feed the quarantine: valid pings never pay for formatting them. The inner
    # query parses each timestamp once; the outer one turns a local time into its instant.
    time_raw, instant, local = _timestamp_sql(time, types[time], source)
    instant, local = instant or "CAST(NULL AS TIMESTAMPTZ)", local or "CAST(NULL AS TIMESTAMP)"
    return f"""
        SELECT * EXCLUDE (__instant, __local),
               coalesce(__instant, {clock.instant_sql('__local')}) AS ts,
               __instant IS NULL AND {clock.nonexistent_sql('__local')} AS time_nonexistent
        FROM (
            SELECT {_sql_str(str(path))} AS file, __row AS row, {_sql_str(end)} AS trip_end,
                   {_unit_sql(unit, types[unit])} AS unit_raw,
                   {_unit_missing_sql(unit, types[unit], source.missing_unit_values)} AS unit_missing,
                   {time_raw} AS time_raw,
                   {_blank_sql(time, types[time])} AS time_missing,
                   CAST({_ident(lon)} AS VARCHAR) AS lon_raw,
                   CAST({_ident(lat)} AS VARCHAR) AS lat_raw,
                   {instant} AS __instant,
                   {local} AS __local,
                   {_coordinate_sql(lon, types[lon])} AS lon,
                   {_coordinate_sql(lat, types[lat])} AS lat
            FROM {raw})"""


def _pings_of_file(raw: str, path: Path, types: dict[str, str], source: SourceSpec, clock: LocalClock) -> str:
    if source.format == "pings":
        return _ping_select(raw, path, "", source.unit, source.time, source.lon, source.lat, types, source,  # type: ignore[arg-type]
                            clock)
    ends = {"origin": source.origin, "destination": source.destination}
    return " UNION ALL ".join(
        _ping_select(raw, path, name, source.unit, end.time, end.lon, end.lat, types, source, clock)  # type: ignore[union-attr]
        for name, end in ends.items()
    )


def _reason_sql(start_utc: str, end_utc: str, source: SourceSpec) -> tuple[str, str]:
    """(reason, detail) CASE expressions; the first failing rule wins, so each row has one reason."""
    rules = [
        ("unit_missing", "missing_unit_id",
         "'the unit id is missing (null, NaN, blank or one of source.missing_unit_values)'"),
        ("time_missing", "missing_timestamp", "'the timestamp is empty'"),
        ("time_nonexistent", "nonexistent_local_time",
         f"'local time \"' || time_raw || '\" does not exist in {source.timezone} (the clocks skipped it)'"),
        ("ts IS NULL", "unparseable_timestamp",
         f"'timestamp \"' || time_raw || '\" matches none of the formats ' || {_sql_str(str(source.time_formats))}"),
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


def _write_outputs(con: duckdb.DuckDBPyConnection, pings_path: Path, quarantine_path: Path) -> None:
    with atomic_path(pings_path) as tmp:
        con.execute(
            f"COPY (SELECT unit_raw AS unit, ts, lon, lat, src FROM checked WHERE reason IS NULL) "
            f"TO {_sql_str(str(tmp))} (FORMAT parquet)"
        )
    with atomic_path(quarantine_path) as tmp:
        con.execute(
            f"COPY (SELECT {', '.join(_quarantine_column(c) for c in QUARANTINE_COLUMNS)} FROM checked "
            "WHERE reason IS NOT NULL "
            f"ORDER BY file, row, trip_end) TO {_sql_str(str(tmp))} (FORMAT parquet)"
        )


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
    reason, detail = _reason_sql(_sql_str(start.isoformat()), _sql_str(end.isoformat()), source)
    clock = LocalClock.around(source.timezone, start, end)
    columns: set[str] = set()
    selects: list[str] = []
    rows_read = 0
    for i, path in enumerate(files):
        types = _open_file(con, path, source, f"raw_{i}")
        columns.update(c for c in types if c != "__row")
        rows = con.execute(f"SELECT count(*) FROM raw_{i}").fetchone()[0]
        rows_read += rows
        # `src` (the file's position) lets later checks say which file a ping came from, e.g. the file
        # whose pings fall outside the geometry; a SMALLINT costs next to nothing in the Parquet file.
        selects.append(f"SELECT *, CAST({i} AS SMALLINT) AS src FROM "
                       f"({_pings_of_file(f'raw_{i}', path, types, source, clock)})")
        progress(f"ingest: {path.name}: {rows:,} rows")
    con.execute(f"CREATE TEMP VIEW checked AS SELECT *, {reason} AS reason, {detail} AS detail "
                f"FROM ({' UNION ALL '.join(selects)})")
    pings_path = out_dir / "pings.parquet"
    quarantine_path = out_dir / "quarantine.parquet"
    started = time.perf_counter()
    try:
        _write_outputs(con, pings_path, quarantine_path)
    except duckdb.Error as exc:
        raise _unreadable_file(con, files, source, exc) from None
    progress(f"ingest: valid pings and quarantine written in {time.perf_counter() - started:.1f} s")
    con.execute(f"CREATE TEMP TABLE rejected AS SELECT * FROM read_parquet({_sql_str(str(quarantine_path))})")
    by_reason = dict(con.execute("SELECT reason, count(*) FROM rejected GROUP BY reason ORDER BY reason").fetchall())
    # File, row and reason only: the detail quotes the raw values (a person's id, time and place), which stay
    # in the internal quarantine file and out of logs and check messages.
    examples = tuple(
        f"{file} row {row}{' ' + trip_end if trip_end else ''}: {reason_}"
        for file, row, trip_end, reason_ in con.execute(
            "SELECT file, row, trip_end, reason FROM rejected ORDER BY file, row, trip_end LIMIT 3"
        ).fetchall()
    )
    per_src = dict(con.execute(f"SELECT src, count(*) FROM read_parquet({_sql_str(str(pings_path))}) "
                               "GROUP BY src").fetchall())
    valid = sum(per_src.values())
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
        valid_by_file={Path(f).name: int(per_src.get(i, 0)) for i, f in enumerate(files)},
    )
