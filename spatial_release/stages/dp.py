"""The protection stage under `protection.method: dp` (`spatial_release.dp`), its guarantees, and the
population's privacy accounting read by the risk stage. Under DP the k floor and the LP audit are replaced by
the mechanism's guarantee: every published figure is the output of one calibrated OpenDP measurement over the
contribution-bounded membership, post-processed."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pandas as pd

from spatial_release.counting.buckets import cut_buckets as cut_rung_buckets
from spatial_release.counting.buckets import rung_parents
from spatial_release.counting.engines import Engine
from spatial_release.dp import DpParams, Sensitivity, bound_contributions, calibrate, consistent_ladder, ladder_counts
from spatial_release.dp import release_counts as dp_release
from spatial_release.dp.accounting import advantage_bound, approx_epsilon, compose
from spatial_release.dp.bounding import bound_contributions_on, typed_like
from spatial_release.dp.frontier import Configuration, DpFrontierRow, evaluate, shown_and_error
from spatial_release.dp.mechanism import Calibration
from spatial_release.fileio import sha256_file
from spatial_release.ledger.entries import ReleaseEntry
from spatial_release.levels import LEAF, rung_of
from spatial_release.policy import DpProtection, Policy
from spatial_release.progress import Progress, ProgressEvent, log_progress
from spatial_release.release import RELEASE_FILES, release_tables, write_tables
from spatial_release.risk import BLOCK, PUBLISH
from spatial_release.stages.coarsen import public_frontier
from spatial_release.stages.context import ReleaseContext
from spatial_release.stages.count import read_true_counts
from spatial_release.stages.results import ProtectionManifest, ProtectionSummary, RiskAssessment
from spatial_release.suppression.ladder import buckets_at_rungs
from spatial_release.suppression.primary import ProtectedTable

GUARANTEE = (
    "differential privacy: every published figure (cells and margins) is the output of one OpenDP thresholded "
    "measurement over the contribution-bounded counts, then post-processed; the k floor and the "
    "suppression audit do not apply and are replaced by this guarantee"
)
MEMBERSHIP = "membership.internal.parquet"


def dp_spec(policy: Policy) -> DpProtection:
    if not isinstance(policy.protection, DpProtection):
        raise ValueError(f"{policy.path}: protection.method is {policy.protection.method!r}, not 'dp'")
    return policy.protection


def dp_params(policy: Policy) -> DpParams:
    spec = dp_spec(policy)
    return DpParams(spec.accounting, spec.delta, spec.max_buckets, spec.max_areas, epsilon=spec.epsilon, rho=spec.rho)


def chain_parents(ctx: ReleaseContext) -> list[tuple[str, Callable[[str], str]]]:
    """The main geometry's levels above the cells with the map from each level's areas to their parents."""
    chain = ctx.structure.chains[0]
    return list(zip(chain.levels[1:-1], chain.parent_of[:-1]))


def policy_sensitivity(ctx: ReleaseContext, rungs: int | None = None) -> Sensitivity:
    """The bounded sensitivity of the policy's figures over its time rungs (all of them by default: the
    policy's bucket and every rung of its time ladder)."""
    params = dp_params(ctx.policy)
    count = len(ctx.policy.time.ladder) if rungs is None else rungs
    return Sensitivity.of(ctx.structure.chains[0].levels, params.max_buckets, params.max_areas, rungs=count)


def policy_calibration(ctx: ReleaseContext) -> Calibration:
    """The mechanism the policy calls for, calibrated by OpenDP's map (deterministic in the policy)."""
    return calibrate(dp_params(ctx.policy), policy_sensitivity(ctx))


def ladder_accounting(ctx: ReleaseContext, calibration: Calibration) -> dict | None:
    """What publishing the time ladder's rungs costs: the loss OpenDP's map gives the calibrated mechanism on
    one rung's figures, the rungs' losses composed by OpenDP, and the loss of the one measurement over every
    rung (never above the composition). None without a ladder."""
    rungs = ctx.policy.time.ladder
    if not rungs:
        return None
    one = calibration.measurement().map(policy_sensitivity(ctx, rungs=0).d_in())
    per_rung = (float(one[0]), float(one[1]))
    return {
        "rungs": [ctx.policy.time.bucket, *rungs],
        "per_rung_loss": list(per_rung),
        "composed_loss": list(compose([per_rung] * (1 + len(rungs)), calibration.params.accounting)),
        "loss": list(calibration.spent()),
        "statement": (
            f"the policy's bucket and {len(rungs)} coarser rung(s) are counted from the same bounded rows: a unit "
            f"moves at most {policy_sensitivity(ctx, rungs=0).l0} figures of each rung, "
            f"{calibration.sensitivity.l0} in all; one OpenDP measurement over every rung's figures is "
            "calibrated at that sensitivity, so its loss is at most the rungs' losses composed"
        ),
    }


