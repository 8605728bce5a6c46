"""The release chain of one programme (policy file), under its own key prefix:
validated_pings -> cell_counts -> protected_table -> risk_assessment (the candidate) -> published_release.

Two jobs, so that statuses tell the truth. `<prefix>_release_job` builds and checks the candidate; a blocked
candidate fails there (on the asset or check that blocked) and never plans `published_release`, so an
already published partition stays green and a never-published one is not shown as a failed publication.
`<prefix>_publish_job` materialises `published_release` only; the publish sensor launches it for the
partition of every candidate run that succeeded (the command line runs both jobs in a row). Publishing
re-evaluates every guarantee and the risk gate under the ledger lock, so even a run that skipped the
checks cannot publish a bad release.

Each asset writes its own files in the work area (returning nothing to an IO manager), so checks read
exactly the files that will be published.
"""

from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import dagster as dg
from dagster._core.errors import DagsterUserCodeProcessError
from dagster._utils.error import SerializableErrorInfo

from spatial_release import report, stages
from spatial_release.alerts.alert import STANDS, WAIT
from spatial_release.defs.check_results import check_evaluation
from spatial_release.defs.partitions import (
    MONTH_CRON,
    PERIOD_TAG,
    QUARTER_CRON,
    add_partition,
    check_declared_bounds,
    monthly,
    partitions_for,
    period_of,
    period_sensor,
    period_starting,
    period_tags,
    quarterly,
)
from spatial_release.defs.programmes import Programme
from spatial_release.defs.release.checks import build_checks
from spatial_release.defs.release.reports import (
    frontier_report,
    k_anonymity_report,
    ledger_entry_shown,
    readable,
    risk_metadata,
    risk_report,
)
from spatial_release.defs.resources import CountingEngine, ReleaseSettings, is_http_base_url
from spatial_release.errors import PeriodError, UserError
from spatial_release.policy import Policy
from spatial_release.progress import heartbeat
from spatial_release.stages.coarsen import public_frontier
from spatial_release.traces.files import missing_trace_files

CANDIDATE_TAG = "spatial_release/candidate_run"
# An asset's step, or the publish job's op (published_release is reported, not materialised by an asset).
StepContext = dg.AssetExecutionContext | dg.OpExecutionContext
# On a run a step refused ("already_published", "work_area_busy"): the refusal notice reads it (defs.alerts).
REFUSED_TAG = "spatial_release/refused"


def _run_is_live(instance: dg.DagsterInstance, run_id: str) -> bool | None:
    """Whether the instance knows `run_id` as still running; None when it does not know the run (another
    process's ephemeral instance)."""
    run = instance.get_run_by_id(run_id)
    return None if run is None else not run.is_finished


def refusal_kind(refused: Exception) -> str:
    return "already_published" if isinstance(refused, stages.AlreadyPublished) else "work_area_busy"


class _GivenErrorInfo(DagsterUserCodeProcessError):
    """Its error info is given (`user_code_process_error_infos`, set by the subclass), not taken from the
    frames it is raised through."""

    def __init__(self, *args: object):
        Exception.__init__(self, *args)  # Dagster's own __init__ requires the infos as a keyword


class Refusal(dg.Failure, _GivenErrorInfo):
    """A step's deliberate refusal: a `dg.Failure` (its description and metadata are the step failure's, no
    retry) whose error carries no stack trace. Dagster 1.13.27 records a Failure's error with the frames it was
    raised through, and the run page prints them as "Stack Trace", as for a crash; an error info handed over
    the way a user-code process hands one (DagsterUserCodeProcessError, one info) is recorded as given
    (`serializable_error_info_from_exc_info`), so the step's failure reads as the refusal's words only.
    Dagster 1.13 ends a run CANCELED, not SUCCESS, only when a step of a run reported as canceling failed
    (`dagster._core.execution.api.job_execution_iterator`): a failed step there is the price of a grey run."""

    def __init__(self, why: str, what_to_do: str, metadata: dict[str, str]):
        # the description (what the alert quotes as the reason) is why; the run page shows both
        dg.Failure.__init__(self, description=why, metadata={**metadata, "what_to_do": what_to_do}, allow_retries=False)
        shown = f"Refused, not failed: {why}. What to do: {what_to_do}."
        self.user_code_process_error_infos = [SerializableErrorInfo(message=shown, stack=[], cls_name=None)]


def refusal_option(kind: str) -> str:
    """What to do about a refusal (the refusal notice's option, `Alert.options`)."""
    return STANDS if kind == "already_published" else WAIT


