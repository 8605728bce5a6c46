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
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
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
        whens = [f"WHEN {self._outside(local)} THEN timezone({sql_str(self.zone)}, {local})"]
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
    return f"try_strptime({text}, [{', '.join(sql_str(f) for f in specs)}])" if specs else None


def timestamp_sql(column: str, dtype: str, source: SourceSpec) -> tuple[str, str | None, str | None]:
    """(raw text, instant, local time) expressions of a time column, by its stored type. The ping's instant
    is the first of them that is not NULL, the local time read by a LocalClock."""
    col = ident(column)
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
