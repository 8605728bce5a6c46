"""Release periods: a quarter (`2018-Q1`) or a month (`2018-01`), in the policy's time zone."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

from spatial_release.errors import PeriodError

# ASCII digits, matched whole (`fullmatch`): Python's \d takes any Unicode digit and `$` matches before a
# trailing newline, so `２０１８-Q1` and '2018-Q1\n' would be periods whose label, written into the release's
# folder name, is not the folder the publish step looks for.
QUARTER = re.compile(r"([0-9]{4})-Q([1-4])")
MONTH = re.compile(r"([0-9]{4})-(0[1-9]|1[0-2])")
# Years a period may fall in: no trace predates 1900, and the period's end must still be a date (9999-Q4 ends
# in the year 10000, which `datetime.date` cannot hold; 0000-Q1 starts in a year it cannot hold either).
FIRST_YEAR, LAST_YEAR = 1900, 9998


@dataclass(frozen=True)
class Period:
    label: str
    start: date  # first day, inclusive
    end: date  # first day after the period

    @classmethod
    def parse(cls, label: str) -> Period:
        match = QUARTER.fullmatch(label) or MONTH.fullmatch(label)
        if match and not FIRST_YEAR <= int(match[1]) <= LAST_YEAR:
            raise PeriodError(f"period {label!r}: the year must be between {FIRST_YEAR} and {LAST_YEAR}")
        if match := QUARTER.fullmatch(label):
            year, quarter = int(match[1]), int(match[2])
            start = date(year, 3 * quarter - 2, 1)
            end = date(year + 1, 1, 1) if quarter == 4 else date(year, 3 * quarter + 1, 1)
            return cls(label, start, end)
        if match := MONTH.fullmatch(label):
            year, month = int(match[1]), int(match[2])
            start = date(year, month, 1)
            end = date(year + 1, 1, 1) if month == 12 else date(year, month + 1, 1)
            return cls(label, start, end)
        raise PeriodError(f"period {label!r} is neither a quarter like 2018-Q1 nor a month like 2018-01")

    @property
    def kind(self) -> str:
        """'quarter' or 'month', as a policy's `period` names its cadence."""
        return "quarter" if QUARTER.fullmatch(self.label) else "month"

    def utc_window(self, tz_name: str) -> tuple[datetime, datetime]:
        """[start, end) of the period as UTC instants, the boundaries being local midnights in tz_name."""
        tz = ZoneInfo(tz_name)

        def local_midnight(day: date) -> datetime:
            return datetime(day.year, day.month, day.day, tzinfo=tz).astimezone(UTC)

        return local_midnight(self.start), local_midnight(self.end)
