"""Release partitions, one definition per cadence. Dagster has no quarter format, so keys are the period's
first day (2018-01-01); every run of a partition carries the period's label as a tag (`spatial_release/period`:
2018-Q1 or 2018-01), which is what the runs list and the alerts show. The data window itself is taken in the
policy's time zone (Period.utc_window), not in the partition's UTC."""

import dagster as dg

from spatial_release.period import Period

PERIOD_TAG = "spatial_release/period"

quarterly = dg.TimeWindowPartitionsDefinition(
    start="2018-01-01", cron_schedule="0 0 1 */3 *", fmt="%Y-%m-%d", timezone="UTC"
)

monthly = dg.MonthlyPartitionsDefinition(start_date="2018-01-01", timezone="UTC")


def partitions_for(cadence: str) -> dg.TimeWindowPartitionsDefinition:
    """The partitions of a policy's `period` (quarter or month)."""
    return monthly if cadence == "month" else quarterly


def period_of(partition_key: str, partitions_def: dg.PartitionsDefinition = quarterly) -> Period:
    if partitions_def is monthly:
        return Period.parse(partition_key[:7])
    return Period.from_partition_key(partition_key)


def period_tags(partitions_def: dg.PartitionsDefinition) -> dg.PartitionedConfig:
    """The jobs' partitioned config: no run config, and the period label as a run tag."""
    return dg.PartitionedConfig(
        partitions_def=partitions_def,
        run_config_for_partition_key_fn=lambda key: {},
        tags_for_partition_key_fn=lambda key: {PERIOD_TAG: period_of(key, partitions_def).label},
    )
