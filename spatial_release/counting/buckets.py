"""Time buckets of a period: each 15-minute UTC slot mapped to its bucket in the policy's time zone.

Every UTC offset in use is a multiple of 15 minutes, so a bucket edge never falls inside a slot (checked,
not assumed); the counting engines map an instant to its bucket through this slot table.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import duckdb
import numpy as np

from spatial_release.period import Period
from spatial_release.policy import Policy
from spatial_release.policy.model import PERIOD_RUNG, interval_sql

SLOT_US = 900_000_000  # 15 minutes: every UTC offset in use is a multiple of it, so no bucket edge falls inside a slot


class CountingError(RuntimeError):
    """The pings cannot be counted as they are (for example, instants outside the period)."""


def _lit(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@dataclass(frozen=True)
class BucketSlots:
    first_slot: int  # epoch_us // SLOT_US of the period's first instant
    slot_bucket: list[int]  # bucket number of each 15-minute slot of the period
    buckets: list[datetime]  # bucket number -> bucket start (UTC)

    def arithmetic(self) -> tuple[int, int] | None:
        """(offset, per) when every slot's bucket is (slot index + offset) // per, as for hours, or days in a
        zone without daylight saving: the engines then compute buckets by arithmetic instead of looking up
        the slot table. None when the buckets are uneven (days across a DST change, months)."""
        if not self.slot_bucket:
            return None
        index = np.arange(len(self.slot_bucket), dtype=np.int64)
        table = np.asarray(self.slot_bucket, dtype=np.int64)
        per = int(np.argmax(table != table[0])) or len(table)  # slots in the first bucket (may be partial)
        for width in sorted({per, int(np.bincount(table).max())}):
            offset = width - per
            if np.array_equal((index + offset) // width, table):
                return offset, width
        return None


def rung_interval_sql(policy: Policy, rung: str | None) -> str:
    """The DuckDB interval of a time rung: the policy's bucket (None), a ladder rung, or the whole period
    (months and quarters: DuckDB aligns month intervals on 2000-01-01, so 3 months are calendar quarters)."""
    if rung is None:
        return policy.time.bucket_interval_sql()
    if rung == PERIOD_RUNG:
        return "INTERVAL 3 months" if policy.period == "quarter" else "INTERVAL 1 month"
    return interval_sql(rung)


def bucket_slots(policy: Policy, period: Period, rung: str | None = None) -> BucketSlots:
    """Each 15-minute UTC slot of the period with its bucket in the policy's time zone (DuckDB's time_bucket),
    checking that the slot's first and last microsecond fall in the same bucket. `rung`: a rung of the
    policy's time ladder instead of its bucket."""
    start, end = period.utc_window(policy.time.timezone)
    first_slot, slot_bucket, buckets = _slot_table(
        rung_interval_sql(policy, rung), policy.time.timezone, start, end, period.label, policy.time.bucket
    )
    # fresh lists: a caller may keep and change its own copy, never the memo's
    return BucketSlots(first_slot, list(slot_bucket), list(buckets))


# The slot table depends on the interval, the zone and the window alone; a release asks for the same few tables
# hundreds of times (structure, counting, ladders, the report), and each costs a DuckDB session and a query
# over some 8,600 slots. Tuples in the memo: nothing a caller does can change it.
SLOT_TABLES_KEPT = 64


