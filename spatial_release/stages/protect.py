"""The protection stage: primary and complementary suppression of the true counts into the candidate
release files (candidate/cells.parquet, candidate/margins.parquet) and their internal manifest."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import pandas as pd

from spatial_release.counting.engines import Engine
from spatial_release.fileio import sha256_file
from spatial_release.history import population_releases
from spatial_release.levels import LEAF, RUNG_SEP, rung_of
from spatial_release.memory import collector_paused
from spatial_release.period import Period
from spatial_release.progress import Progress, ProgressEvent, log_progress
from spatial_release.release import RELEASE_FILES, published_frames, read_tables, release_tables, write_tables
from spatial_release.stages import coarsen
from spatial_release.stages.context import CandidateTables, Published, ReleaseContext, WorkArea
from spatial_release.stages.count import read_true_counts
from spatial_release.stages.dp import run_protect_dp
from spatial_release.stages.results import ProtectionManifest, ProtectionSummary
from spatial_release.suppression.certificate import EARLIER, Certificate, earlier_digest
from spatial_release.suppression.primary import ProtectedTable
from spatial_release.suppression.release_system import Structure, protect_release
from spatial_release.suppression.utility import utility_report

CERTIFICATE = "audit_certificate"  # folder of the work area (internal: per-unit-derived, never published)


def certificate_dir(area: WorkArea) -> Path:
    return area.root / CERTIFICATE


def certificate_inputs(ctx: ReleaseContext, earlier: Sequence[tuple[pd.DataFrame, pd.DataFrame]] = ()) -> dict[str, str]:
    """The sha256 of every input the audit certificate certifies: the true counts, the candidate files,
    the policy, the disclosure spec and the earlier releases the audit sees (none at protection)."""
    area = ctx.area
    return {
        "counts/cell_counts.parquet": sha256_file(area.counts / "cell_counts.parquet"),
        "counts/margin_counts.parquet": sha256_file(area.counts / "margin_counts.parquet"),
        **{f"candidate/{n}": sha256_file(area.candidate / n) for n in RELEASE_FILES},
        "policy": ctx.policy.sha256,
        "disclosure_spec": ctx.disclosure.digest(),
        EARLIER: earlier_digest(earlier),
    }


def withheld_by_level(protected: ProtectedTable) -> dict[str, dict[str, int]]:
    """Primaries, secondaries and withheld units per level (cells and every margin level)."""
    out = {}
    frames = [protected.withheld_cells.assign(level=LEAF), protected.withheld_margins]
    withheld = pd.concat(frames, ignore_index=True)
    for level, group in withheld.groupby("level"):
        out[level] = {
            "primary": int((group["reason"] == "primary").sum()),
            "secondary": int((group["reason"] == "secondary").sum()),
            "units_withheld": int(group["n"].sum()),
        }
    return out


def published_by_level(protected: ProtectedTable) -> dict[str, int]:
    """How many figures each level publishes (cells with a unit, then every margin level)."""
    counts = {LEAF: int((protected.cells["n"] > 0).sum())}
    counts.update({str(k): int(v) for k, v in protected.margins["level"].value_counts().sort_index().items()})
    return counts


def release_utility(
    ctx: ReleaseContext,
    true_cells: pd.DataFrame,
    true_margins: pd.DataFrame,
    protected: ProtectedTable,
    progress: Progress = log_progress,
) -> dict:
    """The utility report of the candidate and, with a time ladder, of the single-level release of the policy's
    bucket at the same k (the baseline a user compares with: protected here on the same true counts).

    The baseline is a release of its own, so it takes a protection of its own, once per protection step and
    outside the coarsening loop. No figure of the candidate's protection gives it: with the ladder's coarser
    figures offered, complementary suppression chooses other complements at the policy's bucket, and a bound
    (the figures at or over k) would overstate what a single-level release shows."""
    structure, k = ctx.structure, ctx.policy.k
    base_chains = [c for c in structure.chains if RUNG_SEP not in c.levels[0]]
    report = utility_report(
        true_cells, true_margins, protected.cells, protected.margins, base_chains, structure.time_links, k
    )
    if structure.time_links:
        progress(
            ProgressEvent("utility", "utility: protecting the single-level release of the policy's bucket as the baseline")
        )
        base_margins = true_margins[~true_margins["level"].str.contains(RUNG_SEP, regex=False)]
        spec = replace(ctx.disclosure, structure=Structure(tuple(base_chains), structure.identities))
        baseline, _, _ = protect_release(true_cells, base_margins, spec)
        report["baseline"] = utility_report(true_cells, base_margins, baseline.cells, baseline.margins, base_chains, (), k)
    report["headline"] = {
        zoning: {
            "shown_at_leaf": z["shown_at_leaf"],
            "baseline": report.get("baseline", report)["zonings"][zoning]["shown_at_leaf"],
        }
        for zoning, z in report["zonings"].items()
    }
    return report


def withheld_by_population(
    ctx: ReleaseContext, published: Published | None, true_cells: pd.DataFrame, true_margins: pd.DataFrame
) -> frozenset[tuple[str, str, int]]:
    """The keys (level, area, bucket in ns) of this release's non-empty figures that an earlier release of the
    policy's population could have shown but did not: a level it publishes, a bucket its files name at that
    level's time rung, and not among its figures (withheld or empty there: the public cannot tell). A later
    release must not publish them (`release_system.force_withheld`), so two programmes of one population
    agree figure by figure (a key is published with one value by either, or by neither) and a figure one
    withheld never completes the other's equations. The same dataset and period is no earlier release."""
    if published is None:
        return frozenset()
    mine = _keys(true_cells.assign(level=LEAF, area_id=true_cells["cell_id"]), true_margins)
    forced: set[tuple[str, str, int]] = set()
    for entry in population_releases(ctx.policy, published.ledger, ctx.input_digests()):
        if entry.key == (ctx.policy.name, ctx.period.label):
            continue
        other = Period.parse(entry.period)
        if not (other.start < ctx.period.end and ctx.period.start < other.end):
            continue
        folder = published.releases_root / entry.dataset / entry.period
        tables = read_tables(folder, geometry=False)
        theirs = _keys(tables.cells.assign(level=LEAF, area_id=tables.cells["cell_id"]), tables.margins)
        shown = set(zip(theirs["level"], theirs["area_id"], theirs["bucket"]))
        # the levels it publishes, those of which it withheld every figure too (its record lists them at 0: a
        # quarter whose risk gate showed every ward by the week withheld all its ward-days)
        levels = set(theirs["level"]) | set(_levels_of_record(folder))
        buckets = theirs.groupby(theirs["level"].map(rung_of).fillna(""))["bucket"].agg(set).to_dict()
        could = mine[mine["level"].isin(levels)]
        could = could[[b in buckets.get(rung_of(level) or "", ()) for level, b in zip(could["level"], could["bucket"])]]
        forced |= set(zip(could["level"], could["area_id"], could["bucket"])) - shown
    return frozenset(forced)


