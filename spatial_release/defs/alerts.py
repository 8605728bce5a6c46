"""Alerts: a blocked release (its release or publish run failed) becomes an alert that names the dataset,
the period, the check that blocked, its reason and offending cells or zones, and the options; it is written
to the alerts folder, delivered by e-mail and Slack webhook when configured, and shown on the failed run
itself (tags and the sensor tick's log). A review breach is delivered by the review (stages.run_review)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from spatial_release import stages
from spatial_release.alerts import Alert, AlertRouting, deliver, mask_files
from spatial_release.defs.partitions import PERIOD_TAG
from spatial_release.defs.programmes import Programme
from spatial_release.defs.resources import ReleaseSettings
from spatial_release.errors import Blocked, UserError, is_disk_full
from spatial_release.ledger import find_release
from spatial_release.period import Period
from spatial_release.policy import Policy

REVIEW_BREACH_CHECK = "published_within_budget"
ALERT_TAG = "spatial_release/alert"
BLOCKED_BY_TAG = "spatial_release/blocked_by"
DELIVERY_TAG = "spatial_release/alert_delivery"


@dataclass(frozen=True)
class RunBlock:
    """Why a run failed, from its own event log: the first failed check, else the first failed step."""

    check: str
    reason: str
    offending: list


def _failed_checks(instance: dg.DagsterInstance, run_id: str) -> list[dg.AssetCheckEvaluation]:
    records = instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
    evaluations = [r.dagster_event.event_specific_data for r in records if r.dagster_event is not None]
    return [e for e in evaluations if isinstance(e, dg.AssetCheckEvaluation) and not e.passed]


def _step_name(step_key: str | None) -> str:
    """`demo__validated_pings` -> `validated_pings`: the asset (or check) a step materialises."""
    assert step_key is not None, "a step's event names its step"
    return step_key.rsplit("__", 1)[-1]


def _offending(metadata: Mapping[str, dg.MetadataValue]) -> list:
    """The rows of a check's or a failure's `offending` metadata (a JSON list), none when it has none."""
    offending = metadata.get("offending")
    if offending is None:
        return []
    rows = offending.value
    if not isinstance(rows, Iterable):
        raise TypeError(f"offending metadata is not a list of rows: {rows!r}")
    return list(rows)


def block_of(instance: dg.DagsterInstance, run_id: str) -> RunBlock:
    """Why the run failed, read back from its event log (the sensor and the command line both use it)."""
    failed = _failed_checks(instance, run_id)
    if failed:
        first = failed[0]
        return RunBlock(first.check_name, first.description or "", _offending(first.metadata))
    records = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    for event in (r.dagster_event for r in records if r.dagster_event is not None):
        data = event.step_failure_data
        if data.user_failure_data is not None and data.user_failure_data.description:
            return RunBlock(
                _step_name(event.step_key), data.user_failure_data.description, _offending(data.user_failure_data.metadata)
            )
        if data.error is not None:
            error = data.error
            while error.cause is not None:
                error = error.cause
            return RunBlock(_step_name(event.step_key), message_only(error.message, error.cls_name), [])
    return RunBlock("run", "the run failed before any step did", [])


def message_only(message: str, cls_name: str | None) -> str:
    """An error's message without the `module.Class: ` that Dagster's error info puts before it
    (`spatial_release.ledger.errors.ReleasesMismatch: releases/ ...`): an alert's reader needs the reason,
    not the Python class path."""
    message = message.strip()
    if cls_name:
        prefix = re.match(rf"(?:[A-Za-z_][\w]*\.)*{re.escape(cls_name)}: ", message)
        if prefix:
            return message[prefix.end() :].strip()
    return message


def _run_settings(run: dg.DagsterRun) -> ReleaseSettings:
    """The folders the failed run used (its `settings` config), else the deployment's defaults."""
    run_config: dict[str, Any] = dict(run.run_config or {})  # nested config dicts, as Dagster keeps them
    config = run_config.get("resources", {}).get("settings", {}).get("config", {})
    return ReleaseSettings(**{k: v for k, v in config.items() if k in ReleaseSettings.model_fields})