@contextmanager
def refusals_as_cancellations(step: AbstractContextManager[None], context: StepContext) -> Iterator[None]:
    """A deliberate refusal on taking the work area (a published period, a work area another run owns)
    cancels the run, with its reason and what to do as the failed step's description (a `Refusal`: no stack
    trace), and tags the run with it. Why a cancellation: Dagster shows a partition, and a check, as failed
    only when the run that planned it ended FAILED; a cancelled run leaves the published materialisation the
    partition's latest (green) and its checks' last results read Skipped, not "Execution failed". Dagster
    turns the failing step of a run reported as canceling into RUN_CANCELED (its execution API). What the
    step's body raises is left to the step."""
    with ExitStack() as stack:
        try:
            stack.enter_context(step)
        except (stages.AlreadyPublished, stages.WorkAreaBusy) as refused:
            kind = refusal_kind(refused)
            context.instance.add_run_tags(context.run.run_id, {REFUSED_TAG: kind})
            context.instance.report_run_canceling(context.run, message=f"refused ({kind}): {refused}")
            raise Refusal(str(refused).rstrip("."), refusal_option(kind), {"refusal": kind}) from None
        yield


@dataclass(frozen=True)
class ReleaseGraph:
    programme: Programme
    assets: list
    checks: list
    release_job: object  # unresolved asset jobs of define_asset_job
    publish_job: object
    schedule: dg.ScheduleDefinition
    publish_sensor: dg.SensorDefinition
    period_sensor: dg.SensorDefinition

    @property
    def jobs(self) -> list:
        return [self.release_job, self.publish_job]


class _AssetArgs(TypedDict):
    """What every asset of a programme's graph is given."""

    partitions_def: dg.PartitionsDefinition
    group_name: str
    key_prefix: list[str]
    owners: list[str]
    tags: dict[str, str]


@dataclass(frozen=True)
class _GraphScope:
    """One programme's graph: what its assets' definitions and steps share."""

    programme: Programme
    partitions_def: dg.DynamicPartitionsDefinition

    @property
    def policy_name(self) -> str:
        return self.programme.policy.name

    def asset_args(self) -> _AssetArgs:
        programme = self.programme
        return {
            "partitions_def": self.partitions_def,
            "group_name": programme.prefix,
            "key_prefix": [programme.prefix],
            "owners": programme.owners,
            "tags": {"dataset": programme.prefix},
        }

    def release_context(self, context: StepContext, settings: ReleaseSettings) -> stages.ReleaseContext:
        """The step's release context (the policy as the graph was built from it)."""
        return settings.context(self.programme.load(), period_of(context.partition_key))


def _hold(
    context: StepContext,
    settings: ReleaseSettings,
    ctx: stages.ReleaseContext,
    starts_run: bool = False,
    check_ledger: bool = True,
) -> AbstractContextManager[None]:
    """Hold the work area for this step (stages.work_area_step): a period the ledger records is refused
    before anything is written, and a step of a run that no longer owns the area stops. A publish run
    acts for the candidate run that launched it."""
    published = settings.published() if check_ledger else None
    run = context.run
    run_id = run.tags.get(CANDIDATE_TAG) or run.root_run_id or run.run_id  # a re-execution keeps its claim
    return refusals_as_cancellations(
        stages.work_area_step(ctx, published, run_id, starts_run, lambda other: _run_is_live(context.instance, other)),
        context,
    )


def _validated_pings_asset(scope: _GraphScope) -> dg.AssetsDefinition:
    @dg.asset(
        name="validated_pings",
        kinds={"duckdb", "parquet"},
        **scope.asset_args(),
        description=f"{scope.policy_name}: the raw trace files mapped by the policy and validated; rejected "
        "pings are counted by reason and quarantined (owner-only work area).",
    )
    def validated_pings(context: dg.AssetExecutionContext, settings: ReleaseSettings) -> dg.MaterializeResult:
        ctx = scope.release_context(context, settings)
        policy = ctx.policy
        context.log.info(f"ingesting {policy.name} {ctx.period.label} into {ctx.area.ingest}")
        with _hold(context, settings, ctx, starts_run=True), heartbeat(context.log.info, "ingest") as progress:
            summary = stages.run_ingest(ctx, settings.traces, progress=progress)
        context.log.info(f"{summary.pings_valid} valid pings, {summary.pings_rejected} quarantined")
        return dg.MaterializeResult(
            metadata={
                "dagster/row_count": summary.pings_valid,
                "period": ctx.period.label,
                "rows_read": summary.rows_read,
                "pings_rejected": summary.pings_rejected,
                "rejected_share": readable(summary.rejected_share),
                "rejected_by_reason": dg.MetadataValue.json(summary.rejected_by_reason),
                # the count and a content digest, never the names (a per-device export's name is a unit id)
                "files": len(summary.files),
                "files_sha256": summary.inputs_sha256 or "",
                "quarantine": dg.MetadataValue.path(summary.quarantine),
                "policy": f"{policy.name} v{policy.version}",
            }
        )

    return validated_pings


