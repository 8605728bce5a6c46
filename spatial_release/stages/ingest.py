"""The ingest stage: trace files (or the policy's synthetic traces) into validated pings and a quarantine."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from spatial_release.fileio import sha256_file
from spatial_release.progress import Progress, log_progress
from spatial_release.stages.context import ReleaseContext, WorkArea
from spatial_release.stages.results import IngestSummary
from spatial_release.traces.ingest import ingest_traces, resolve_trace_paths
from spatial_release.traces.synthetic import SyntheticConfig, generate_pings, write_pings


def synthetic_traces(ctx: ReleaseContext) -> list[Path]:
    """Generate the policy's synthetic traces for the period (demo policies only)."""
    policy, period = ctx.policy, ctx.period
    spec = policy.source.synthetic
    if spec is None:
        raise ValueError(f"{policy.path}: no trace files given and the policy has no 'source.synthetic' section")
    days = (period.end - period.start).days
    config = SyntheticConfig(persons=spec.persons, seed=spec.seed, start=period.start, days=days)
    suffix = ".csv" if spec.file_format == "csv" else ".parquet"
    return [write_pings(generate_pings(config), ctx.area.traces / f"pings-{period.label}{suffix}")]


def file_digests(files: Sequence[Path]) -> list[str]:
    """Each input file's sha256, in path order."""
    return [sha256_file(Path(f)) for f in sorted(files, key=str)]


def inputs_digest(digests: Sequence[str]) -> str:
    """One sha256 over the files' own digests: the release names its inputs by content, not by name."""
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()


def run_ingest(ctx: ReleaseContext, traces: Sequence[str | Path] = (), progress: Progress = log_progress) -> IngestSummary:
    """Read the trace files (default: the policy's source.paths, else its synthetic traces) into
    ingest/pings.parquet and ingest/quarantine.parquet; writes and returns the ingest summary."""
    policy, area = ctx.policy, ctx.area
    files = resolve_trace_paths(policy, traces, ctx.period) if (traces or policy.source.paths) else synthetic_traces(ctx)
    result = ingest_traces(policy, ctx.period, files, area.ingest, progress)
    digests = file_digests(files)
    limit = policy.source.max_rejected_share
    summary = IngestSummary(
        files=list(result.files),
        input_columns=list(result.input_columns),
        rows_read=result.rows_read,
        pings_read=result.pings_read,
        pings_valid=result.pings_valid,
        pings_rejected=result.pings_rejected,
        rejected_share=result.rejected_share,
        rejected_by_reason=result.rejected_by_reason,
        max_rejected_share=limit,
        rejected_share_problem=result.rejected_share_problem(limit),
        quarantine=str(result.quarantine_path),
        valid_by_file=result.valid_by_file,
        inputs_sha256=inputs_digest(digests),
        input_digests=sorted(set(digests)),
    )
    summary.write(area.ingest)
    return summary


def read_ingest_summary(area: WorkArea) -> IngestSummary:
    return IngestSummary.read(area.ingest)
