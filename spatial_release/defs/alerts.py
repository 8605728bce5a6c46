"""Alerts: a blocked release or a failed review becomes an alert record (`spatial_release.alerts`)."""

from pathlib import Path

import dagster as dg

from spatial_release.alerts import write_alert
from spatial_release.defs.release import RELEASE_JOBS
from spatial_release.defs.resources import ReleaseSettings
from spatial_release.defs.review import risk_review_job


def alert_for_failed_run(context: dg.RunFailureSensorContext, alerts_dir: Path) -> Path:
    run = context.dagster_run
    steps = [event.step_key for event in context.get_step_failure_events()]
    messages = [(e.step_failure_data.user_failure_data.description if e.step_failure_data.user_failure_data
                 else e.step_failure_data.error.message if e.step_failure_data.error else "")
                for e in context.get_step_failure_events()]
    return write_alert(alerts_dir, {
        "kind": "blocked_release" if run.job_name != risk_review_job.name else "failed_review",
        "job": run.job_name, "run_id": run.run_id, "partition": run.tags.get("dagster/partition"),
        "failed_steps": steps, "messages": messages, "summary": context.failure_event.message,
    })


@dg.run_failure_sensor(monitored_jobs=[*RELEASE_JOBS, risk_review_job], default_status=dg.DefaultSensorStatus.RUNNING,
                       description="A blocked release or a failed review becomes an alert record.")
def failed_run_alert(context: dg.RunFailureSensorContext) -> None:
    alert_for_failed_run(context, Path(ReleaseSettings().alerts_dir))


defs = dg.Definitions(sensors=[failed_run_alert])
