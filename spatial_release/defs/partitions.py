"""Release partitions, one definition per programme. Dagster has no quarter format, so keys are the period's
first day (2018-01-01); every run of a partition carries the period's label as a tag (`spatial_release/period`:
2018-Q1 or 2018-01), which is what the runs list and the alerts show. The data window itself is taken in the
policy's time zone (Period.utc_window), not in the partition's UTC.

A programme's partitions are its periods, not the calendar: from the policy's `first_period` (else the first
period whose trace files all exist, for `source.paths` with `{month}`; else 2018's first) to its
`last_period` (else the last period whose trace files all exist; else every period that is over). Trace files
that arrive later show as partitions when the code location is reloaded."""

import dagster as dg

from spatial_release.period import Period
from spatial_release.policy import Policy
from spatial_release.traces.files import periods_with_traces

PERIOD_TAG = "spatial_release/period"
DEFAULT_FIRST = "2018-01-01"
QUARTER_CRON = "0 0 1 */3 *"

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
    return first, last


def partitions_for(policy: Policy) -> dg.TimeWindowPartitionsDefinition:
    """The partitions of a programme: its cadence (quarter or month) over its periods."""
    first, last = programme_periods(policy)
    start = first.start.isoformat() if first else DEFAULT_FIRST
    end = last.end.isoformat() if last else None
    if policy.period == "month":
        return dg.MonthlyPartitionsDefinition(start_date=start, end_date=end, timezone="UTC")
    return dg.TimeWindowPartitionsDefinition(
        start=start, end=end, cron_schedule=QUARTER_CRON, fmt="%Y-%m-%d", timezone="UTC"
    )


def is_monthly(partitions_def: dg.PartitionsDefinition) -> bool:
    return getattr(partitions_def, "cron_schedule", None) == monthly.cron_schedule


def period_of(partition_key: str, partitions_def: dg.PartitionsDefinition = quarterly) -> Period:
    if is_monthly(partitions_def):
        return Period.parse(partition_key[:7])
    return Period.from_partition_key(partition_key)


def period_tags(partitions_def: dg.PartitionsDefinition) -> dg.PartitionedConfig:
    """The jobs' partitioned config: no run config, and the period label as a run tag."""
    return dg.PartitionedConfig(
        partitions_def=partitions_def,
        run_config_for_partition_key_fn=lambda key: {},
        tags_for_partition_key_fn=lambda key: {PERIOD_TAG: period_of(key, partitions_def).label},
    )
