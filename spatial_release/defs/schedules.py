import dagster as dg

from spatial_release.defs.jobs import release_job

# Cron 0 0 1 */3 * from the partitions; a tick on 1 April requests the quarter that just closed (Q1).
quarterly_release_schedule = dg.build_schedule_from_partitioned_job(
    release_job, name="quarterly_release_schedule", default_status=dg.DefaultScheduleStatus.RUNNING
)