def dp_counts(ctx: ReleaseContext, bounded: pd.DataFrame) -> pd.DataFrame:
    """The bounded counts of every figure the release may publish: the policy's bucket and each rung of its time
    ladder, without the buckets cut by the period's edges (a key means one whole bucket)."""
    parents = chain_parents(ctx)
    links = ctx.structure.time_links if ctx.policy.time.ladder else ()
    return without_cut(ctx, ladder_counts(bounded, parents, buckets_at_rungs(links)))


def cut_buckets(ctx: ReleaseContext) -> dict[str | None, set[pd.Timestamp]]:
    """Per time rung (None: the policy's bucket), its buckets cut by the period's edges (never published)."""
    links = ctx.structure.time_links if ctx.policy.time.ladder else ()
    cut: dict[str | None, set[pd.Timestamp]] = {None: {pd.Timestamp(b) for b in ctx.structure.cut}}
    cut.update({link.coarse: {pd.Timestamp(b) for b in link.cut} for link in links})
    return cut


def without_cut(ctx: ReleaseContext, counts: pd.DataFrame) -> pd.DataFrame:
    """`counts` (level, area_id, bucket_start, n) without the figures of buckets cut by the period's edges."""
    cut = cut_buckets(ctx)
    starts = pd.to_datetime(counts["bucket_start"], utc=True)
    keep = [start not in cut.get(rung_of(level), ()) for level, start in zip(counts["level"], starts)]
    return counts[keep].reset_index(drop=True)


def dp_frontier(ctx: ReleaseContext, membership: pd.DataFrame, published: pd.DataFrame, seed: int) -> list[DpFrontierRow]:
    """The policy's configuration (as published) and each of `protection.compare`, at the policy's loss: their
    parameters and, internal, their share of the non-empty cell figures shown and median relative error."""
    spec, bucket = dp_spec(ctx.policy), ctx.policy.time.bucket
    parents, levels = chain_parents(ctx), ctx.structure.chains[0].levels
    links = ctx.structure.time_links if ctx.policy.time.ladder else ()
    at_rungs = buckets_at_rungs(links)
    truth = without_cut(ctx, ladder_counts(membership, parents, at_rungs))
    cut = cut_buckets(ctx)
    own = Configuration(None, spec.max_buckets, spec.max_areas).name(bucket) + (
        f" with rungs {list(ctx.policy.time.ladder)}" if links else ""
    )
    rows = [DpFrontierRow.measured(own, policy_calibration(ctx), **shown_and_error(published, truth), published=True)]
    for option in spec.compare:
        configuration = Configuration(option.rung, option.max_buckets, option.max_areas)
        coarse_of, rung_cut = _rung_buckets(ctx, option.rung) if option.rung else (None, cut[None])
        row = evaluate(
            membership,
            configuration,
            coarse_of,
            parents,
            levels,
            dp_params(ctx.policy),
            ctx.policy.measure,
            seed,
            cut=rung_cut,
            name=configuration.name(bucket),
        )
        rows.append(row)
    return rows


def _rung_buckets(ctx: ReleaseContext, rung: str) -> tuple[dict[pd.Timestamp, pd.Timestamp], set[pd.Timestamp]]:
    """The bucket of `rung` (any rung nesting the policy's bucket, in its ladder or not) holding each of the
    policy's buckets, and the rung's buckets cut by the period's edges."""
    parents = rung_parents(ctx.policy, ctx.period, None, rung)
    coarse_of = {pd.Timestamp(fine): pd.Timestamp(coarse) for fine, coarse in parents.items()}
    return coarse_of, {pd.Timestamp(b) for b in cut_rung_buckets(ctx.policy, ctx.period, rung)}


