from pathlib import Path

import dagster as dg

from spatial_release.defs.jobs import ALL_JOBS
from spatial_release.defs.resources import ReleaseSettings
from spatial_release.defs.review import alert_for_failed_run, risk_review_sensor


@dg.run_failure_sensor(monitored_jobs=ALL_JOBS, default_status=dg.DefaultSensorStatus.RUNNING,
                       description="A blocked release or a failed review becomes an alert record.")
def failed_run_alert(context: dg.RunFailureSensorContext) -> None:
    alert_for_failed_run(context, Path(ReleaseSettings().alerts_dir))


ALL_SENSORS = [risk_review_sensor, failed_run_alert]