def _disk_full_reason(block: RunBlock, recorded: bool, settings: ReleaseSettings) -> str:
    """What a full disk left behind: a ledger entry whose folder the next run finishes, or nothing."""
    left = (
        "the ledger records the release but its folder is not in place yet: the next run finishes it"
        if recorded
        else "nothing was published"
    )
    return (
        f"no space left on device in {block.check} (ledger at {settings.ledger_dir}, releases under "
        f"{settings.releases_dir}): {left}. Cause: {block.reason}"
    )


def alert_of(run: dg.DagsterRun, block: RunBlock, policy: Policy, settings: ReleaseSettings) -> Alert:
    """The run's block as an Alert. A refused re-run of a published period says so (options for a
    published release); a full disk says what it left behind (`disk_full`, never "withdraw"); otherwise
    the release was never published."""
    period = run.tags.get(PERIOD_TAG, "unknown")
    try:
        published = find_release(settings.ledger().read(), policy.name, period) is not None
    except (Blocked, OSError):  # a ledger that does not verify: that is what blocked; say "never published"
        published = False
    ids, files = _never_quoted(policy, period, settings)
    if is_disk_full(block.reason):
        return Alert.build(
            "disk_full",
            policy.name,
            period,
            block.check,
            mask_files(_disk_full_reason(block, published, settings), files),
            never=ids,
            run_id=run.run_id,
            published=False,
        )
    return Alert.build(
        "blocked_release",
        policy.name,
        period,
        block.check,
        mask_files(block.reason, files),
        block.offending,
        never=ids,
        run_id=run.run_id,
        published=published,
    )


def _never_quoted(policy: Policy, period: str, settings: ReleaseSettings) -> tuple[set[str], list[str]]:
    """The unit ids and trace files of the run's release (`stages.never_quoted`); none where the period or
    the work area cannot be read (a malformed period: nothing was ingested)."""
    try:
        ctx = stages.ReleaseContext(policy, Period.parse(period), Path(settings.work_dir))
        return stages.never_quoted(ctx, settings.traces)
    except (UserError, Blocked, OSError, ValueError):
        return set(), []


def alert_failed_run(instance: dg.DagsterInstance, run: dg.DagsterRun, programme: Programme, log=None) -> str:
    """Deliver the alert of a failed release or publish run of `programme` and tag the run with it (so the
    alert shows on the run in the UI); returns the delivery's one-line summary. A review breach is
    delivered by the review itself and only tagged here."""
    block = block_of(instance, run.run_id)
    if block.check == REVIEW_BREACH_CHECK:
        instance.add_run_tags(
            run.run_id, {ALERT_TAG: "risk breach: alerts delivered by the review", BLOCKED_BY_TAG: block.check}
        )
        return "review breach: its alerts were delivered by the review run (see its metadata)"
    settings = _run_settings(run)
    alert = alert_of(run, block, programme.policy, settings)
    report = deliver(alert, AlertRouting.for_policy(programme.policy), Path(settings.alerts_dir))
    instance.add_run_tags(
        run.run_id,
        {
            ALERT_TAG: report.path.name if report.path else "alert file not written",
            DELIVERY_TAG: report.summary()[:250],
            BLOCKED_BY_TAG: block.check,
        },
    )
    return f"{alert.subject}: {alert.reason} -> {report.summary()}"


def build_alert_sensor(programmes: dict[str, Programme]) -> dg.SensorDefinition:
    """The alert sensor of the code location (it sees every run launched from it: the UI, schedules and
    sensors; the command line delivers its own runs' alerts); a run is matched to its programme by its job's
    name (`programmes`: job name -> programme)."""

    @dg.run_failure_sensor(
        name="failed_run_alert",
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="A blocked release (its release or publish run failed) becomes an alert "
        "naming the dataset, period, check, reason, offending cells or zones and "
        "the options: written to the alerts folder, e-mailed and posted to Slack "
        "when configured (see README, Alerts), and tagged on the failed run.",
    )
    def failed_run_alert(context: dg.RunFailureSensorContext) -> None:
        run = context.dagster_run
        programme = programmes.get(run.job_name)
        if programme is None:
            context.log.info(f"run {run.run_id} of {run.job_name} is no release: no alert")
            return
        context.log.info(alert_failed_run(context.instance, run, programme))

    return failed_run_alert