def _cell_counts_asset(scope: _GraphScope, validated_pings: dg.AssetsDefinition) -> dg.AssetsDefinition:
    @dg.asset(
        name="cell_counts",
        deps=[validated_pings],
        kinds={"duckdb", "parquet"},
        **scope.asset_args(),
        description=f"{scope.policy_name}: distinct units per (cell, bucket) and per margin, before any "
        "suppression (internal; never published as is).",
    )
    def cell_counts(
        context: dg.AssetExecutionContext, settings: ReleaseSettings, counting: CountingEngine
    ) -> dg.MaterializeResult:
        ctx = scope.release_context(context, settings)
        with (
            _hold(context, settings, ctx),
            counting.open(ctx.area) as engine,
            heartbeat(context.log.info, "counting") as progress,
        ):
            summary = stages.run_counts(ctx, engine, progress=progress)
        # The number of groups and of units counted are facts about withheld cells:
        # they stay in counts.json, in the owner-only work area, out of the event log and metadata.
        summary_file = ctx.area.counts / stages.CountsSummary.FILE
        context.log.info(f"counted; figures in {summary_file} (internal)")
        return dg.MaterializeResult(
            metadata={
                "period": ctx.period.label,
                "counts_summary": dg.MetadataValue.path(str(summary_file)),
                "pings_outside_geometry": summary.pings_outside_geometry,
                "measure": ctx.policy.measure,
                "unit": ctx.policy.unit,
                "engine": summary.engine,
                "engine_settings": dg.MetadataValue.json(summary.engine_settings),
                "unsure_coordinates": summary.unsure_coordinates,
                "assignment": dg.MetadataValue.json(summary.assignment),
                "seconds": dg.MetadataValue.json(summary.seconds),
            }
        )

    return cell_counts


def _protected_table_asset(scope: _GraphScope, cell_counts: dg.AssetsDefinition) -> dg.AssetsDefinition:
    @dg.asset(
        name="protected_table",
        deps=[cell_counts],
        kinds={"highs", "parquet"},
        **scope.asset_args(),
        description=f"{scope.policy_name}: the candidate release after primary (below k) and complementary "
        "suppression; the blocking checks on it stand between the candidate and publication.",
    )
    def protected_table(
        context: dg.AssetExecutionContext, settings: ReleaseSettings, counting: CountingEngine
    ) -> dg.MaterializeResult:
        ctx = scope.release_context(context, settings)
        policy = ctx.policy
        # under DP the contribution bounding runs on the counting engine (Spark's too), over the membership file
        bounding = counting.open(ctx.area) if policy.protection.method == "dp" else nullcontext(None)
        with (
            _hold(context, settings, ctx),
            counting.tasks(),
            bounding as engine,
            heartbeat(context.log.info, "protection") as progress,
        ):
            published = settings.published()
            summary = stages.run_protect(
                ctx,
                progress=progress,
                published=published,
                engine=engine,
                # the risk step's estimate, started once the candidate is written: it runs beside the certificate
                # and the checks, which leave a core idle, and the risk step reads it (in this run's process)
                written=lambda: stages.start_estimate_beside(ctx, published),
            )
            counts = summary.public_counts()
        frontier = public_frontier(summary.frontier, list(policy.time.ladder))
        return dg.MaterializeResult(
            metadata={
                **({"coarsening_frontier": dg.MetadataValue.md(frontier_report(frontier))} if frontier else {}),
                "period": ctx.period.label,
                "dagster/row_count": counts.published_cells + counts.structural_zero_cells_published,
                "k_anonymity_report": dg.MetadataValue.md(k_anonymity_report(counts, policy.k)),
                "smallest_published_count": counts.smallest_published_count,
                "internal_summary": dg.MetadataValue.path(str(ctx.area.candidate / stages.ProtectionManifest.FILE)),
                "policy": f"{policy.name} v{policy.version}",
            }
        )

    return protected_table


