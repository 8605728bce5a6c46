"""The release chain, built once per release cadence (quarterly, and monthly for policies that say so):
validated_pings -> cell_counts -> protected_table -> risk_assessment -> published_release.

Each asset writes its own files in the work area (returning nothing to an IO manager), so checks read
exactly the files that will be published. The published release is downstream of every blocking check.
"""

from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from spatial_release import stages
from spatial_release.defs.partitions import period_of
from spatial_release.defs.release.checks import build_checks
from spatial_release.defs.release.reports import k_anonymity_report, risk_report
from spatial_release.defs.resources import CountingEngine, ReleaseSettings


def _run_is_live(instance: dg.DagsterInstance, run_id: str) -> bool | None:
    """Whether the instance knows `run_id` as still running; None when it does not know the run (another
    process's ephemeral instance)."""
    run = instance.get_run_by_id(run_id)
    return None if run is None else not run.is_finished


@dataclass(frozen=True)
class ReleaseGraph:
    assets: list
    checks: list
    job: object  # the unresolved asset job of define_asset_job


def build_release_graph(partitions_def: dg.PartitionsDefinition, prefix: str | None, job_name: str) -> ReleaseGraph:
    group = "release" if prefix is None else f"release_{prefix}"
    key_prefix = [prefix] if prefix else None

    def setup(context: dg.AssetExecutionContext, settings: ReleaseSettings) -> stages.ReleaseContext:
        """The step's release context; building it refuses a period of the other cadence (the monthly job
        refuses a quarterly policy, and vice versa)."""
        return settings.context(settings.load_policy(), period_of(context.partition_key, partitions_def))

    def hold(context: dg.AssetExecutionContext, settings: ReleaseSettings, ctx: stages.ReleaseContext,
             starts_run: bool = False, check_ledger: bool = True):
        """Hold the work area for this step (stages.work_area_step): a period the ledger records is refused
        before anything is written, and a step of a run that no longer owns the area stops."""
        published = settings.published() if check_ledger else None
        run_id = context.run.root_run_id or context.run.run_id  # a re-execution keeps its first run's claim
        return stages.work_area_step(ctx, published, run_id, starts_run,
                                     lambda other: _run_is_live(context.instance, other))

    common = {"partitions_def": partitions_def, "group_name": group, "key_prefix": key_prefix}

    @dg.asset(name="validated_pings", kinds={"duckdb"}, **common,
              description="Raw trace files mapped by the policy and validated; rejected pings are quarantined.")
    def validated_pings(context: dg.AssetExecutionContext, settings: ReleaseSettings) -> dg.MaterializeResult:
        ctx = setup(context, settings)
        policy = ctx.policy
        context.log.info(f"ingesting {policy.name} {ctx.period.label} into {ctx.area.ingest}")
        with hold(context, settings, ctx, starts_run=True):
            summary = stages.run_ingest(ctx, settings.traces, progress=context.log.info)
        context.log.info(f"{summary.pings_valid} valid pings, {summary.pings_rejected} quarantined")
        return dg.MaterializeResult(metadata={
            "dagster/row_count": summary.pings_valid,
            "rows_read": summary.rows_read,
            "pings_rejected": summary.pings_rejected,
            "rejected_share": summary.rejected_share,
            "rejected_by_reason": dg.MetadataValue.json(summary.rejected_by_reason),
            "files": dg.MetadataValue.json(summary.files),
            "quarantine": dg.MetadataValue.path(summary.quarantine),
            "policy": f"{policy.name} v{policy.version}",
        })

    @dg.asset(name="cell_counts", deps=[validated_pings], kinds={"duckdb"}, **common,
              description="Distinct units per (cell, bucket) and per margin, before any suppression (internal).")
    def cell_counts(context: dg.AssetExecutionContext, settings: ReleaseSettings,
                    counting: CountingEngine) -> dg.MaterializeResult:
        ctx = setup(context, settings)
        with hold(context, settings, ctx), counting.open(ctx.area) as engine:
            summary = stages.run_counts(ctx, engine, progress=context.log.info)
        # The number of groups and of units counted are facts about withheld cells (finding 12 of issue 9):
        # they stay in counts.json, in the owner-only work area, out of the event log and metadata.
        summary_file = ctx.area.counts / stages.CountsSummary.FILE
        context.log.info(f"counted; figures in {summary_file} (internal)")
        return dg.MaterializeResult(metadata={
            "counts_summary": dg.MetadataValue.path(str(summary_file)),
            "pings_outside_geometry": summary.pings_outside_geometry,
            "measure": ctx.policy.measure, "unit": ctx.policy.unit, "engine": summary.engine,
            "engine_settings": dg.MetadataValue.json(summary.engine_settings),
            "unsure_coordinates": summary.unsure_coordinates,
            "assignment": dg.MetadataValue.json(summary.assignment),
            "seconds": dg.MetadataValue.json(summary.seconds),
        })

    @dg.asset(name="protected_table", deps=[cell_counts], **common,
              description="The candidate release after primary and complementary suppression.")
    def protected_table(context: dg.AssetExecutionContext, settings: ReleaseSettings) -> dg.MaterializeResult:
        ctx = setup(context, settings)
        policy = ctx.policy
        with hold(context, settings, ctx):
            counts = stages.run_protect(ctx, progress=context.log.info).public_counts()
        return dg.MaterializeResult(metadata={
            "dagster/row_count": counts.published_cells + counts.structural_zero_cells_published,
            "k_anonymity_report": dg.MetadataValue.md(k_anonymity_report(counts, policy.k)),
            "smallest_published_count": counts.smallest_published_count,
            "internal_summary": dg.MetadataValue.path(str(ctx.area.candidate / stages.ProtectionManifest.FILE)),
            "policy": f"{policy.name} v{policy.version}",
        })

    @dg.asset(name="risk_assessment", deps=[protected_table], **common,
              description="Per-zone re-identification risk of the candidate with the ledger's earlier releases.")
    def risk_assessment(context: dg.AssetExecutionContext, settings: ReleaseSettings) -> dg.MaterializeResult:
        ctx = setup(context, settings)
        with hold(context, settings, ctx):
            risk = stages.run_risk(ctx, settings.ledger())
        return dg.MaterializeResult(metadata={
            "risk_report": dg.MetadataValue.md(risk_report(risk)),
            "status": risk.status, "worst_zone": str(risk.worst_zone),
            "release_figure": risk.release_figure, "pooled": risk.pooled,
            "cumulative": risk.cumulative, "landscape_sha256": risk.landscape_sha256,
        })

    @dg.asset(name="published_release", deps=[protected_table, risk_assessment], **common,
              description="The published release folder (cells.parquet, margins.parquet, release.json) and "
                          "its ledger entry.")
    def published_release(context: dg.AssetExecutionContext, settings: ReleaseSettings) -> dg.MaterializeResult:
        ctx = setup(context, settings)
        policy = ctx.policy
        try:
            with hold(context, settings, ctx, check_ledger=False):  # run_publish checks, locked
                target, record = stages.run_publish(ctx, Path(settings.releases_dir), settings.ledger())
        except stages.GuaranteeFailed as failed:
            raise dg.Failure(description=str(failed), metadata={"offending": failed.outcome.offending},
                             allow_retries=False) from None
        except FileExistsError as exists:
            raise dg.Failure(description=str(exists), allow_retries=False) from None
        return dg.MaterializeResult(metadata={
            "release_record": dg.MetadataValue.path(str(target / stages.ReleaseRecord.FILE)),
            "release_dir": dg.MetadataValue.path(str(target)),
            "k_anonymity_report": dg.MetadataValue.md(k_anonymity_report(record.counts, policy.k)),
            "published_cells": record.counts.published_cells,
            "smallest_published_count": record.counts.smallest_published_count,
            "risk_worst_zone": str(record.risk.worst_zone),
            "risk_release_figure": record.risk.release_figure,
            "risk_cumulative": record.risk.cumulative,
            "ledger_entry": record.ledger_entry,
            "policy": f"{policy.name} v{policy.version}",
            "policy_sha256": policy.sha256,
        })

    assets = [validated_pings, cell_counts, protected_table, risk_assessment, published_release]
    checks = build_checks(partitions_def, validated_pings, cell_counts, protected_table, risk_assessment, published_release)
    job = dg.define_asset_job(job_name, selection=dg.AssetSelection.groups(group),
                              description="Ingest, count, protect, assess and publish one period; blocking "
                                          "checks stop a bad release.")
    return ReleaseGraph(assets, checks, job)
