"""The risk stage: the per-unit key sets of the candidate, the per-zone risk of this release with the
earlier releases of its window, and the gate's decision (risk/risk.json)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import duckdb
import pandas as pd
import pyarrow as pa

from spatial_release import tasks
from spatial_release.fileio import scratch_folder, sha256_file
from spatial_release.history import earlier_releases, expired, population_releases_before, spent_figures
from spatial_release.ledger import Ledger, ReleaseEntry
from spatial_release.policy import Policy, RiskSpec
from spatial_release.progress import Progress, ProgressEvent, silent
from spatial_release.release import PublicFrontier
from spatial_release.risk import BLOCK, Adversary, ZoneRisk, decide, keysets, pooled_figure, public_ratio, release_figure
from spatial_release.risk.advantage import AdvantageReport
from spatial_release.risk.estimator import KeySets, RiskParams, RiskReport, estimate_digest, estimate_key_sets
from spatial_release.risk.landscape import Landscape, load_landscape
from spatial_release.risk.ranges import KeyRanges, estimate_key_ranges, key_ranges_digest
from spatial_release.stages import attack as attack_stage
from spatial_release.stages import keys, reuse
from spatial_release.stages.advantage import candidate_advantage, read_key_sets
from spatial_release.stages.attack import attack_params, attack_pooled, with_attack_figures, worst_attack_zone
from spatial_release.stages.carried import UNIT_KEYS, refuse_changed_work_files
from spatial_release.stages.coarsen import public_frontier
from spatial_release.stages.context import Published, ReleaseContext, WorkArea, zone_population
from spatial_release.stages.count import sql_path
from spatial_release.stages.dp import privacy_assessment
from spatial_release.stages.keys import (
    AREAS,
    LINKED_MEMBERSHIP,
    coarser_keys_sql,
    keep_released_keys,
    parquet_scan,
    write_ladder_buckets,
    write_released_keys,
    write_risk_areas,
)
from spatial_release.stages.results import CoarseningProposal, ProtectionManifest, RiskAssessment, ZoneFigures

# Column names that say which adversary each per-zone figure belongs to.
ZONE_LABELS = {
    "mean": "prosecutor_mean",
    "at_risk": "prosecutor_at_risk",
    "worst": "prosecutor_worst",
    "journalist": "journalist_mean",
}

T = TypeVar("T")


def _earlier_keys(ctx: ReleaseContext, entries: list[ReleaseEntry]) -> list[Path]:
    """Per-unit key set files of this dataset's earlier releases. Releases of other programmes of the same
    population count through their published figures in the cumulative risk; their key sets are not merged,
    because their keys are cells of another geometry and buckets that the risk zones here do not map."""
    paths = []
    now = datetime.now(UTC)
    own = [e for e in entries if e.dataset == ctx.policy.name]
    refuse_changed_work_files(((ctx.area_of(e.period), e) for e in own), names={UNIT_KEYS})
    for entry in own:
        path = ctx.area_of(entry.period).unit_keys
        if path.exists():
            paths.append(path)
        elif not expired(ctx.policy, entry, now):
            raise FileNotFoundError(
                f"the per-unit key sets of release {entry.period} ({path}) are missing "
                "within their retention: the risk over the window cannot be estimated"
            )
    return paths


def window_key_sets(
    ctx: ReleaseContext,
    unit_keys: pd.DataFrame | Path | None,
    earlier: list[ReleaseEntry],
    earlier_keys: list[Path] | None = None,
    ranges_above: int | None = None,
) -> KeySets | KeyRanges:
    """The coded key sets of this release (a DataFrame, a key set file of either kind, or None: coded straight
    from the work area's memberships and candidate, `released_key_source`) and of the earlier releases of the
    window (`earlier_keys`: their key set files, when already found), built in DuckDB; in ranges of units on
    disk above `ranges_above` rows.

    Derived from the work area over that limit (or `stages.keys.CODED_UP_TO`; the rows hinted by the key set file the risk
    step kept), this release's key sets are read from (unit, key, cell_id) rows written to scratch first: over
    the limit the coded join, whose published side holds every published key once per leaf it covers, runs
    DuckDB out of its memory."""
    earlier_keys = _earlier_keys(ctx, earlier) if earlier_keys is None else earlier_keys
    selects: list[str] = []
    files: list[keysets.KeySource] = []
    for path in earlier_keys:
        _key_set_part(path, selects, files)
    frames, coded = None, None
    current = ctx.area.unit_keys if unit_keys is None else unit_keys
    rows_hint = _rows_in([*earlier_keys, *([] if isinstance(current, pd.DataFrame) else [Path(current)])])
    if rows_hint is not None and isinstance(current, pd.DataFrame):
        rows_hint += len(current)
    limit = keys.CODED_UP_TO if ranges_above is None else min(ranges_above, keys.CODED_UP_TO)
    if unit_keys is None and rows_hint is not None and rows_hint > limit:
        with scratch_folder(ctx.area.risk, "released-keys") as folder:
            path = Path(folder) / "unit_keys.parquet"
            write_released_keys(ctx.area, path, write_ladder_buckets(ctx))
            return window_key_sets(ctx, path, earlier, earlier_keys, ranges_above)
    if unit_keys is None:
        coded = [keys.released_key_source(ctx.area, write_ladder_buckets(ctx))]
    elif isinstance(unit_keys, pd.DataFrame):
        selects.insert(0, "SELECT unit, key, cell_id FROM current_keys")
        frames = {"current_keys": unit_keys}
    else:
        _key_set_part(Path(unit_keys), selects, files)
    coded = [*(coded or []), *files]
    return keysets.window_key_sets(selects, ctx.risk_zones, frames, ranges_above, coded, ctx.area.risk, rows_hint)


def _key_set_part(path: Path, selects: list[str], files: list[keysets.KeySource]) -> None:
    """Add a key set file to the window's parts: a coded one (what the risk step keeps, `keysets.write_coded`)
    as a coded part, one of (unit, key, cell_id) rows (over `stages.keys.CODED_UP_TO`, or written before the coded
    files) as a query. Either gives the same figures, in any order: the window is numbered over all parts."""
    if keysets.coded_file_counts(path) is not None:
        files.append(keysets.coded_file_source(path))
    else:
        selects.append(f"SELECT unit, key, cell_id FROM {parquet_scan(path)}")


def _rows_in(paths: list[Path]) -> int | None:
    """The (unit, key) rows of the key set files, from their Parquet metadata (no scan), or None when one is
    unreadable: the risk step has just written this release's file from the same rows it codes."""
    try:
        return sum(keysets.file_rows(path) for path in paths)
    except (OSError, ValueError, pa.ArrowException):
        return None


def labelled_zones(frame: pd.DataFrame) -> list[ZoneFigures]:
    return [ZoneFigures.from_json(z) for z in frame.rename(columns=ZONE_LABELS).to_dict("records")]


ESTIMATE, ESTIMATE_BY_INPUTS = "estimate", "estimate_by_inputs"  # the memo's names of the window's estimate


# Above this many (unit, key) rows read, the estimate holds one range of units at a time (`risk.ranges`): the
# window's key sets whole hold about 12 bytes a row while they are coded.
RANGES_ABOVE = 250_000_000


def _saved_report(memo: reuse.Memo, name: str, digest: str | None) -> RiskReport | None:
    """The estimate the memo holds as `name` under `digest`, or None (none, other inputs, or unreadable)."""
    saved = memo.load(name, digest)
    try:
        return None if saved is None else RiskReport.from_json(saved)
    except (KeyError, TypeError, ValueError):
        return None


def cached_estimate(
    memo: reuse.Memo, sets: KeySets | KeyRanges, params: RiskParams, population: dict[str, float] | None, started: float
) -> RiskReport:
    """`estimate_key_sets`, reusing the work area's last estimate when it was computed from byte-identical
    inputs by the same code (`estimate_digest`: the coded key sets, the parameters and the population;
    `reuse.digest_of` adds the code). The publish step builds the key sets again from the candidate and the
    ledger's window, so it re-estimates whenever any of them changed (another release in the window, an edited
    candidate) and otherwise reuses the risk step's estimate instead of drawing every knowledge set again.
    The decision is always taken afresh, on the ledger read under the publication's lock."""
    if isinstance(sets, KeyRanges):
        try:
            # keyed by the ranges' own digest (every range's unit-major arrays): one more reading of each
            payload = {
                "params": params.__dict__,
                "population": sorted((population or {}).items()),
                "ranges": key_ranges_digest(sets),
            }
            digest = reuse.digest_of({"risk_estimate_ranges": json.dumps(payload, sort_keys=True, default=str)})
            return _saved_or_computed(memo, digest, lambda: estimate_key_ranges(sets, params, population, started))
        finally:
            sets.close()
    digest = reuse.digest_of({"risk_estimate": estimate_digest(sets, params, population)})
    return _saved_or_computed(memo, digest, lambda: estimate_key_sets(sets, params, population, started))


def _saved_or_computed(memo: reuse.Memo, digest: str | None, compute: Callable[[], RiskReport]) -> RiskReport:
    saved = _saved_report(memo, ESTIMATE, digest)
    if saved is not None:
        return saved
    report = compute()
    memo.save(ESTIMATE, digest, report.to_json())
    return report


def window_inputs_digest(
    ctx: ReleaseContext, earlier_keys: list[Path], params: RiskParams, population: dict[str, float] | None
) -> str | None:
    """sha256 of what the window's estimate derives from when this release's key sets come from the work area
    (`released_keys_sql`): the membership, the candidate files, the policy and period (the time ladder), the
    earlier key set files, the risk zone of every cell they name (zone files shape it; no other hash covers
    them), the parameters, the population and the code (`reuse.digest_of`). Hashing the files costs a small
    fraction of building the coded key sets again."""
    area = ctx.area
    membership = area.counts / "membership.internal.parquet"
    sources = [membership, *earlier_keys]
    con = duckdb.connect()
    try:
        cells = pd.Series(
            sorted(
                {
                    row[0]
                    for path in sources
                    for row in con.execute(
                        f"SELECT DISTINCT cell_id FROM {parquet_scan(path)} WHERE cell_id IS NOT NULL"
                    ).fetchall()
                }
            ),
            dtype=object,
        )
    finally:
        con.close()
    zones = ctx.risk_zones(cells) if len(cells) else pd.Series(dtype=object)
    return reuse.digest_of(
        {
            "risk_inputs": {
                name: sha256_file(path)
                for name, path in (
                    ("membership", membership),
                    ("cells", area.candidate / "cells.parquet"),
                    ("margins", area.candidate / "margins.parquet"),
                    ("areas", area.counts / AREAS),
                    ("linked", area.counts / LINKED_MEMBERSHIP),
                )
                if path.exists()
            },
            "policy": ctx.policy.sha256,
            "period": ctx.period.label,
            "earlier": [[str(path), sha256_file(path)] for path in earlier_keys],
            "zones": [[str(c), str(z)] for c, z in zip(cells, zones.reindex(cells).to_numpy())],
            "params": params.__dict__,
            "population": sorted((population or {}).items()),
        }
    )


def estimate_window(
    ctx: ReleaseContext,
    unit_keys: pd.DataFrame | Path | None,
    earlier: list[ReleaseEntry],
    params: RiskParams,
    population: dict[str, float] | None,
    started: float,
    keys_from_area: bool = False,
    this_release: KeySets | None = None,
) -> RiskReport:
    """The estimate over this release's key sets and the earlier ones of the window. When this release's key
    sets derive from the work area (the publish step, or the risk step that has just derived them), an
    estimate saved for byte-identical source files is reused without building the key sets at all;
    otherwise the coded key sets are built and `cached_estimate` reuses or computes the estimate."""
    earlier_keys = _earlier_keys(ctx, earlier)
    inputs = None
    if unit_keys is None or keys_from_area:
        try:
            inputs = window_inputs_digest(ctx, earlier_keys, params, population)
        except (KeyError, ValueError, OSError, duckdb.Error):
            inputs = None  # the key sets' own checks below name what is wrong with the inputs
    memo = ctx.memo()
    saved = _saved_report(memo, ESTIMATE_BY_INPUTS, inputs)
    if saved is not None:
        return saved
    sets: KeySets | KeyRanges
    if this_release is not None and not earlier_keys and len(this_release.unit_keys) <= RANGES_ABOVE:
        sets = this_release  # the window is this release alone: the arrays its numbering gives, as coded
    else:
        # the file the risk step has just kept is read (coded: its codes joined to the window's numbering; rows:
        # kept so because the coded join was over its limit, so not tried again)
        current = None if keys_from_area and not isinstance(unit_keys, Path) else unit_keys
        sets = window_key_sets(ctx, current, earlier, earlier_keys, RANGES_ABOVE)
    report = cached_estimate(memo, sets, params, population, started)
    if inputs is not None:
        memo.save(ESTIMATE_BY_INPUTS, inputs, report.to_json())
    return report


def _required_risk(policy: Policy) -> RiskSpec:
    if policy.risk is None:
        raise ValueError(f"{policy.path}: no 'risk' section: a release without a risk estimate is blocked")
    return policy.risk


def assess_risk(
    ctx: ReleaseContext,
    ledger: Ledger,
    unit_keys: pd.DataFrame | Path | None = None,
    earlier: list[ReleaseEntry] | None = None,
    keys_from_area: bool = False,
    rung: str | None = None,
    this_release: KeySets | None = None,
) -> RiskAssessment:
    """Per-zone risk of this release plus the earlier ones in the window, and the gate's decision.

    unit_keys: this release's per-unit key sets (unit, key, cell_id), as a DataFrame or a key set file;
    None derives them from the work area (`keys_from_area`: the file was just derived from it, as the risk
    step does). The window's key sets are read and coded in DuckDB (memory: the units, the keys and 8 bytes
    per released (unit, key) pair, never a row per ping). Under `risk.model: attack` the attacks run on the
    candidate's cells (`rung`: on the cells at that rung of the time ladder instead, for a coarsening proposal)
    and gate; the uniqueness figure is reported beside them as the upper bound."""
    policy, period = ctx.policy, ctx.period
    if policy.protection.method == "dp":  # the population's privacy budget gates (stages.dp)
        return privacy_assessment(
            ctx, population_releases_before(policy, period, ledger, ctx.input_digests()) if earlier is None else earlier
        )
    risk = _required_risk(policy)
    landscape_path = policy.resolve(risk.landscape)
    landscape, landscape_sha = load_landscape(landscape_path)
    earlier = earlier_releases(policy, period, ledger, ctx.input_digests()) if earlier is None else earlier
    started = time.perf_counter()
    params, population = landscape.params(), zone_population(policy, landscape, landscape_path, ctx.layers)
    report = estimate_window(ctx, unit_keys, earlier, params, population, started, keys_from_area, this_release)
    # The gated figure follows the landscape's adversary (itself fixed by who is in the panel); every
    # figure of the report is labelled with the adversary it belongs to.
    adversary = Adversary(landscape.adversary)
    figures = _model_figures(
        ctx, risk.model, landscape, report, adversary, rung, unit_keys if isinstance(unit_keys, Path) else None
    )
    previous = spent_figures(earlier)
    decision = decide(
        figures.figure, figures.worst_zone, previous, risk.per_release_ceiling, risk.cumulative_ceiling, risk.warn_at
    )
    return RiskAssessment(
        status=decision.status,
        reason=f"{adversary.value} adversary, {risk.model} model: {decision.reason}",
        worst_zone=decision.worst_zone,
        release_figure=figures.figure,
        pooled=figures.pooled,
        cumulative=decision.cumulative,
        headroom=decision.headroom,
        previous=previous,
        measure=figures.measure,
        adversary=adversary.value,
        panel=landscape.panel,
        landscape_sha256=landscape_sha,
        landscape_version=landscape.version,
        points=landscape.points,
        units=report.units,
        keys=report.keys,
        window_periods=[e.period for e in earlier] + [period.label],
        zones=figures.zones,
        seconds=round(time.perf_counter() - started, 2),
        model=risk.model,
        frontier=_public_frontier(ctx),
        upper_bound=figures.bound,
        upper_bound_zone=figures.bound_zone.zone if figures.bound_zone else None,
        warning=_bound_warning(figures, risk.model, risk.per_release_ceiling),
    )


@dataclass(frozen=True)
class _ModelFigures:
    """The figures the gate reads under the policy's risk model, rounded as they are published, and the
    uniqueness figure reported beside them as the upper bound."""

    zones: list[ZoneFigures]
    worst_zone: str | None
    figure: float | None
    pooled: float | None
    measure: str
    bound: float | None
    bound_zone: ZoneRisk | None


def _model_figures(
    ctx: ReleaseContext,
    model: str,
    landscape: Landscape,
    report: RiskReport,
    adversary: Adversary,
    rung: str | None,
    key_set_file: Path | None = None,
) -> _ModelFigures:
    """Under `attack` the attacks on the candidate's cells (at `rung` of the time ladder for a coarsening
    proposal) give the figures; under `uniqueness` the estimate's worst zone does."""
    bound_zone, bound = release_figure(report, adversary)
    zones = labelled_zones(report.frame())
    if model == "advantage":
        found = candidate_advantage(ctx, landscape, key_set_file, rung)
        zones = with_advantage_figures(zones, found)
        worst = found.worst()
        return _ModelFigures(
            zones,
            worst.zone if worst else None,
            public_ratio(worst.gated()) if worst else None,
            None,  # never a mean over units or zones: padding dilutes it
            "advantage_ucb",
            public_ratio(bound),
            bound_zone,
        )
    if model == "attack":
        attack = (
            attack_stage.attack_candidate(ctx, ctx.risk_zones, attack_params(landscape))
            if rung is None
            else attack_stage.cached_attack(ctx, ctx.risk_zones, attack_params(landscape), rung, proposal=True)
        )
        zones = with_attack_figures(zones, attack, adversary)
        worst_zone, figure = worst_attack_zone(zones)
        pooled = attack_pooled(zones)
        measure = "attack_success"
    else:
        worst_zone, figure = (bound_zone.zone if bound_zone else None), bound
        pooled = pooled_figure(report, adversary)
        measure = adversary.measure
    return _ModelFigures(
        zones, worst_zone, public_ratio(figure), public_ratio(pooled), measure, public_ratio(bound), bound_zone
    )


def with_advantage_figures(zones: list[ZoneFigures], found: AdvantageReport) -> list[ZoneFigures]:
    """The zones' uniqueness figures with the advantage figures beside them. Zones with no published figure
    are one entry with their units' figures (never 0) and no unit count."""
    by_zone = {z.zone: z for z in zones}
    out = []
    for z in found.zones:
        base = by_zone.pop(z.zone, None) or ZoneFigures(z.zone, 0, 0.0, 0.0, 0.0, None, None)
        out.append(
            replace(
                base,
                targets=z.targets,
                success_without=round(z.success_without, 6),
                success_with=round(z.success_with, 6),
                advantage=round(z.advantage, 6),
                advantage_ucb=round(z.advantage_ucb, 6),
                strongest=z.strongest,
                exposed=z.exposed,
                exposed_share=None if z.exposed_share is None else round(z.exposed_share, 6),
                classifier=round(z.classifier, 6),
                boundary_units=z.boundary_units,
                complete=z.complete or z.targets == z.units,
            )
        )
    return sorted(out + list(by_zone.values()), key=lambda z: z.zone)


def _bound_warning(figures: _ModelFigures, model: str, ceiling: float) -> str | None:
    """A warning when the uniqueness upper bound is over the per-release ceiling while the attacks, which the gate
    reads, are within it."""
    bound, figure = figures.bound, figures.figure
    if (
        model in ("attack", "advantage")
        and figures.bound_zone is not None
        and bound is not None
        and bound > ceiling
        and figure is not None
        and figure <= ceiling
    ):
        return (
            f"the uniqueness upper bound (perfect trajectory recovery) of zone {figures.bound_zone.zone} is "
            f"{bound:.3f}, over the ceiling {ceiling}; "
            + (
                f"what the release adds to the attackers run on it reaches {figure:.3f}: the gate reads the advantage"
                if model == "advantage"
                else f"the attacks run on the published figures reach {figure:.3f}: the gate reads the attacks"
            )
            + f" (risk.model: {model})"
        )
    return None


def _public_frontier(ctx: ReleaseContext) -> PublicFrontier | None:
    """The public part of the configurations protection tried (`stages.coarsen`), from the candidate's manifest."""
    try:
        return public_frontier(ProtectionManifest.read(ctx.area.candidate).summary.frontier, list(ctx.policy.time.ladder))
    except (OSError, ValueError, KeyError):
        return None


def propose_coarsening(ctx: ReleaseContext, ledger: Ledger, ladder: Path) -> list[CoarseningProposal]:
    """Risk-driven coarsening, proposed: for each rung of the time ladder (finest first), the gate's figures
    for a release that would show the cells at that rung instead of the policy's bucket, estimated with the
    same landscape, window and ceilings. Applying one is a policy change in review (time.bucket), never a
    run-time switch, like lowering k or raising a ceiling."""
    proposals = []
    for rung in ctx.policy.time.ladder:
        with scratch_folder(ctx.area.risk, "risk-coarser") as spill:
            path = Path(spill) / "keys.parquet"
            con = keysets.connect(spill)
            try:
                con.execute(
                    f"COPY ({coarser_keys_sql(ctx.area, ladder, rung, ctx.policy.k)}) TO '{sql_path(path)}' (FORMAT parquet)"
                )
            finally:
                con.close()
            assessment = assess_risk(ctx, ledger, path, rung=rung)
        proposals.append(
            CoarseningProposal(
                rung, assessment.status, assessment.worst_zone, assessment.release_figure, assessment.cumulative
            )
        )
    return proposals


def _with_proposal(assessment: RiskAssessment, proposals: list[CoarseningProposal]) -> RiskAssessment:
    passing = [p for p in proposals if p.status != BLOCK]
    if passing:
        best = passing[0]
        note = (
            f"; coarsening proposed: cells at the ladder's {best.rung} rung would give "
            f"{best.release_figure:.4g} (worst zone {best.worst_zone}), within the ceilings: set "
            f"time.bucket to {best.rung} in a reviewed policy change"
        )
    else:
        note = "; no rung of the time ladder passes the gate either: coarser zones or a larger k are needed"
    return replace(assessment, reason=assessment.reason + note, coarsening=proposals)


# The estimate started beside the candidate's checks (`start_estimate_beside`), by work area: the risk step waits
# for it (`_estimate_beside_done`) instead of estimating the same again.
_beside: dict[Path, Future[bool]] = {}
_beside_lock = threading.Lock()


def start_estimate_beside(ctx: ReleaseContext, published: Published | None) -> None:
    """Start, on a thread of its own, the uniqueness estimate the risk step will ask for: `estimate_window` with
    this release's key sets as the protection loop kept them (`keys.peek_handed_over`) and the ledger's window as
    it is now. The protection step calls it once the candidate is written: what follows it until the risk step
    (the candidate's certificate, its checks) runs mostly on one core, and the estimate's counting kernels hold
    no interpreter lock (50 M pings: a 21 s risk step, the checks before it at 1.0-1.4 cores).

    The thread only fills the work area's memo. The risk step runs its own `estimate_window` after waiting for
    it, and that reuses a saved estimate only under the digest of its own inputs (the ledger read again, the
    files hashed again): a ledger or a file changed in between means estimating again, never a stale figure. An
    error here is dropped (the risk step meets it again, and raises it). Not started without the key sets this
    process kept, without a ledger, under DP, or on another runner than this machine's (a Spark estimate runs on
    the cluster, from the risk step). A run that stops at a check leaves it to end on its own: the process's exit
    waits for its counting threads, at most the estimate's time (about 20 s at 50 M pings)."""
    policy = ctx.policy
    if published is None or policy.risk is None or policy.protection.method == "dp" or tasks.current() is not None:
        return
    if not keys.holds_handed_over():
        return
    ledger = published.ledger

    def estimate() -> bool:
        sets = keys.peek_handed_over(ctx)  # checked against the files here: hashing them is not the caller's time
        if sets is None:
            return False
        risk = _required_risk(policy)
        path = policy.resolve(risk.landscape)
        landscape, _ = load_landscape(path)
        params, population = landscape.params(), zone_population(policy, landscape, path, ctx.layers)
        earlier = earlier_releases(policy, ctx.period, ledger, ctx.input_digests())
        started = time.perf_counter()
        estimate_window(ctx, ctx.area.unit_keys, earlier, params, population, started, True, sets)
        return True

    future: Future[bool] = Future()

    def run() -> None:
        try:
            done = estimate()
        except BaseException as error:  # noqa: BLE001 - dropped by `_estimate_beside_done`
            # the error only: its traceback's frames hold the key sets (1 GB at 50 M pings) for as long as the
            # future is kept, and a run stopped at a check never pops it
            error.__traceback__ = None
            future.set_exception(error)
        else:
            future.set_result(done)

    thread = threading.Thread(target=run, name="estimate-beside", daemon=True)
    try:
        thread.start()
    except RuntimeError:  # no thread to be had: the risk step estimates on its own
        return
    with _beside_lock:  # registered once running: a future nobody sets would hold the risk step for ever
        _beside[ctx.area.root] = future


def _estimate_beside_done(ctx: ReleaseContext) -> bool:
    """Wait for the estimate started beside the checks for this work area, if one was; whether it estimated and
    ended without an error (its figures are then in the memo, under the digest of what it read)."""
    with _beside_lock:
        future = _beside.pop(ctx.area.root, None)
    return future is not None and future.exception() is None and future.result()


def run_risk(ctx: ReleaseContext, ledger: Ledger, progress: Progress = silent) -> RiskAssessment:
    """Keep the candidate's per-unit key sets (internal, for later releases and reviews) and assess its risk;
    when the gate blocks a policy with a time ladder, say which rung would pass (`propose_coarsening`). Under
    `protection.method: dp` the population's privacy budget gates instead (`stages.dp.privacy_assessment`).
    `progress` hears each part as it ends, with its time: the key sets, the assessment, a proposal. No figure:
    the decision is the step's result, and the run log is no place for a figure that may never be published."""
    if ctx.policy.protection.method == "dp":
        ctx.area.risk.mkdir(parents=True, exist_ok=True)
        assessment = _timed(progress, "the population's privacy budget assessed", lambda: assess_risk(ctx, ledger))
        assessment.write(ctx.area.risk)
        return assessment
    model = _required_risk(ctx.policy).model  # before anything is coded: the key sets' zones are the policy's
    ctx.area.risk.mkdir(parents=True, exist_ok=True)
    ladder = write_ladder_buckets(ctx)
    write_risk_areas(ctx)
    this_release = keys.take_handed_over(ctx)  # coded by this process's protection step, the file unchanged since
    if this_release is not None:
        progress(ProgressEvent("risk", "risk: the key sets the protection step kept taken over from it, not read back"))
    elif keys.kept_keys_current(ctx):
        this_release = _timed(progress, "the key sets the protection step kept read back", lambda: kept_key_sets(ctx))
    else:
        kept = _timed(progress, "the release's key sets coded and kept", lambda: keep_released_keys(ctx, ladder))
        this_release = None if kept is None else kept.sets
    if _estimate_beside_done(ctx):
        progress(ProgressEvent("risk", "risk: the uniqueness estimate started beside the checks has ended"))
    assessment = _timed(
        progress,
        f"the uniqueness bound and the {model} model's figures assessed, this release with the earlier ones",
        lambda: assess_risk(ctx, ledger, ctx.area.unit_keys, keys_from_area=True, this_release=this_release),
    )
    if assessment.status == BLOCK and ladder is not None:
        proposal = _timed(progress, "a coarser rung proposed", lambda: propose_coarsening(ctx, ledger, ladder))
        assessment = _with_proposal(assessment, proposal)
    assessment.write(ctx.area.risk)
    return assessment


def _timed(progress: Progress, done: str, part: Callable[[], T]) -> T:
    """`part()`, then `risk: <done> in N s` to `progress`: the risk step runs for half a minute at 50 M pings,
    and an operator reads what it did, not only that it is still running."""
    started = time.perf_counter()
    result = part()
    seconds = time.perf_counter() - started
    progress(ProgressEvent("risk", f"risk: {done} in {seconds:.1f} s", seconds=round(seconds, 1)))
    return result


def kept_key_sets(ctx: ReleaseContext) -> KeySets | None:
    """The key sets the protection loop's last pass kept for this very candidate, read, not coded again: a coded
    file as arrays (`stages.advantage.read_key_sets`, checked against its own counts), as the coding would have
    returned them; None for a file of rows (kept so over `CODED_UP_TO`: the estimate reads it by ranges)."""
    if keysets.coded_file_counts(ctx.area.unit_keys) is None:
        return None
    return read_key_sets(ctx.area.unit_keys, ctx.risk_zones)[0]


def read_risk(area: WorkArea) -> RiskAssessment:
    return RiskAssessment.read(area.risk)
