"""The release chain: validated_pings -> cell_counts -> protected_table -> published_release.

Each asset writes its own files in the work area (returning nothing to an IO manager), so checks read
exactly the files that will be published. The published release is downstream of every blocking check.
"""


from pathlib import Path

import dagster as dg

from spatial_release import stages
from spatial_release.defs.partitions import period_of, quarterly
from spatial_release.defs.resources import ReleaseSettings

GROUP = "release"


def _context(context: dg.AssetExecutionContext, settings: ReleaseSettings):
    policy = settings.load_policy()
    period = period_of(context.partition_key)
    return policy, period, settings.work_area(policy, period)


@dg.asset(partitions_def=quarterly, group_name=GROUP, kinds={"duckdb"},
          description="Raw trace files mapped by the policy and validated; rejected pings are quarantined.")
def validated_pings(context: dg.AssetExecutionContext, settings: ReleaseSettings) -> dg.MaterializeResult:
    policy, period, area = _context(context, settings)
    context.log.info(f"ingesting {policy.name} {period.label} into {area.ingest}")
    summary = stages.run_ingest(policy, period, area, settings.traces)
    context.log.info(f"{summary['pings_valid']} valid pings, {summary['pings_rejected']} quarantined")
    return dg.MaterializeResult(metadata={
        "dagster/row_count": summary["pings_valid"],
        "rows_read": summary["rows_read"],
        "pings_rejected": summary["pings_rejected"],
        "rejected_share": summary["rejected_share"],
        "rejected_by_reason": dg.MetadataValue.json(summary["rejected_by_reason"]),
        "files": dg.MetadataValue.json(summary["files"]),
        "quarantine": dg.MetadataValue.path(summary["quarantine"]),
        "policy": f"{policy.name} v{policy.version}",
    })


@dg.asset(partitions_def=quarterly, group_name=GROUP, deps=[validated_pings], kinds={"duckdb"},
          description="Distinct units per (cell, bucket) and per margin, before any suppression (internal).")
def cell_counts(context: dg.AssetExecutionContext, settings: ReleaseSettings) -> dg.MaterializeResult:
    policy, _, area = _context(context, settings)
    summary = stages.run_counts(policy, area)
    return dg.MaterializeResult(metadata={
        "dagster/row_count": summary["groups"],
        "units": summary["units"],
        "pings_outside_geometry": summary["pings_outside_geometry"],
        "measure": policy.measure,
        "unit": policy.unit,
    })


def k_anonymity_report(summary: dict, k: int) -> str:
    rows = [
        ("k (inclusive: n >= k published)", k),
        ("groups (cell x bucket) before suppression", summary["groups"]),
        ("smallest count before suppression", summary["smallest_count_before"]),
        ("smallest published count", summary["smallest_published_count"]),
        ("groups below k (withheld, primary)", summary["primary_cells"]),
        ("unit counts in groups below k", summary["unit_counts_withheld"]),
        ("share of unit counts withheld", f"{summary['share_withheld']:.2%}"),
        ("published cells (non-zero)", summary["published_cells"]),
        ("structural zeros published", summary["structural_zero_cells_published"]),
        ("margins published / withheld", f"{summary['published_margins']} / {summary['withheld_margins']}"),
    ]
    return "| measure | value |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)


@dg.asset(partitions_def=quarterly, group_name=GROUP, deps=[cell_counts],
          description="The candidate release after primary suppression; the blocking checks guard it.")
def protected_table(context: dg.AssetExecutionContext, settings: ReleaseSettings) -> dg.MaterializeResult:
    policy, period, area = _context(context, settings)
    summary = stages.run_protect(policy, period, area)
    return dg.MaterializeResult(metadata={
        "dagster/row_count": summary["published_cells"] + summary["structural_zero_cells_published"],
        "k_anonymity_report": dg.MetadataValue.md(k_anonymity_report(summary, policy.k)),
        "groups": summary["groups"],
        "smallest_count_before": summary["smallest_count_before"],
        "smallest_published_count": summary["smallest_published_count"],
        "groups_below_k": summary["primary_cells"],
        "units_below_k": summary["unit_counts_withheld"],
        "cells_withheld": summary["primary_cells"] + summary["secondary_cells"],
        "policy": f"{policy.name} v{policy.version}",
    })


@dg.asset(partitions_def=quarterly, group_name=GROUP, deps=[protected_table],
          description="The published release folder: cells.parquet, margins.parquet, release.json.")
def published_release(context: dg.AssetExecutionContext, settings: ReleaseSettings) -> dg.MaterializeResult:
    policy, period, area = _context(context, settings)
    try:
        target, record = stages.run_publish(policy, period, area, Path(settings.releases_dir))
    except stages.GuaranteeFailed as failed:
        raise dg.Failure(description=str(failed), metadata={"offending": failed.outcome.offending},
                         allow_retries=False) from None
    counts = record["counts"]
    return dg.MaterializeResult(metadata={
        "release_record": dg.MetadataValue.path(str(target / "release.json")),
        "release_dir": dg.MetadataValue.path(str(target)),
        "k_anonymity_report": dg.MetadataValue.md(k_anonymity_report(counts, policy.k)),
        "published_cells": counts["published_cells"],
        "cells_withheld": counts["primary_cells"] + counts["secondary_cells"],
        "smallest_published_count": counts["smallest_published_count"],
        "policy": f"{policy.name} v{policy.version}",
        "policy_sha256": policy.sha256,
    })