def _risk_assessment_asset(scope: _GraphScope, protected_table: dg.AssetsDefinition) -> dg.AssetsDefinition:
    @dg.asset(
        name="risk_assessment",
        deps=[protected_table],
        kinds={"python"},
        **scope.asset_args(),
        description=f"{scope.policy_name}: per-zone re-identification risk of the candidate with the ledger's "
        "earlier releases of the same population, against both ceilings.",
    )
    def risk_assessment(
        context: dg.AssetExecutionContext, settings: ReleaseSettings, counting: CountingEngine
    ) -> dg.MaterializeResult:
        ctx = scope.release_context(context, settings)
        # the risk step says what it did as each part ends; between them, the heartbeat says it is alive
        with _hold(context, settings, ctx), counting.tasks(), heartbeat(context.log.info, "risk") as progress:
            risk = stages.run_risk(ctx, settings.ledger(), progress=progress)
        return dg.MaterializeResult(
            metadata={
                "period": ctx.period.label,
                "risk_report": dg.MetadataValue.md(risk_report(risk, ctx.policy.risk)),
                "status": risk.status,
                **risk_metadata(risk, ctx.policy.risk),
                "landscape_sha256": risk.landscape_sha256,
            }
        )

    return risk_assessment


def _published_release_spec(
    scope: _GraphScope, protected_table: dg.AssetsDefinition, risk_assessment: dg.AssetsDefinition
) -> dg.AssetSpec:
    """The published release as an asset no run can plan: only the publish job reports it. An asset that
    "Materialize all", a backfill or a selection could plan would be published outside the publish job, or
    shown failed on a period that was never published when a blocking check stopped such a run (Dagster
    marks a planned asset of a failed run failed)."""
    args = scope.asset_args()
    return dg.AssetSpec(
        key=scope.programme.key("published_release"),
        deps=[protected_table, risk_assessment],
        kinds={"parquet"},
        partitions_def=args["partitions_def"],
        group_name=args["group_name"],
        owners=args["owners"],
        tags=args["tags"],
        description=f"{scope.policy_name}: the published release folder (cells.parquet, margins.parquet, "
        "release.json, report.html, report.png) and its ledger entry, written together by the publish job "
        f"({scope.programme.name('publish_job')}), which the publish sensor launches for every candidate "
        "that passed its checks. Not materialisable from the asset graph.",
    )


def _publish_op(scope: _GraphScope) -> dg.OpDefinition:
    key = scope.programme.key("published_release")

    @dg.op(
        # op names are unique in a code location; as an asset's step key reads (`demo__published_release`)
        name=f"{scope.programme.prefix}__published_release",
        description=f"{scope.policy_name}: publish the checked candidate of the partition (re-evaluates every "
        "guarantee and the risk gate under the ledger lock), write its ledger entry and report the "
        "published_release materialisation, with its check published_by_the_publish_job.",
    )
    def publish(context: dg.OpExecutionContext, settings: ReleaseSettings, counting: CountingEngine) -> None:
        ctx = scope.release_context(context, settings)
        policy = ctx.policy
        try:
            # run_publish checks, locked; what the certificate cannot settle is re-solved on the engine's tasks
            with _hold(context, settings, ctx, check_ledger=False), counting.tasks(), heartbeat(context.log.info, "publish"):
                target, record = stages.run_publish(ctx, Path(settings.releases_dir), settings.ledger())
        except stages.AlreadyPublished as exists:
            # The partition keeps its published materialisation: nothing is written and nothing failed.
            context.log.warning(f"not published again: {exists}")
            return
        except stages.GuaranteeFailed as failed:
            raise dg.Failure(
                description=str(failed), metadata={"offending": failed.outcome.offending}, allow_retries=False
            ) from None
        except FileExistsError as exists:
            raise dg.Failure(description=str(exists), allow_retries=False) from None
        context.log_event(
            dg.AssetMaterialization(
                asset_key=key,
                partition=context.partition_key,
                metadata=publication_metadata(target, record, policy, settings.releases_url),
            )
        )
        # The check published_by_the_publish_job of this partition, read now (the ledger entry and the folder
        # just written): it reads true after every publication, and the publication guard (defs.alerts), which
        # records it failed on a materialisation reported by hand, has nothing to add for this one.
        outcome = stages.check_publication(policy, ctx.period, Path(settings.releases_dir), settings.ledger())
        evaluation = check_evaluation(outcome, key, context.partition_key, run_id=context.run.run_id)
        context.log_event(evaluation)  # type: ignore[arg-type]  # log_event takes it; its annotation omits it

    return publish


