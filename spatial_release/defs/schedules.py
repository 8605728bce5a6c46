import dagster as dg

from spatial_release.defs.jobs import monthly_release_job, release_job
from spatial_release.defs.review import quarterly_review_schedule

# Cron 0 0 1 */3 * from the partitions; a tick on 1 April requests the quarter that just closed (Q1).
quarterly_release_schedule = dg.build_schedule_from_partitioned_job(
    release_job, name="quarterly_release_schedule", default_status=dg.DefaultScheduleStatus.RUNNING
)
# For policies whose release period is a month; off until an operator switches it on for such a policy.
monthly_release_schedule = dg.build_schedule_from_partitioned_job(
    monthly_release_job, name="monthly_release_schedule", default_status=dg.DefaultScheduleStatus.STOPPED
)
ALL_SCHEDULES = [quarterly_release_schedule, monthly_release_schedule, quarterly_review_schedule]