def dp_consistent(ctx: ReleaseContext, noisy: pd.DataFrame) -> pd.DataFrame:
    links = ctx.structure.time_links if ctx.policy.time.ladder else ()
    steps = [(link.coarse, link.parent_map()) for link in links]
    return consistent_ladder(noisy, chain_parents(ctx), ctx.policy.measure, steps)


def _published_frames(published: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    cells = published[published["level"] == LEAF].rename(columns={"area_id": "cell_id"})
    margins = published[published["level"] != LEAF]
    return (
        cells[["cell_id", "bucket_start", "n"]].reset_index(drop=True),
        margins[["level", "area_id", "bucket_start", "n"]].reset_index(drop=True),
    )


def _unpublished(truth: pd.DataFrame, shown: pd.DataFrame, key: list[str]) -> pd.DataFrame:
    merged = truth.merge(shown[key], on=key, how="left", indicator=True)
    return merged[merged["_merge"] == "left_only"].drop(columns="_merge").assign(reason="unselected")


def bounded_membership(ctx: ReleaseContext, membership: pd.DataFrame, seed: int, engine: Engine | None) -> pd.DataFrame:
    """The membership after contribution bounding: on the counting engine when one is given (the same SQL on
    DuckDB or Spark keeps the same rows for the same seed, so a Spark deployment does not bring the
    membership into one process to bound it), else on an in-process DuckDB over `membership`."""
    spec = dp_spec(ctx.policy)
    if engine is None:
        return bound_contributions(membership, spec.max_buckets, spec.max_areas, seed)
    engine.register_parquet("dp_membership", [ctx.area.counts / MEMBERSHIP])
    kept = bound_contributions_on(engine, "dp_membership", spec.max_buckets, spec.max_areas, seed)
    return typed_like(kept, membership)


def run_protect_dp(
    ctx: ReleaseContext, progress: Progress = log_progress, engine: Engine | None = None
) -> ProtectionSummary:
    """Bound each unit's contribution (on `engine`, the counting engine, when given), run the calibrated
    measurement on every figure's bounded count, make the noisy figures consistent, and write the candidate
    files with the manifest (which records the mechanism, never a noise draw)."""
    policy, area = ctx.policy, ctx.area
    spec = dp_spec(policy)
    calibration = policy_calibration(ctx)
    seed = spec.seed if isinstance(spec.seed, int) else secrets.randbits(63)
    membership = pd.read_parquet(area.counts / MEMBERSHIP, columns=["unit", "bucket_start", "cell_id"])
    counts = dp_counts(ctx, bounded_membership(ctx, membership, seed, engine))
    # how many keys the data holds is a fact about unselected keys too: the log names the mechanism only
    progress(ProgressEvent("dp", f"dp: bounded counts offered to OpenDP {calibration.describe()['mechanism']}"))
    noisy = dp_release(counts, calibration).counts
    published = dp_consistent(ctx, noisy)
    cells, margins = _published_frames(published)
    true_cells, true_margins = read_true_counts(area)
    protected = ProtectedTable(
        cells,
        margins,
        _unpublished(true_cells, cells, ["cell_id", "bucket_start"]),
        _unpublished(true_margins, margins, ["level", "area_id", "bucket_start"]),
        0,
    )
    tables = release_tables(protected.cells, protected.margins, ctx.locator.geometries, policy.count_column)
    write_tables(tables, area.candidate)
    protected.withheld_cells.to_parquet(area.candidate / "withheld_cells.internal.parquet", index=False)
    by_level = {str(k): int(v) for k, v in published["level"].value_counts().sort_index().items()}
    summary = ProtectionSummary(
        **protected.summary(true_cells),
        by_level={level: {"primary": 0, "secondary": 0, "units_withheld": 0} for level in by_level},
        suppression={"method": "dp"},
        crs=tables.cells.crs.to_string(),
        published_by_level=by_level,
        frontier=dp_frontier(ctx, membership, published, seed),
        privacy={
            **calibration.describe(),
            "bounding_seed": "policy" if isinstance(spec.seed, int) else "random",
            "post_processing": "monotone bottom-up repair to non-negative integers consistent with the margins"
            + (" and with the finer rungs of the time ladder" if policy.time.ladder else ""),
            **({"time_ladder": ladder_accounting(ctx, calibration)} if policy.time.ladder else {}),
            "guarantee": GUARANTEE,
        },
    )
    ProtectionManifest(
        summary, {n: sha256_file(area.candidate / n) for n in RELEASE_FILES}, method=method_sentence(calibration)
    ).write(area.candidate)
    return summary


def method_sentence(calibration: Calibration) -> str:
    d = calibration.describe()
    return (
        f"differential privacy ({d['accounting']}): contribution bounding to {d['max_buckets']} bucket(s) per unit "
        f"and {d['max_areas']} cell(s) per bucket, OpenDP {d['mechanism']} (partition selection and noise), "
        "consistent post-processing"
    )


def _privacy_of(entry: ReleaseEntry) -> Mapping[str, Any] | None:
    return entry.privacy


def privacy_spent(policy: Policy, entries: Iterable[ReleaseEntry]) -> tuple[float, float]:
    """What the population's published releases spent, composed by OpenDP. A release of the population
    without a DP loss (k-anonymity) spent no DP budget, though it bounds nothing either; a release under the
    other accounting cannot be composed with this one and is refused."""
    spec = dp_spec(policy)
    losses = []
    for entry in entries:
        privacy = _privacy_of(entry)
        if not privacy:
            continue
        if privacy.get("accounting") != spec.accounting:
            raise ValueError(
                f"{entry.dataset} {entry.period} spent the population's budget under {privacy.get('accounting')!r} "
                f"accounting; this policy accounts under {spec.accounting!r}: they do not compose here"
            )
        losses.append((float(privacy["loss"][0]), float(privacy["loss"][1])))
    return compose(losses, spec.accounting)


def budget_decision(policy: Policy, entries: list[ReleaseEntry]) -> dict:
    """Spent before, spent with this release and what is left of the population's budget."""
    spec = dp_spec(policy)
    before = privacy_spent(policy, entries)
    with_this = compose([before, spec.loss] if before != (0.0, 0.0) else [spec.loss], spec.accounting)
    budget = spec.budget_loss
    over = with_this[0] > budget[0] * (1 + 1e-9) or with_this[1] > budget[1] * (1 + 1e-9)
    name = "epsilon" if spec.accounting == "approx" else "rho"
    return {
        "accounting": spec.accounting,
        "measure": name,
        "loss": list(spec.loss),
        "budget": list(budget),
        "spent_before": list(before),
        "spent_with": list(with_this),
        "left": [max(0.0, budget[0] - with_this[0]), max(0.0, budget[1] - with_this[1])],
        "over": over,
        "releases_before": [f"{e.dataset} {e.period}" for e in entries if _privacy_of(e)],
    }


def privacy_assessment(ctx: ReleaseContext, earlier: list[ReleaseEntry]) -> RiskAssessment:
    """The risk stage under DP: the population's privacy budget gates, and the release's risk figure is the
    membership advantage its loss allows (so a k-anonymous programme of the same population counts it)."""
    started = time.perf_counter()
    policy, spec = ctx.policy, dp_spec(ctx.policy)
    decision = budget_decision(policy, earlier)
    epsilon, delta = approx_epsilon(spec.loss, spec.accounting)
    figure = advantage_bound(epsilon, delta)
    name = decision["measure"]
    reason = (
        f"privacy budget: {name} {decision['spent_with'][0]:.4g} (delta {decision['spent_with'][1]:.3g}) of "
        f"{decision['budget'][0]:.4g} (delta {decision['budget'][1]:.3g}) spent with this release; "
        f"{decision['left'][0]:.4g} left"
    )
    if decision["over"]:
        reason = f"PrivacyBudgetExceeded: {reason}: the release would exceed the population's budget"
    return RiskAssessment(
        status=BLOCK if decision["over"] else PUBLISH,
        reason=reason,
        worst_zone=None,
        release_figure=figure,
        pooled=None,
        cumulative=None,
        headroom=None,
        measure="dp_advantage_bound",
        adversary="any (differential privacy)",
        landscape_sha256="",
        points=0,
        window_periods=[e.period for e in earlier] + [ctx.period.label],
        model="dp",
        privacy=decision,
        previous=[],
        panel="",
        landscape_version=0,
        units=0,
        keys=0,
        zones=[],
        seconds=round(time.perf_counter() - started, 2),
        frontier=public_frontier(ProtectionManifest.read(ctx.area.candidate).summary.frontier),
    )