def publication_metadata(
    target: Path, record: stages.ReleaseRecord, policy: Policy, releases_url: str | None = None
) -> dict:
    assert record.risk is not None, "a published release's record carries its risk assessment"
    frontier = record.risk.frontier
    return {
        "period": record.period,
        **release_report_metadata(target, policy, releases_url),
        "guarantees": dg.MetadataValue.md(report.markdown_table(*report.guarantee_rows(record))),
        "checks": dg.MetadataValue.json(record.checks),
        **({"coarsening_frontier": dg.MetadataValue.md(frontier_report(frontier))} if frontier else {}),
        "release_record": dg.MetadataValue.path(str(target / stages.ReleaseRecord.FILE)),
        "release_dir": dg.MetadataValue.path(str(target)),
        "k_anonymity_report": dg.MetadataValue.md(k_anonymity_report(record.counts, policy.k)),
        "published_cells": record.counts.published_cells,
        "smallest_published_count": record.counts.smallest_published_count,
        **risk_metadata(record.risk, policy.risk),
        "ledger_entry": ledger_entry_shown(record.ledger_entry),
        "policy": f"{policy.name} v{policy.version}",
        "policy_sha256": policy.sha256,
    }


def _release_job(scope: _GraphScope, candidate: list[dg.AssetsDefinition]) -> object:
    return dg.define_asset_job(
        scope.programme.name("release_job"),
        selection=dg.AssetSelection.assets(*candidate),
        config=period_tags(scope.partitions_def),
        tags=scope.programme.tags(),
        description=f"{scope.policy_name}: ingest, count, protect and assess one period (the candidate), with every "
        "blocking check; when it succeeds the publish sensor publishes it.",
    )


def _publish_job(scope: _GraphScope) -> dg.JobDefinition:
    @dg.job(
        name=scope.programme.name("publish_job"),
        config=period_tags(scope.partitions_def),
        tags=scope.programme.tags(),
        description=f"{scope.policy_name}: publish a checked candidate (re-evaluates every guarantee and the risk "
        "gate under the ledger lock), write its ledger entry and report the published_release materialisation.",
    )
    def publish_job() -> None:
        _publish_op(scope)()

    return publish_job


def build_release_graph(programme: Programme) -> ReleaseGraph:
    scope = _GraphScope(programme, partitions_for(programme.policy))
    validated_pings = _validated_pings_asset(scope)
    cell_counts = _cell_counts_asset(scope, validated_pings)
    protected_table = _protected_table_asset(scope, cell_counts)
    risk_assessment = _risk_assessment_asset(scope, protected_table)
    published_release = _published_release_spec(scope, protected_table, risk_assessment)
    assets = [validated_pings, cell_counts, protected_table, risk_assessment, published_release]
    checks = build_checks(
        programme, scope.partitions_def, validated_pings, cell_counts, protected_table, risk_assessment, published_release
    )
    release_job = _release_job(scope, [validated_pings, cell_counts, protected_table, risk_assessment])
    publish_job = _publish_job(scope)
    return ReleaseGraph(
        programme,
        assets,
        checks,
        release_job,
        publish_job,
        release_schedule(programme, release_job),
        publish_sensor(programme, release_job, publish_job),
        period_sensor(programme),
    )


def _table_schema(path: Path) -> dg.TableSchema:
    return dg.TableSchema(
        columns=[dg.TableColumn(c["name"], c["type"], description=c["description"]) for c in report.column_schema(path)]
    )


def report_link(target: Path, releases_url: str | None) -> dict:
    """report.html as a link, where the releases folder is served (`releases_url`): the web UI cannot open a
    file on the server's disk, and a browser refuses a file:// link from an http page."""
    if not releases_url:
        return {}
    if not is_http_base_url(releases_url):
        raise UserError(f"releases_url {releases_url!r} (SPATIAL_RELEASE_RELEASES_URL) is not an http(s) URL")
    dataset, period = target.parent.name, target.name
    return {"report_url": dg.MetadataValue.url(f"{releases_url.rstrip('/')}/{dataset}/{period}/{report.REPORT_HTML}")}


