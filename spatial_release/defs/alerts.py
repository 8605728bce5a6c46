"""Alerts: a failed run that touches a programme's assets becomes an alert that names the dataset, the
period, the check that blocked, its reason and offending cells or zones, the options and a link to the run
in the UI; it is written to the alerts folder, delivered by e-mail and Slack webhook when configured, and
shown on the failed run itself (tags and the sensor tick's log). Whatever launched the run: the programme's
own jobs, "Materialize all" (Dagster's implicit asset job), a backfill or a retry; a run is matched to the
programmes whose assets or checks it selected. A review breach is delivered by the review
(stages.run_review); a materialisation of a published release reported by hand, by the publication guard
(defs.guard)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import dagster as dg
from dagster._core.events import EngineEventData

from spatial_release import stages
from spatial_release.alerts import Alert, AlertRouting, deliver, mask_files
from spatial_release.defs.partitions import PERIOD_TAG, period_of
from spatial_release.defs.programmes import Programme
from spatial_release.defs.release import REFUSED_TAG
from spatial_release.defs.resources import ReleaseSettings, is_http_base_url
from spatial_release.errors import Blocked, UserError, is_disk_full
from spatial_release.ledger import find_release
from spatial_release.period import Period
from spatial_release.policy import Policy

REVIEW_BREACH_CHECK = "published_within_budget"
ALERT_TAG = "spatial_release/alert"
BLOCKED_BY_TAG = "spatial_release/blocked_by"
# On a blocked or refused run, beside the check that stopped it: why, and what can be done about that kind of
# failure (the alert's options), so the run's own page says it without opening the alert file.
WHY_TAG = "spatial_release/why"
OPTIONS_TAG = "spatial_release/what_to_do"
MAX_TAG_CHARS = 1000
DELIVERY_TAG = "spatial_release/alert_delivery"
# The Dagster UI's base URL as the alerts' readers reach it (e.g. https://dagster.example.org): each alert
# links to its run there. Unset: alerts carry the run id only.
UI_URL_ENV = "SPATIAL_RELEASE_UI_URL"


def _ui_base() -> str | None:
    """$SPATIAL_RELEASE_UI_URL without its trailing slash, None when unset. A malformed setting is a
    configuration error, named, not an alert lost."""
    base = (os.environ.get(UI_URL_ENV) or "").strip()
    if not base:
        return None
    if not is_http_base_url(base):
        raise UserError(f"{UI_URL_ENV}={base!r} is not an http(s) base URL such as https://dagster.example.org")
    return base.rstrip("/")


def run_link(run_id: str) -> str | None:
    """The run's page in the Dagster UI (`$SPATIAL_RELEASE_UI_URL/runs/<run id>`), None when the setting is
    unset."""
    base = _ui_base()
    return None if base is None else f"{base}/runs/{run_id}"


def asset_link(key: dg.AssetKey, partition: str | None = None) -> str | None:
    """The asset's page in the Dagster UI (`$SPATIAL_RELEASE_UI_URL/assets/<key>`, on the partition's view when
    given, as the UI links a partition itself), None when the setting is unset."""
    base = _ui_base()
    if base is None:
        return None
    page = f"{base}/assets/{'/'.join(quote(part, safe='') for part in key.path)}"
    return page if partition is None else f"{page}?view=partitions&partition={quote(partition, safe='')}"


def selected_prefixes(run: dg.DagsterRun) -> set[str]:
    """The key prefixes (programmes) of the assets and checks a run selected; none for a run of a whole
    job (its job's name says whose it is)."""
    keys = {key.path[0] for key in run.asset_selection or ()}
    return keys | {check.asset_key.path[0] for check in run.asset_check_selection or ()}


def programmes_of_run(run: dg.DagsterRun, by_job: Mapping[str, Programme]) -> list[Programme]:
    """The programmes a run touches: its job's, or (a run of Dagster's implicit asset job: "Materialize
    all", a backfill or a selection from the asset graph) those whose assets or checks it selected, once each."""
    if run.job_name in by_job:
        return [by_job[run.job_name]]
    by_prefix = {p.prefix: p for p in by_job.values()}
    return [by_prefix[prefix] for prefix in sorted(selected_prefixes(run)) if prefix in by_prefix]


def run_period(run: dg.DagsterRun, programme: Programme) -> str:
    """The period label of a run of `programme`: its period tag (the programme's jobs set it), else its
    partition key read with the programme's partitions (a run of the implicit asset job has only that)."""
    if PERIOD_TAG in run.tags:
        return run.tags[PERIOD_TAG]
    key = run.tags.get("dagster/partition")
    try:
        return "unknown" if key is None else period_of(key).label
    except ValueError:
        return "unknown"


@dataclass(frozen=True)
class RunBlock:
    """Why a run failed, from its own event log: the first failed check, else the first failed step."""

    check: str
    reason: str
    offending: list


def _failed_checks(instance: dg.DagsterInstance, run_id: str, prefix: str | None) -> list[dg.AssetCheckEvaluation]:
    records = instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
    evaluations = [r.dagster_event.event_specific_data for r in records if r.dagster_event is not None]
    return [
        e
        for e in evaluations
        if isinstance(e, dg.AssetCheckEvaluation) and not e.passed and prefix in (None, e.asset_key.path[0])
    ]


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


def block_of(instance: dg.DagsterInstance, run_id: str, prefix: str | None = None) -> RunBlock:
    """Why the run failed, read back from its event log (the sensor and the command line both use it);
    with `prefix`, the first failure among that programme's checks and steps (a run of the implicit asset
    job may span programmes)."""
    failed = _failed_checks(instance, run_id, prefix)
    if failed:
        first = failed[0]
        return RunBlock(first.check_name, first.description or "", _offending(first.metadata))
    records = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    for event in (r.dagster_event for r in records if r.dagster_event is not None):
        if prefix is not None and not (event.step_key or "").startswith(f"{prefix}__"):
            continue
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


def alert_of(run: dg.DagsterRun, block: RunBlock, programme: Programme, settings: ReleaseSettings) -> Alert:
    """The run's block as an Alert, with the link to the run. A run refused before it wrote anything (the
    period is published, or another run of it holds the work area: the run's refusal tag) is a notice,
    `refused_release`, with no withdrawal advice; a full disk says what it left behind (`disk_full`, never
    "withdraw"); otherwise a blocked release, published or not as the ledger says."""
    policy = programme.policy
    period = run_period(run, programme)
    link = run_link(run.run_id)
    try:
        published = find_release(settings.ledger().read(), policy.name, period) is not None
    except (Blocked, OSError):  # a ledger that does not verify: that is what blocked; say "never published"
        published = False
    ids, files = _never_quoted(policy, period, settings)
    refusal = run.tags.get(REFUSED_TAG)
    if refusal is not None:
        return Alert.build(
            "refused_release",
            policy.name,
            period,
            block.check,
            mask_files(block.reason, files),
            never=ids,
            run_id=run.run_id,
            ui_url=link,
            published=refusal == "already_published" and published,
        )
    if is_disk_full(block.reason):
        return Alert.build(
            "disk_full",
            policy.name,
            period,
            block.check,
            mask_files(_disk_full_reason(block, published, settings), files),
            never=ids,
            run_id=run.run_id,
            ui_url=link,
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
        ui_url=link,
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
    # a run of the programme's own job is the programme's; one of the implicit asset job may span several
    block = block_of(instance, run.run_id, None if run.job_name.startswith(f"{programme.prefix}_") else programme.prefix)
    if block.check == REVIEW_BREACH_CHECK:
        instance.add_run_tags(
            run.run_id, {ALERT_TAG: "risk breach: alerts delivered by the review", BLOCKED_BY_TAG: block.check}
        )
        return "review breach: its alerts were delivered by the review run (see its metadata)"
    settings = _run_settings(run)
    alert = alert_of(run, block, programme, settings)
    report = deliver(alert, AlertRouting.for_policy(programme.policy), Path(settings.alerts_dir))
    instance.add_run_tags(
        run.run_id,
        {
            ALERT_TAG: report.path.name if report.path else "alert file not written",
            DELIVERY_TAG: report.summary()[:250],
            BLOCKED_BY_TAG: block.check,
            WHY_TAG: alert.reason[:MAX_TAG_CHARS],
            OPTIONS_TAG: " | ".join(alert.options)[:MAX_TAG_CHARS],
        },
    )
    message, metadata = run_notice(alert, report.path.name if report.path else None)
    instance.report_engine_event(message, run, EngineEventData(metadata=metadata))
    return f"{alert.subject}: {alert.reason} -> {report.summary()}"


# What stopped the run, by the alert's kind, as the first words of the run's notice.
NOTICE_HEADINGS = {
    "blocked_release": "BLOCKED by {check}",
    "refused_release": "REFUSED (not failed) by {check}",
    "disk_full": "STOPPED by a full disk in {check}",
}


def run_notice(alert: Alert, alert_file: str | None) -> tuple[str, dict[str, str]]:
    """The notice the alert sensors add to the end of a blocked or refused run's event log, where the run page
    opens its log (the last lines): what stopped it, why and what to do. Dagster's run header shows only its
    own tags (status, job, partition, assets, checks, times), so the run's event log is the one place on the
    run page that can say it; its tags (WHY_TAG, OPTIONS_TAG) hold the same words."""
    heading = NOTICE_HEADINGS.get(alert.kind, alert.kind + " by {check}").format(check=alert.check)
    options = "; ".join(f"({i}) {option}" for i, option in enumerate(alert.options, start=1))
    # what to do before why: a reason may run long (the rows it quotes), and the page shows a long message cut
    message = f"{heading} ({alert.dataset} {alert.period}). WHAT TO DO: {options}. WHY: {alert.reason}"
    return message, {"stopped_by": alert.check, "alert_file": alert_file or "(not written)"}


def build_alert_sensor(programmes: dict[str, Programme]) -> dg.SensorDefinition:
    """The alert sensor of the code location (it sees every run launched from it: the UI, schedules, sensors,
    backfills and "Materialize all"; the command line delivers its own runs' alerts); a run is matched to its
    programmes by its job's name (`programmes`: job name -> programme) or by the assets it selected."""

    @dg.run_failure_sensor(
        name="failed_run_alert",
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="A failed run that touches a programme's assets (its release or publish job, a schedule, "
        "Materialize all, a backfill, a retry) becomes an alert naming the dataset, period, check, reason, "
        "offending cells or zones, the options and a link to the run: written to the alerts folder, e-mailed "
        "and posted to Slack when configured (see docs/operator-guide.md, Alerts), and tagged on the failed run.",
    )
    def failed_run_alert(context: dg.RunFailureSensorContext) -> None:
        run = context.dagster_run
        touched = programmes_of_run(run, programmes)
        if not touched:
            context.log.info(f"run {run.run_id} of {run.job_name} touches no programme's assets: no alert")
        for programme in touched:
            context.log.info(alert_failed_run(context.instance, run, programme))

    return failed_run_alert


def build_refusal_sensor(programmes: dict[str, Programme]) -> dg.SensorDefinition:
    """The notice of a refused run: a step that refuses a period (already published, or its work area held
    by another run) cancels its run (defs.release.refusals_as_cancellations), which the run-failure sensor
    does not see. Runs an operator cancelled carry no refusal tag and get no notice."""

    @dg.run_status_sensor(
        name="refused_run_notice",
        run_status=dg.DagsterRunStatus.CANCELED,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="A run refused because its period is already published (or another run of it holds its work "
        "area) becomes a notice naming the dataset, period and reason, with a link to the run and no "
        "withdrawal advice: written to the alerts folder, e-mailed and posted to Slack when configured.",
    )
    def refused_run_notice(context: dg.RunStatusSensorContext) -> None:
        run = context.dagster_run
        if REFUSED_TAG not in run.tags:
            context.log.info(f"run {run.run_id} was cancelled, not refused: no notice")
            return
        for programme in programmes_of_run(run, programmes):
            context.log.info(alert_failed_run(context.instance, run, programme))

    return refused_run_notice
