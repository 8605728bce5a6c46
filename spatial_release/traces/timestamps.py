"""Timestamps -> UTC instants, in SQL, by one rule.

Every ping becomes the UTC instant its timestamp names, row by row, whatever mix of formats a file has. A
format with `%z` or `%Z` (or a literal trailing `Z`, which is UTC) names an instant. A format without one
names a wall-clock time in `source.timezone`, as does a typed Parquet TIMESTAMP; a TIMESTAMP WITH TIME ZONE
is already an instant. Wall-clock times at a change of the clocks follow one rule:
- a local time that does not exist (the hour skipped when clocks go forward, e.g. 02:30 on 2018-03-11 in
  New York) is quarantined as `nonexistent_local_time`: no instant is more right than another;
- a local time that happens twice (the hour repeated when clocks go back, e.g. 01:30 on 2018-11-04 in New
  York) is the earlier instant (daylight time, 05:30Z), as Python's zoneinfo reads it (fold=0). DuckDB's
  timezone() takes the later one and shifts skipped times by an hour, so it is not used for these: the
  offsets of the period's zone are computed here, with zoneinfo, and applied in SQL (`LocalClock`).
A text with a zone name (`%Z`) follows the first rule too: DuckDB's strptime moves a skipped time by the gap,
so such a text is found by its round trip (`zone_gap_sql`) and quarantined; for a repeated time, strptime's
%Z takes the later instant, which this module does not change (documented in docs/policies.md).
A UTC offset no place has (beyond -14:00..+14:00, e.g. +25:00, which DuckDB's strptime takes) is
quarantined as `offset_out_of_range`. A Parquet INT96 timestamp (Spark, Hive, legacy writers) holds UTC and
is read as an instant (`traces.files`), never as a wall-clock time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import NamedTuple
from zoneinfo import ZoneInfo

from spatial_release.policy import SourceSpec
from spatial_release.traces.sql import ident, sql_str

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
    def around(cls, zone: str, start_utc: datetime, end_utc: datetime) -> LocalClock:
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
            at = datetime.fromtimestamp(hi, UTC).replace(tzinfo=None)
            changes.append((at + offset(lo), offset(lo), at + offset(hi)))
        margin = timedelta(days=1)  # no zone is more than a day from UTC
        return cls(
            zone,
            first.replace(tzinfo=None) + margin,
            end.replace(tzinfo=None) - margin,
            tuple(changes),
            offset(int(end.timestamp())),
        )

    def _shift(self, local: str, offset: timedelta) -> str:
        # CAST to TIMESTAMPTZ reads the value as UTC: ingest's connection runs with TimeZone = 'UTC'.
        return f"CAST({local} - INTERVAL '{int(offset.total_seconds())} seconds' AS TIMESTAMPTZ)"

    def _outside(self, local: str) -> str:
        return f"({local} < TIMESTAMP '{self.first_local}' OR {local} >= TIMESTAMP '{self.end_local}')"

    def instant_sql(self, local: str) -> str:
        """The UTC instant of a naive local time expression; NULL where that local time does not exist."""
        whens = [f"WHEN {self._outside(local)} THEN timezone({sql_str(self.zone)}, {local})"]
        for old_until, old_offset, new_from in self.changes:
            whens.append(f"WHEN {local} < TIMESTAMP '{old_until}' THEN {self._shift(local, old_offset)}")
            if new_from > old_until:  # clocks went forward: [old_until, new_from) never happened
                whens.append(f"WHEN {local} < TIMESTAMP '{new_from}' THEN NULL")
            # clocks went back: [new_from, old_until) happened twice and took the old (earlier) offset above
        return f"CASE {' '.join(whens)} ELSE {self._shift(local, self.last_offset)} END"

    def nonexistent_sql(self, local: str) -> str:
        """True where a naive local time falls in a gap of the clocks."""
        gaps = [
            f"({local} >= TIMESTAMP '{old_until}' AND {local} < TIMESTAMP '{new_from}')"
            for old_until, _, new_from in self.changes
            if new_from > old_until
        ]
        return f"coalesce(NOT {self._outside(local)} AND ({' OR '.join(gaps)}), false)" if gaps else "false"


# A UTC offset no place has (`%z` beyond -14:00..+14:00, or minutes or seconds over 59), in RE2: DuckDB's
# strptime takes +25:00 or +05:75 and shifts the instant by it. The forms %z reads: +HH, +HHMM,
# +HH:MM, +HH:MM:SS.
_BAD_OFFSET = (
    r"[+-](?:(?:1[5-9]|[2-9]\d)(?::?\d\d){0,2}|\d\d:?[6-9]\d(?::?\d\d)?|\d\d:?\d\d:?[6-9]\d"
    r"|14:?(?:0[1-9]|[1-5]\d)(?::?\d\d)?|14:?00:?(?:0[1-9]|[1-5]\d))"
)
# What each strptime directive matches, to find where %z stands in the text (a rough guess is enough for
# the rest: it only has to match the text the format parsed).
_DIRECTIVE = {
    "Y": r"\d+",
    "y": r"\d+",
    "m": r"\d+",
    "d": r"\d+",
    "H": r"\d+",
    "I": r"\d+",
    "M": r"\d+",
    "S": r"\d+",
    "f": r"\d+",
    "g": r"\d+",
    "n": r"\d+",
    "j": r"\d+",
    "z": r"[+-]\d\d(?::?\d\d){0,2}|Z",
    "b": r"[A-Za-z.]+",
    "B": r"[A-Za-z.]+",
    "a": r"[A-Za-z.]+",
    "A": r"[A-Za-z.]+",
    "p": r"[A-Za-z.]+",
    "Z": r"\S+",
    "%": "%",
}
_FORMAT_TOKEN = re.compile(r"%-?.|\s+|.", re.DOTALL)


def _format_parts(spec: str, offset: str) -> list[tuple[str, str]]:
    """Each token of `spec` with an RE2 pattern of the texts it parses, its first %z replaced by `offset`."""
    out, seen_offset = [], False
    for token in _FORMAT_TOKEN.findall(spec):
        if token.isspace():
            out.append((token, r"\s+"))  # a blank in a format matches one or more
        elif token.startswith("%") and len(token) > 1:
            name = token[-1]
            if name == "z" and not seen_offset:
                out.append((token, f"(?:{offset})"))
                seen_offset = True
            else:
                out.append((token, f"(?:{_DIRECTIVE.get(name, '.+?')})"))
        else:
            out.append((token, f"\\x{{{ord(token):X}}}"))
    return out


def _format_regex(spec: str, offset: str) -> str:
    """An RE2 pattern of the texts `spec` parses, its first %z replaced by `offset`."""
    return "".join(pattern for _, pattern in _format_parts(spec, offset))


def _bad_offset_sql(text: str, specs: list[str]) -> str | None:
    """True where a format with %z reads an offset no place has from the text (None: no format has %z)."""
    patterns = [_format_regex(spec, _BAD_OFFSET) for spec in specs if "%z" in spec.replace("%%", "")]
    return " OR ".join(f"regexp_full_match({text}, {sql_str(p)})" for p in patterns) or None


def _try_strptime(text: str, specs: list[str]) -> str | None:
    return f"try_strptime({text}, [{', '.join(sql_str(f) for f in specs)}])" if specs else None


def _zone_split_regex(spec: str) -> str:
    """An RE2 pattern of the texts a format with %Z parses, in three groups: before the zone name, the zone
    name, after it."""
    parts = _format_parts(spec, _DIRECTIVE["z"])
    at = next(i for i, (token, _) in enumerate(parts) if token.startswith("%") and token.endswith("Z"))
    before, after = ("".join(p for _, p in parts[:at]), "".join(p for _, p in parts[at + 1 :]))
    return f"^({before})({_DIRECTIVE['Z']})({after})$"


def _zone_gap_of_spec(text: str, instant: str, spec: str) -> str:
    """True where `text`, parsed by `spec` (with %Z) as `instant`, names a wall-clock time its zone skipped:
    DuckDB's strptime moves such a time by the gap (02:30 America/New_York on 2018-03-11 became 07:30Z,
    03:30 local), so the instant's own wall-clock time in that zone is not the text's. The text's wall-clock
    time is the text read with the zone name replaced by UTC. Only a zone that timezone() knows by name is
    looked up (a name outside pg_timezone_names, e.g. `GMT+05:30`, is a fixed offset: no gap), and a
    lookup of an unknown name is never evaluated (it raises, losing the file)."""
    split = sql_str(_zone_split_regex(spec))
    zone = f"regexp_extract({text}, {split}, 2)"
    known = f"lower({zone}) IN (SELECT lower(name) FROM pg_timezone_names())"
    safe_zone = f"CASE WHEN {known} THEN {zone} ELSE 'UTC' END"
    wall = f"CAST(try_strptime(regexp_replace({text}, {split}, '\\1UTC\\3'), {sql_str(spec)}) AS TIMESTAMP)"
    return f"coalesce({known} AND timezone({safe_zone}, {instant}) <> {wall}, false)"


def _has_zone_name(spec: str) -> bool:
    return "%Z" in spec.replace("%%", "")


def zone_gap_sql(text: str, instant: str, dtype: str, source: SourceSpec) -> str:
    """True where a text timestamp's instant came from a format with %Z and the text names a local time
    that zone skipped: quarantined as nonexistent_local_time, as the same time without a zone is. text: the
    raw value as text; instant: the parsed instant (`TimeSql.instant`). The formats are tried in order, as
    try_strptime does, so the format that parsed a text is the one checked."""
    instant_specs = [f for f in source.time_formats if _names_instant(f)]
    if not dtype == "VARCHAR" or not any(map(_has_zone_name, instant_specs)):
        return "false"
    text = f"trim({text})"
    last = max(i for i, spec in enumerate(instant_specs) if _has_zone_name(spec))
    whens = [
        f"WHEN {_try_strptime(text, [spec])} IS NOT NULL THEN "
        f"{_zone_gap_of_spec(text, instant, spec) if _has_zone_name(spec) else 'false'}"
        for spec in instant_specs[: last + 1]
    ]
    return f"CASE WHEN {instant} IS NULL THEN false {' '.join(whens)} ELSE false END"


class TimeSql(NamedTuple):
    """SQL expressions of a time column. The ping's instant is `instant` where not NULL, else `local` read
    by a LocalClock."""

    raw: str  # the value as text, for the quarantine
    instant: str | None
    local: str | None
    bad_offset: str = "false"  # true where the text names a UTC offset no place has: quarantined


def _is_instant_type(dtype: str) -> bool:
    """A DuckDB timestamp type that names an instant: TIMESTAMP WITH TIME ZONE (TIMESTAMPTZ, microseconds)
    or TIMESTAMPTZ_NS (a Parquet TIMESTAMP(NANOS) adjusted to UTC)."""
    return dtype.startswith("TIMESTAMPTZ") or "WITH TIME ZONE" in dtype


def timestamp_sql(column: str, dtype: str, source: SourceSpec) -> TimeSql:
    """The expressions of a time column, by its stored type and the policy's formats. A typed timestamp of
    any unit (TIMESTAMP_S, _MS, _NS: `pandas.to_parquet` writes nanoseconds) is cast to microseconds, the
    unit of everything downstream: a TIMESTAMP_NS beside the clock's TIMESTAMPTZ fails to bind at ingest,
    and counting's epoch_us() has no TIMESTAMPTZ_NS overload."""
    col = ident(column)
    raw = f"CAST({col} AS VARCHAR)"
    if _is_instant_type(dtype):
        return TimeSql(raw, f"CAST({col} AS TIMESTAMPTZ)", None)
    if dtype.startswith("TIMESTAMP"):
        return TimeSql(raw, None, f"CAST({col} AS TIMESTAMP)")
    text = f"trim({raw})"
    instant_specs = [f for f in source.time_formats if _names_instant(f)]
    utc_specs = [f for f in source.time_formats if _names_utc(f)]
    local_specs = [f for f in source.time_formats if f not in instant_specs and f not in utc_specs]
    instants = [
        e
        for e in (
            _try_strptime(text, instant_specs),
            f"CAST({_try_strptime(text, utc_specs)} AS TIMESTAMPTZ)" if utc_specs else None,
        )
        if e
    ]
    instant = f"coalesce({', '.join(instants)})" if instants else None
    return TimeSql(raw, instant, _try_strptime(text, local_specs), _bad_offset_sql(text, instant_specs) or "false")
