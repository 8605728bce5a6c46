"""The protection stage: primary and complementary suppression of the true counts into the candidate
release files (candidate/cells.parquet, candidate/margins.parquet) and their internal manifest."""

from __future__ import annotations

import pandas as pd

from spatial_release.fileio import sha256_file
from spatial_release.levels import LEAF
from spatial_release.progress import Progress, log_progress
from spatial_release.release import RELEASE_FILES, release_tables, write_tables
from spatial_release.stages.context import ReleaseContext, WorkArea
from spatial_release.stages.count import read_true_counts
from spatial_release.stages.results import ProtectionManifest, ProtectionSummary
from spatial_release.suppression.primary import ProtectedTable
from spatial_release.suppression.release_system import protect_release


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
    candidate files, the withheld cells (internal) and the manifest the checks verify the files against."""
    policy, area = ctx.policy, ctx.area
    true_cells, true_margins = read_true_counts(area)
    protected, log, _ = protect_release(true_cells, true_margins, ctx.disclosure, progress=progress)
    tables = release_tables(protected, ctx.locator, policy.count_column)
    write_tables(tables, area.candidate)
    protected.withheld_cells.to_parquet(area.candidate / "withheld_cells.internal.parquet", index=False)
    summary = ProtectionSummary(
        **protected.summary(true_cells), by_level=withheld_by_level(protected),
        suppression={"sweep_secondaries": log.sweep_secondaries, "repair_secondaries": log.repair_secondaries,
                     "repair_rounds": log.rounds, "audit": log.audit.summary()},
        crs=tables.cells.crs.to_string())
    ProtectionManifest(summary, {n: sha256_file(area.candidate / n) for n in RELEASE_FILES}).write(area.candidate)
    return summary


def read_manifest(area: WorkArea) -> ProtectionManifest:
    return ProtectionManifest.read(area.candidate)