def _levels_of_record(folder: Path) -> list[str]:
    """The levels a published release's record counts figures of (`counts.published_by_level`)."""
    try:
        counts = json.loads((folder / "release.json").read_text()).get("counts") or {}
    except (OSError, ValueError):
        return []
    return list(counts.get("published_by_level") or {})


def _keys(cells: pd.DataFrame, margins: pd.DataFrame) -> pd.DataFrame:
    frame = pd.concat(
        [cells[["level", "area_id", "bucket_start"]], margins[["level", "area_id", "bucket_start"]]], ignore_index=True
    )
    frame["bucket"] = pd.DatetimeIndex(pd.to_datetime(frame["bucket_start"], utc=True)).as_unit("ns").asi8
    return frame


@collector_paused()
def run_protect(
    ctx: ReleaseContext,
    progress: Progress = log_progress,
    published: Published | None = None,
    engine: Engine | None = None,
    written: Callable[[], None] | None = None,
) -> ProtectionSummary:
    """Suppress the true counts (k, complements over the release structure, structural zeros) and write the
    candidate files, the withheld cells (internal), the manifest the checks verify the files against, and
    the audit certificate (`suppression.certificate`) that lets the check and the publish step verify the
    audit instead of solving it again. `engine`: the counting engine, which bounds the units' contributions
    under differential privacy (None: an in-process DuckDB). `written`: called once the candidate files are
    written, before the certificate and the summary (what may start beside them: `stages.start_estimate_beside`,
    wired by the Dagster step, since a stage never calls a later one)."""
    policy, area = ctx.policy, ctx.area
    shutil.rmtree(certificate_dir(area), ignore_errors=True)  # never a certificate of an earlier candidate
    if policy.protection.method == "dp":
        return run_protect_dp(ctx, progress, engine)
    true_cells, true_margins = read_true_counts(area)
    population = withheld_by_population(ctx, published, true_cells, true_margins)
    climbing = coarsen.applies(ctx, published)
    climb, frontier, ladder = coarsen.Climb(), [], list(policy.time.ladder)
    cells_by_zone = coarsen.zone_cells(ctx, true_cells["cell_id"]) if climbing else {}
    zones = sorted(cells_by_zone)
    areas_by_zone = coarsen.zone_areas(ctx, true_cells["cell_id"]) if climbing else None
    # the attack gate of the climbing loop: (ceiling, adversary, public population per zone), when it climbs
    gate = (
        (coarsen.effective_ceiling(ctx, published), *coarsen.gate_adversary(ctx))
        if climbing and published is not None
        else None
    )
    # Each configuration the loop tries is held in memory (`ReleaseContext.hold_candidate`) and assessed there;
    # only the last one is written, once. The loop's last assessment and the key sets it coded are kept under
    # the candidate's digest, which the files written below give again to the risk and publish steps.
    try:
        while True:
            withhold = population | climb.keys(cells_by_zone, true_cells, true_margins, ladder, areas_by_zone)
            protected, log, table = protect_release(
                true_cells, true_margins, ctx.disclosure, progress=progress, withhold=frozenset(withhold)
            )
            if gate is None:  # not climbing
                break
            held = CandidateTables(
                *published_frames(protected.cells, protected.margins, policy.count_column), policy.count_column
            )
            ctx.hold_candidate(held)
            ceiling, adversary, population_of_zone = gate
            over = coarsen.zones_over(
                ctx,
                ceiling,
                adversary,
                population_of_zone,
                kept=lambda over: not over or not coarsen.can_climb(climb, zones, ladder),
                progress=progress,
            )
            frontier.append(coarsen.frontier_row(climb, ladder, len(held.cells), len(held.margins), over, ceiling))
            if not over or not coarsen.climb_zones(climb, over, zones, ladder, progress):
                break
    finally:
        ctx.hold_candidate(None)
    tables = release_tables(protected.cells, protected.margins, ctx.locator.geometries, policy.count_column)
    write_tables(tables, area.candidate)
    protected.withheld_cells.to_parquet(area.candidate / "withheld_cells.internal.parquet", index=False)
    if written is not None:
        written()
    audit = log.audit
    if audit is None:  # every protection audits its pattern: the record states that audit, never a guess
        raise RuntimeError("the protection log does not record the audit of the candidate")
    summary = ProtectionSummary(
        **protected.summary(true_cells),
        by_level=withheld_by_level(protected),
        suppression={
            "sweep_secondaries": log.sweep_secondaries,
            "repair_secondaries": log.repair_secondaries,
            "repair_rounds": log.rounds,
            "audit": audit.summary().to_json(),
        },
        crs=tables.cells.crs.to_string(),
        published_by_level=published_by_level(protected),
        ladder=table.ladder or None,
        utility=release_utility(ctx, true_cells, true_margins, protected, progress),
        frontier=frontier or None,
    )
    if log.method is None:  # the record states the method that ran, never a guess
        raise RuntimeError("the protection log does not record the method that protected the candidate")
    ProtectionManifest(
        summary, {n: sha256_file(area.candidate / n) for n in RELEASE_FILES}, method=log.method.describe()
    ).write(area.candidate)
    Certificate.build(table, audit, certificate_inputs(ctx)).write(certificate_dir(area))
    return summary


def read_manifest(area: WorkArea) -> ProtectionManifest:
    return ProtectionManifest.read(area.candidate)
