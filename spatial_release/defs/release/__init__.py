"""The release concern: the asset graph ingest -> count -> protect -> assess risk -> publish with its blocking
checks, once per cadence (quarterly partitions, and the same graph under `monthly/` for policies with
`period: month`), their jobs and their schedules."""

import dagster as dg

from spatial_release.defs.partitions import monthly, quarterly
from spatial_release.defs.release.assets import ReleaseGraph, build_release_graph

quarterly_graph = build_release_graph(quarterly, None, "quarterly_release_job")
monthly_graph = build_release_graph(monthly, "monthly", "monthly_release_job")
RELEASE_JOBS = [quarterly_graph.job, monthly_graph.job]

# Cron 0 0 1 */3 * from the partitions; a tick on 1 April requests the quarter that just closed (Q1).
quarterly_release_schedule = dg.build_schedule_from_partitioned_job(
    quarterly_graph.job, name="quarterly_release_schedule", default_status=dg.DefaultScheduleStatus.RUNNING
)
# For policies whose release period is a month; off until an operator switches it on for such a policy.
monthly_release_schedule = dg.build_schedule_from_partitioned_job(
    monthly_graph.job, name="monthly_release_schedule", default_status=dg.DefaultScheduleStatus.STOPPED
)

defs = dg.Definitions(
    assets=[*quarterly_graph.assets, *monthly_graph.assets],
    asset_checks=[*quarterly_graph.checks, *monthly_graph.checks],
    jobs=RELEASE_JOBS,
    schedules=[quarterly_release_schedule, monthly_release_schedule],
)

__all__ = ["RELEASE_JOBS", "ReleaseGraph", "build_release_graph", "defs", "monthly_graph", "quarterly_graph"]
