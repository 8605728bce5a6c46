"""Alerts: a blocked release (its release or publish run failed) becomes an alert that names the dataset,
the period, the check that blocked, its reason and offending cells or zones, and the options; it is written
to the alerts folder, delivered by e-mail and Slack webhook when configured, and shown on the failed run
itself (tags and the sensor tick's log). A review breach is delivered by the review (stages.run_review)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from spatial_release.alerts import Alert, AlertRouting, deliver
from spatial_release.defs.partitions import PERIOD_TAG
from spatial_release.defs.programmes import Programme
from spatial_release.defs.resources import ReleaseSettings
from spatial_release.ledger import find_release
from spatial_release.policy import Policy

REVIEW_BREACH_CHECK = "published_within_budget"
ALERT_TAG = "spatial_release/alert"
BLOCKED_BY_TAG = "spatial_release/blocked_by"


@dataclass(frozen=True)
class RunBlock:
    """Why a run failed, from its own event log: the first failed check, else the first failed step."""

    check: str
    reason: str
    offending: list


def _failed_checks(instance: dg.DagsterInstance, run_id: str) -> list:
    records = instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
    evaluations = [r.dagster_event.event_specific_data for r in records if r.dagster_event is not None]
    return [e for e in evaluations if not e.passed]


def block_of(context: dg.RunFailureSensorContext) -> RunBlock:
    failed = _failed_checks(context.instance, context.dagster_run.run_id)
    if failed:
        first = failed[0]
        offending = first.metadata.get("offending")
        return RunBlock(first.check_name, first.description or "",
                        list(offending.value) if offending is not None else [])
    for event in context.get_step_failure_events():
        data = event.step_failure_data
        if data.user_failure_data is not None and data.user_failure_data.description:
            offending = data.user_failure_data.metadata.get("offending")
            return RunBlock(event.step_key, data.user_failure_data.description,
                            list(offending.value) if offending is not None else [])
        if data.error is not None:
            error = data.error
            while error.cause is not None:
                error = error.cause
            return RunBlock(event.step_key, error.message.strip(), [])
    return RunBlock("run", context.failure_event.message or "the run failed", [])


def _run_settings(run: dg.DagsterRun) -> ReleaseSettings:
    """The folders the failed run used (its `settings` config), else the deployment's defaults."""
    config = (run.run_config or {}).get("resources", {}).get("settings", {}).get("config", {})
    return ReleaseSettings(**{k: v for k, v in config.items() if k in ReleaseSettings.model_fields})


def alert_of(run: dg.DagsterRun, block: RunBlock, policy: Policy, settings: ReleaseSettings) -> Alert:
    """The run's block as an Alert. A refused re-run of a published period says so (options for a
    published release); otherwise the release was never published."""
    period = run.tags.get(PERIOD_TAG, "unknown")
    published = find_release(settings.ledger().read(), policy.name, period) is not None
    return Alert.build("blocked_release", policy.name, period, block.check, block.reason, block.offending,
                       run_id=run.run_id, published=published)


def build_alert_sensor(programmes: dict[str, Programme]) -> dg.SensorDefinition:
    """The alert sensor of the code location (it sees every run of it); a run is matched to its programme by
    its job's name (`programmes`: job name -> programme)."""

    @dg.run_failure_sensor(name="failed_run_alert", default_status=dg.DefaultSensorStatus.RUNNING,
                           description="A blocked release (its release or publish run failed) becomes an alert "
                                       "naming the dataset, period, check, reason, offending cells or zones and "
                                       "the options: written to the alerts folder, e-mailed and posted to Slack "
                                       "when configured (see README, Alerts), and tagged on the failed run.")
    def failed_run_alert(context: dg.RunFailureSensorContext) -> None:
        run = context.dagster_run
        programme = programmes.get(run.job_name)
        if programme is None:
            context.log.info(f"run {run.run_id} of {run.job_name} is no release: no alert")
            return
        block = block_of(context)
        if block.check == REVIEW_BREACH_CHECK:
            context.log.info("review breach: its alerts were delivered by the review run (see its metadata)")
            context.instance.add_run_tags(run.run_id, {ALERT_TAG: "delivered by the review",
                                                       BLOCKED_BY_TAG: block.check})
            return
        settings = _run_settings(run)
        policy = programme.policy
        alert = alert_of(run, block, policy, settings)
        report = deliver(alert, AlertRouting.for_policy(policy), Path(settings.alerts_dir))
        context.log.info(f"{alert.subject}: {alert.reason} -> {report.summary()}")
        context.instance.add_run_tags(run.run_id, {
            ALERT_TAG: report.summary()[:200], BLOCKED_BY_TAG: block.check,
            "spatial_release/alert_file": report.path.name if report.path else "not written"})

    return failed_run_alert
