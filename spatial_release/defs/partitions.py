"""Release partitions, one dynamic partition set per programme, keyed by the period's label (`2018-Q1`, or
`2018-01` for a monthly programme), so the UI, the runs list and the alerts read periods. Every run of a
partition also carries the label as a tag (`spatial_release/period`). The data window itself is taken in the
policy's time zone (Period.utc_window).

A programme's partitions are its periods that are over, not the calendar: from the policy's `first_period`
(else the first period whose trace files all exist, for `source.paths` with `{month}`; else 2018's first) to
its `last_period` (else the last period whose trace files all exist; else every period that is over). The
programme's period sensor adds a period when its trace files appear where the policy says, without a reload
of the code location; the command line and the release schedule add the period they release."""

from __future__ import annotations

from datetime import UTC, date, datetime

import dagster as dg

from spatial_release.defs.programmes import Programme, key_prefix
from spatial_release.errors import PeriodError
from spatial_release.period import Period
from spatial_release.policy import Policy
from spatial_release.traces.files import periods_with_traces

PERIOD_TAG = "spatial_release/period"
DEFAULT_FIRST = "2018-01-01"
QUARTER_CRON = "0 0 1 */3 *"
MONTH_CRON = "0 0 1 * *"
# A new period's files are picked up within this long (the period sensor's interval).
PERIOD_SENSOR_INTERVAL_S = 30

# The calendars the release schedule asks for the period that just closed (not the programme's partitions).
quarterly = dg.TimeWindowPartitionsDefinition(
    start=DEFAULT_FIRST, cron_schedule=QUARTER_CRON, fmt="%Y-%m-%d", timezone="UTC"
)
monthly = dg.MonthlyPartitionsDefinition(start_date=DEFAULT_FIRST, timezone="UTC")


def programme_periods(policy: Policy) -> tuple[Period | None, Period | None]:
    """The programme's first and last period (None: not known, see the module's docstring)."""
    data = periods_with_traces(policy)
    first = Period.parse(policy.first_period) if policy.first_period else (data[0] if data else None)
    last = Period.parse(policy.last_period) if policy.last_period else (data[-1] if data else None)
    if first is not None and last is not None and last.start < first.start:
        last = first  # a declared first period after the data's last: that one partition, its files missing
    if data is not None and not data and last is None:
        last = first  # the file names say, and no period has all its files yet: the declared first alone, or none
    return first, last


def partitions_name(policy: Policy) -> str:
    return f"{key_prefix(policy.name)}_periods"


def partitions_for(policy: Policy) -> dg.DynamicPartitionsDefinition:
    """The partitions of a programme: its periods, added as they become releasable (see the module)."""
    return dg.DynamicPartitionsDefinition(name=partitions_name(policy))


def period_of(partition_key: str) -> Period:
    """A partition key is the period's label."""
    return Period.parse(partition_key)


def period_starting(day: date, cadence: str) -> Period:
    """The quarter or month (`cadence`) that holds `day`."""
    return Period.parse(f"{day.year}-{day.month:02d}" if cadence == "month" else f"{day.year}-Q{(day.month - 1) // 3 + 1}")


def next_period(period: Period) -> Period:
    return period_starting(period.end, period.kind)


def is_over(policy: Policy, period: Period, now: datetime | None = None) -> bool:
    """Whether the period has ended in the policy's time zone (its last local day is past)."""
    return period.utc_window(policy.time.timezone)[1] <= (now or datetime.now(UTC))


def releasable_periods(policy: Policy, now: datetime | None = None) -> list[Period]:
    """The programme's periods that are over, as its trace files and declared bounds say now."""
    first, last = programme_periods(policy)
    if first is None and last is None and periods_with_traces(policy) == []:
        return []  # not "every period since 2018": the files say which periods there are, and none is complete
    period = first or Period.parse(f"{DEFAULT_FIRST[:4]}-{'01' if policy.period == 'month' else 'Q1'}")
    found = []
    while is_over(policy, period, now) and (last is None or period.start <= last.start):
        found.append(period)
        period = next_period(period)
    return found


def check_declared_bounds(policy: Policy, period: Period) -> None:
    """Refuse a period outside the policy's declared first_period/last_period, or one not over yet. Periods
    its trace files do not cover are the files' business (checked where they are read)."""
    if policy.first_period and period.start < Period.parse(policy.first_period).start:
        raise PeriodError(f"period {period.label!r} is before the policy's first_period {policy.first_period}")
    if policy.last_period and period.start > Period.parse(policy.last_period).start:
        raise PeriodError(f"period {period.label!r} is after the policy's last_period {policy.last_period}")
    if not is_over(policy, period):
        end = period.utc_window(policy.time.timezone)[1]
        raise PeriodError(f"period {period.label!r} is not over yet: it ends {end.isoformat()}; release it after that")


def check_among_partitions(policy: Policy, period: Period) -> None:
    """Refuse a period that is not one of the programme's periods (`releasable_periods`): before its first, as
    its trace files or declared bounds say. Files named on the command line may release any period that is over
    (`check_declared_bounds`); the policy's own files release only the periods they make."""
    periods = releasable_periods(policy)
    if period.label not in {p.label for p in periods}:
        span = f"{periods[0].label} to {periods[-1].label}" if periods else "none yet"
        raise PeriodError(
            f"period {period.label!r} is not a release partition of {policy.name}: its periods are {span} "
            "(name the trace files with --traces to release another period that is over)"
        )


def add_partition(instance: dg.DagsterInstance, programme: Programme, period: Period) -> None:
    """Make the period a partition of the programme in this instance (once)."""
    name = partitions_name(programme.policy)
    if not instance.has_dynamic_partition(name, period.label):
        instance.add_dynamic_partitions(name, [period.label])


def period_sensor(programme: Programme) -> dg.SensorDefinition:
    policy = programme.policy
    name = partitions_name(policy)

    @dg.sensor(
        name=programme.name("period_sensor"),
        minimum_interval_seconds=PERIOD_SENSOR_INTERVAL_S,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Adds each {policy.name} period that is over, once its trace files are where the policy says "
        "(source.paths), as a partition: a new period shows in the UI without a reload of the code location.",
    )
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        known = set(context.instance.get_dynamic_partitions(name))
        new = [p.label for p in releasable_periods(policy) if p.label not in known]
        if not new:
            return dg.SensorResult(skip_reason=f"no new {policy.name} period: {len(known)} known")
        return dg.SensorResult(dynamic_partitions_requests=[dg.AddDynamicPartitionsRequest(name, new)])

    return _sensor


def period_tags(partitions_def: dg.PartitionsDefinition) -> dg.PartitionedConfig:
    """The jobs' partitioned config: no run config, and the period label as a run tag."""
    return dg.PartitionedConfig(
        partitions_def=partitions_def,
        run_config_for_partition_key_fn=lambda key: {},
        tags_for_partition_key_fn=lambda key: {PERIOD_TAG: period_of(key).label},
    )
