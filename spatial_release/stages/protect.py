"""The protection stage: primary and complementary suppression of the true counts into the candidate
release files (candidate/cells.parquet, candidate/margins.parquet) and their internal manifest."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from spatial_release.fileio import sha256_file
from spatial_release.levels import LEAF
from spatial_release.progress import Progress, log_progress
from spatial_release.release import RELEASE_FILES, release_tables, write_tables
from spatial_release.stages.context import ReleaseContext, WorkArea
from spatial_release.stages.count import read_true_counts
from spatial_release.stages.results import ProtectionManifest, ProtectionSummary
from spatial_release.suppression.certificate import EARLIER, Certificate, earlier_digest
from spatial_release.suppression.primary import ProtectedTable
from spatial_release.suppression.release_system import protect_release

CERTIFICATE = "audit_certificate"  # folder of the work area (internal: per-unit-derived, never published)


def certificate_dir(area: WorkArea) -> Path:
    return area.root / CERTIFICATE


def certificate_inputs(ctx: ReleaseContext, earlier: Sequence[tuple[pd.DataFrame, pd.DataFrame]] = ()
                       ) -> dict[str, str]:
    """The sha256 of every input the audit certificate certifies: the true counts, the candidate files,
    the policy, the disclosure spec and the earlier releases the audit sees (none at protection)."""
    area = ctx.area
    return {"counts/cell_counts.parquet": sha256_file(area.counts / "cell_counts.parquet"),
            "counts/margin_counts.parquet": sha256_file(area.counts / "margin_counts.parquet"),
            **{f"candidate/{n}": sha256_file(area.candidate / n) for n in RELEASE_FILES},
            "policy": ctx.policy.sha256, "disclosure_spec": ctx.disclosure.digest(),
            EARLIER: earlier_digest(earlier)}


def withheld_by_level(protected: ProtectedTable) -> dict[str, dict[str, int]]:
    """Primaries, secondaries and withheld units per level (cells and every margin level)."""
    out = {}
    frames = [protected.withheld_cells.assign(level=LEAF), protected.withheld_margins]
    withheld = pd.concat(frames, ignore_index=True)
    for level, group in withheld.groupby("level"):
        out[level] = {"primary": int((group["reason"] == "primary").sum()),
                      "secondary": int((group["reason"] == "secondary").sum()),
                      "units_withheld": int(group["n"].sum())}
    return out


def run_protect(ctx: ReleaseContext, progress: Progress = log_progress) -> ProtectionSummary:
    """Suppress the true counts (k, complements over the release structure, structural zeros) and write the
    candidate files, the withheld cells (internal), the manifest the checks verify the files against, and
    the audit certificate (`suppression.certificate`) that lets the check and the publish step verify the
    audit instead of solving it again."""
    policy, area = ctx.policy, ctx.area
    shutil.rmtree(certificate_dir(area), ignore_errors=True)  # never a certificate of an earlier candidate
    true_cells, true_margins = read_true_counts(area)
    protected, log, table = protect_release(true_cells, true_margins, ctx.disclosure, progress=progress)
    tables = release_tables(protected, ctx.locator, policy.count_column)
    write_tables(tables, area.candidate)
    protected.withheld_cells.to_parquet(area.candidate / "withheld_cells.internal.parquet", index=False)
    summary = ProtectionSummary(
        **protected.summary(true_cells), by_level=withheld_by_level(protected),
        suppression={"sweep_secondaries": log.sweep_secondaries, "repair_secondaries": log.repair_secondaries,
                     "repair_rounds": log.rounds, "audit": log.audit.summary()},
        crs=tables.cells.crs.to_string())
    ProtectionManifest(summary, {n: sha256_file(area.candidate / n) for n in RELEASE_FILES}).write(area.candidate)
    Certificate.build(table, log.audit, certificate_inputs(ctx)).write(certificate_dir(area))
    return summary


def read_manifest(area: WorkArea) -> ProtectionManifest:
    return ProtectionManifest.read(area.candidate)