def release_report_metadata(target: Path, policy, releases_url: str | None = None) -> dict:
    """What the public sees, in the UI: the map alone (`map_image`, one image at its natural size, at most
    1200 px wide, so Dagster's markdown view shows it whole: it does not scale images down), the map with the
    headline, audit, risk, schema and preview of both tables (`map`, report.report_markdown, from the
    published files only), both tables' column schemas, and the map and page beside the release."""
    metadata = {
        "map_image": dg.MetadataValue.md(report.report_map_markdown(target, policy)),
        "map": dg.MetadataValue.md(report.report_markdown(target, policy)),
        "dagster/column_schema": _table_schema(target / "cells.parquet"),
        "margins_column_schema": _table_schema(target / "margins.parquet"),
        "report_html": dg.MetadataValue.path(str(target / report.REPORT_HTML)),
        **report_link(target, releases_url),
    }
    png = report.report_png_path(target)
    return metadata if png is None else {**metadata, "map_png": dg.MetadataValue.path(str(png))}


def release_schedule(programme: Programme, job) -> dg.ScheduleDefinition:
    cadence = "quarter" if programme.cadence == "quarter" else "month"
    cron = QUARTER_CRON if cadence == "quarter" else MONTH_CRON

    @dg.schedule(
        name=programme.name("release_schedule"),
        job=job,
        cron_schedule=cron,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"Releases {programme.policy.name} for the {cadence} that just closed, on the first "
        f"day of the next one (cron {cron}, UTC); skips, saying why, a period outside the policy's "
        "first_period/last_period, one whose trace files are missing and one the ledger already records.",
    )
    def _schedule(context: dg.ScheduleEvaluationContext, settings: ReleaseSettings):
        calendar = monthly if cadence == "month" else quarterly
        closed = calendar.get_prev_partition_window(context.scheduled_execution_time)
        if closed is None:
            return dg.SkipReason("no closed period yet")
        period = period_starting(closed.start.date(), cadence)
        try:
            check_declared_bounds(programme.policy, period)
        except PeriodError as outside:
            return dg.SkipReason(f"{programme.policy.name}: {outside}")
        missing = missing_trace_files(programme.policy, period)
        if missing:  # how many, never which: a per-device export's name is a unit id
            return dg.SkipReason(
                f"{programme.policy.name} {period.label}: {len(missing)} of the policy's trace file paths match no "
                "file yet; not released"
            )
        try:
            stages.refuse_if_published(
                settings.context(programme.policy, period), settings.ledger(), Path(settings.releases_dir)
            )
        except stages.AlreadyPublished as published:
            return dg.SkipReason(str(published))
        add_partition(context.instance, programme, period)
        return dg.RunRequest(
            run_key=f"{programme.prefix}-{period.label}", partition_key=period.label, tags={PERIOD_TAG: period.label}
        )

    return _schedule


def is_candidate_run(run: dg.DagsterRun, programme: Programme, release_job_name: str) -> bool:
    """A run that built a candidate of the programme: its release job, or a run of the implicit asset job
    ("Materialize all", a backfill, a selection from the asset graph) that materialised its risk assessment,
    the candidate's last asset."""
    return run.job_name == release_job_name or programme.key("risk_assessment") in (run.asset_selection or ())


def publish_sensor(programme: Programme, release_job, publish_job: dg.JobDefinition) -> dg.SensorDefinition:
    release_job_name = programme.name("release_job")

    @dg.run_status_sensor(
        name=programme.name("publish_sensor"),
        run_status=dg.DagsterRunStatus.SUCCESS,
        request_job=publish_job,
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=5,  # the gap between a candidate's success and its publication
        description=f"Publishes each {programme.policy.name} candidate whose run succeeded (every blocking check "
        "passed), for the same partition: a run of its release job, or of Materialize all or a backfill that "
        "materialised its risk assessment. The publish job re-evaluates every guarantee under the ledger lock.",
    )
    def _sensor(context: dg.RunStatusSensorContext):
        run = context.dagster_run
        if not is_candidate_run(run, programme, release_job_name):
            return dg.SkipReason(f"run {run.run_id} of {run.job_name} built no {programme.policy.name} candidate")
        key = run.tags.get("dagster/partition")
        if key is None:
            return dg.SkipReason(f"run {run.run_id} has no partition")
        return dg.RunRequest(
            run_key=f"publish-{run.run_id}",
            partition_key=key,
            tags={CANDIDATE_TAG: run.run_id, PERIOD_TAG: run.tags.get(PERIOD_TAG) or period_of(key).label},
        )

    return _sensor