@functools.lru_cache(maxsize=SLOT_TABLES_KEPT)
def _slot_table(
    interval: str, timezone: str, start: datetime, end: datetime, label: str, bucket: str
) -> tuple[int, tuple[int, ...], tuple[datetime, ...]]:
    """(first slot, bucket number of each slot, bucket starts) for `interval` in `timezone` over [start, end).
    `label` and `bucket` name the period and the bucket in the errors only."""
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        tz = _lit(timezone)
        # instants as microseconds (numpy arrays): a datetime object per slot cost a tenth of a second
        rows = con.execute(
            f"SELECT epoch_us(t) // {SLOT_US} AS slot, epoch_us(time_bucket({interval}, t, {tz})) AS b, "
            f"epoch_us(time_bucket({interval}, t + INTERVAL 15 minute - INTERVAL 1 microsecond, {tz})) AS b_last "
            f"FROM generate_series(TIMESTAMPTZ {_lit(start.isoformat())}, TIMESTAMPTZ {_lit(end.isoformat())} "
            "- INTERVAL 1 microsecond, INTERVAL 15 minute) AS g(t) ORDER BY t"
        ).fetchnumpy()
    finally:
        con.close()
    if int(start.timestamp() * 1_000_000) % SLOT_US:
        raise CountingError(f"period {label} does not start on a 15-minute boundary in UTC")
    slot, first, last = (np.asarray(rows[name], np.int64) for name in ("slot", "b", "b_last"))
    split = np.flatnonzero(first != last)
    if len(split):
        raise CountingError(
            f"bucket {bucket} in {timezone} has an edge inside the "
            f"15-minute slot starting {_instant(int(first[split[0]]))}; slot bucketing cannot be used"
        )
    starts, number = np.unique(first, return_inverse=True)
    return int(slot[0]), tuple(number.tolist()), tuple(_instant(int(us)) for us in starts)


_UTC = ZoneInfo("UTC")
_EPOCH = datetime(1970, 1, 1, tzinfo=_UTC)


def _instant(us: int) -> datetime:
    """The instant `us` microseconds after the epoch, in UTC (as DuckDB hands a TIMESTAMPTZ to Python)."""
    return _EPOCH + timedelta(microseconds=us)


def partial_buckets(policy: Policy, period: Period, rung: str | None = None) -> set[int]:
    """The buckets (numbers of `bucket_slots`) that reach outside the period: the first one when it starts
    before the period, the last one when the period ends inside it (a week across the end of a month)."""
    slots = bucket_slots(policy, period, rung)
    start, end = period.utc_window(policy.time.timezone)
    partial = {0} if slots.buckets and slots.buckets[0] < start else set()
    holding_end = _bucket_holding(rung_interval_sql(policy, rung), policy.time.timezone, end)
    if slots.buckets and holding_end == slots.buckets[-1]:
        partial.add(len(slots.buckets) - 1)
    return partial


@functools.lru_cache(maxsize=SLOT_TABLES_KEPT)
def _bucket_holding(interval: str, timezone: str, instant: datetime) -> datetime:
    """The start of the bucket of `interval` in `timezone` that holds `instant` (DuckDB's time_bucket)."""
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        row = con.execute(
            f"SELECT time_bucket({interval}, TIMESTAMPTZ {_lit(instant.isoformat())}, {_lit(timezone)})"
        ).fetchone()
    finally:
        con.close()
    assert row is not None  # a SELECT without FROM returns one row
    return row[0]


def cut_buckets(policy: Policy, period: Period, rung: str | None) -> list[datetime]:
    """The starts of the buckets (of the policy's bucket, or of ladder rung `rung`) cut by the period's edges:
    a key (area, bucket start) means one figure, so these are never published (`Structure.cut`,
    `TimeLink.cut`)."""
    starts = bucket_slots(policy, period, rung).buckets
    return [starts[b] for b in sorted(partial_buckets(policy, period, rung))]


def period_buckets(policy: Policy, period: Period, rung: str | None = None) -> list[datetime]:
    """Every bucket start (UTC) that overlaps the period, in the policy's time zone (at `rung`, if given)."""
    return bucket_slots(policy, period, rung).buckets


def rung_parents(policy: Policy, period: Period, fine: str | None, coarse: str) -> dict[datetime, datetime]:
    """The bucket of rung `coarse` that holds each bucket of rung `fine` (None: the policy's bucket), from
    the two slot tables of the period: every slot of a fine bucket must fall in one coarse bucket, else the
    ladder does not nest in this time zone and period (a CountingError, never a silent overlap)."""
    a, b = bucket_slots(policy, period, fine), bucket_slots(policy, period, coarse)
    parent: dict[int, int] = {}
    for fine_bucket, coarse_bucket in zip(a.slot_bucket, b.slot_bucket):
        if parent.setdefault(fine_bucket, coarse_bucket) != coarse_bucket:
            raise CountingError(
                f"the {fine or policy.time.bucket} bucket starting {a.buckets[fine_bucket]} spans two "
                f"{coarse} buckets in {policy.time.timezone}: the time ladder does not nest"
            )
    return {a.buckets[f]: b.buckets[c] for f, c in parent.items()}
