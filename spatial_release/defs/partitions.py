"""Quarterly partitions. Dagster has no quarter format, so keys are the quarter's first day (2018-01-01)
and the period label (2018-Q1) is derived from the key. The data window itself is taken in the policy's
time zone (Period.utc_window), not in the partition's UTC."""

import dagster as dg

from spatial_release.period import Period

quarterly = dg.TimeWindowPartitionsDefinition(
    start="2018-01-01", cron_schedule="0 0 1 */3 *", fmt="%Y-%m-%d", timezone="UTC"
)


monthly = dg.MonthlyPartitionsDefinition(start_date="2018-01-01", timezone="UTC")


def period_of(partition_key: str, partitions_def: dg.PartitionsDefinition = quarterly) -> Period:
    if partitions_def is monthly:
        return Period.parse(partition_key[:7])
    return Period.from_partition_key(partition_key)
