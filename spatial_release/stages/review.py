"""The risk review: every published release re-assessed under the current landscape, recorded in the
ledger and the work folder, with an alert per breach; and the retention of per-unit data.

The review's files are `<work>/<dataset>/reviews/review-<ledger seq>.json`; the latest one says whether a
published release is still within its budget (`review_outcome`).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from spatial_release.alerts import Alert, AlertRouting, DeliveryReport, Place, deliver
from spatial_release.guarantees import CheckOutcome
from spatial_release.history import expired, population_releases, spent_figures
from spatial_release.ledger import Ledger, ReleaseEntry, ReviewEntry
from spatial_release.period import Period
from spatial_release.policy import Policy
from spatial_release.risk import cumulative_risk
from spatial_release.risk.landscape import landscape_hash, load_landscape
from spatial_release.stages.carried import refuse_changed_work_files
from spatial_release.stages.context import ReleaseContext, WorkArea, risk_spec
from spatial_release.stages.dp import dp_spec, privacy_spent
from spatial_release.stages.results import Breach, Review, ReviewedRelease
from spatial_release.stages.risk import assess_risk

REVIEW_CHECK = "within_risk_budget"


def _remove(path: Path) -> bool:
    if path.is_dir():
        shutil.rmtree(path)
        return True
    if path.exists():
        path.unlink()
        return True
    return False


def prune_per_unit_artefacts(policy: Policy, ledger: Ledger, work_root: Path, now: datetime | None = None) -> list[str]:
    """Delete every per-unit artefact (WorkArea.per_unit_artefacts) of the releases older than the policy's
    `risk.key_retention_days` (its default without a risk section); returns their periods. Such releases keep
    counting in the cumulative figure (from the ledger) but no longer in the per-unit window of later estimates."""
    now = now or datetime.now(UTC)
    pruned = []
    for entry in ledger.releases(policy.name):
        if not expired(policy, entry, now):
            continue
        area = WorkArea.for_release(work_root, policy, Period.parse(entry.period))
        removed = [_remove(path) for path in area.per_unit_artefacts()]
        if any(removed):
            pruned.append(entry.period)
    return pruned


def _as_published(entry: ReleaseEntry, figures: list[float]) -> ReviewedRelease:
    """A release counted with its published figure (another programme's, or past its retention)."""
    figures.extend(spent_figures([entry]))
    return ReviewedRelease(entry.dataset, entry.period, entry.seq, False, entry.release_figure, cumulative_risk(figures))


def review_programme(policy: Policy, ledger: Ledger, work_root: Path) -> Review:
    """Re-assess every published release of the dataset, in ledger order, under the current landscape.

    Release i is assessed with its own key sets and those of the releases before it in the window, as
    when it was published; the cumulative figure is recomputed from the new figures. A release now over the
    per-release ceiling, or that pushes the cumulative figure over the programme ceiling, is a breach."""
    releases = population_releases(policy, ledger)
    if policy.protection.method == "dp":
        return privacy_review(policy, releases)
    spec = risk_spec(policy)
    reviewed: list[ReviewedRelease] = []
    figures: list[float] = []
    breaches: list[Breach] = []
    for i, entry in enumerate(releases):
        if entry.dataset != policy.name:
            # another programme over the same units: its published figure spends this budget too
            reviewed.append(_as_published(entry, figures))
            continue
        ctx = ReleaseContext(policy, Period.parse(entry.period), work_root)
        if not ctx.area.unit_keys.exists():
            if not expired(policy, entry, datetime.now(UTC)):
                raise FileNotFoundError(
                    f"{ctx.area.unit_keys}: key sets of {entry.period} are missing within their retention; cannot review it"
                )
            reviewed.append(_as_published(entry, figures))  # past retention: the published figure stands
            continue
        refuse_changed_work_files([(ctx.area, entry)])  # its own files; the window's key sets: the risk step
        window = releases[:i][-spec.window :] if spec.window else releases[:i]
        risk = assess_risk(ctx, ledger, ctx.area.unit_keys, window)
        figure = risk.release_figure
        figures.append(figure if figure is not None else float("nan"))
        cumulative = cumulative_risk(figures)
        row = ReviewedRelease(
            policy.name,
            entry.period,
            entry.seq,
            True,
            figure,
            cumulative,
            risk.worst_zone,
            entry.release_figure,
            risk.pooled,
        )
        reviewed.append(row)
        if figure is None or figure > spec.per_release_ceiling or cumulative > spec.cumulative_ceiling:
            breaches.append(Breach(row, spec.per_release_ceiling, spec.cumulative_ceiling, risk.worst_zone_figures()))
    landscape_sha = load_landscape(policy.resolve(spec.landscape))[1]
    return Review(policy.name, landscape_sha, reviewed, cumulative_risk(figures) if figures else 0.0, breaches)


def privacy_review(policy: Policy, releases: list[ReleaseEntry]) -> Review:
    """The review of a DP programme: a release's privacy loss does not change with the landscape, so each
    release counts with its published figure; the review states what the population has spent of its privacy
    budget and what is left, and a population over it (a budget lowered in review, or a ledger of releases
    published under other policies) is a breach of its latest release here."""
    figures: list[float] = []
    reviewed = [_as_published(entry, figures) for entry in releases]
    spent = privacy_spent(policy, releases)
    budget = dp_spec(policy).budget_loss
    over = spent[0] > budget[0] * (1 + 1e-9) or spent[1] > budget[1] * (1 + 1e-9)
    privacy = {
        "accounting": dp_spec(policy).accounting,
        "budget": list(budget),
        "spent": list(spent),
        "left": [max(0.0, budget[0] - spent[0]), max(0.0, budget[1] - spent[1])],
        "over": over,
    }
    own = [row for row in reviewed if row.dataset == policy.name]
    breaches = [Breach(own[-1], dp_spec(policy).loss[0], budget[0], [])] if over and own else []
    landscape = load_landscape(policy.resolve(policy.risk.landscape))[1] if policy.risk else ""
    return Review(policy.name, landscape, reviewed, cumulative_risk(figures) if figures else 0.0, breaches, privacy=privacy)


def review_trigger(policy: Policy, ledger: Ledger) -> dict:
    """What a review depends on, cheap to read (a sensor's cursor): the number of the dataset's release
    entries and the landscape file's hash. Review entries are not counted, or a review would trigger itself."""
    landscape = landscape_hash(policy.resolve(policy.risk.landscape)) if policy.risk else ""
    return {"dataset": policy.name, "releases": len(ledger.releases(policy.name)), "landscape": landscape}


def reviews_folder(work_root: Path, dataset: str) -> Path:
    return work_root / dataset / "reviews"


@dataclass(frozen=True)
class ReviewRun:
    """A recorded review: the review (with its ledger entry), the alert files it wrote, the periods pruned
    and what each alert's channels did."""

    review: Review
    alerts: list[str]
    pruned: list[str]
    deliveries: list[DeliveryReport] = field(default_factory=list)


def breach_alert(
    policy: Policy, breach: Breach, adversary: str | None = None, run_id: str | None = None, ui_url: str | None = None
) -> Alert:
    """The alert of a published release now over budget: check `within_risk_budget`, the worst zone as the
    offending place, the figures against the ceilings they exceed as the reason."""
    row = breach.release
    label = f"{adversary} " if adversary else ""
    if row.release_figure is None:
        why = ["no risk estimate (a missing estimate blocks)"]
    else:
        why = (
            [f"{label}release figure {row.release_figure:.4g} over the per-release ceiling {breach.per_release_ceiling:g}"]
            if row.release_figure > breach.per_release_ceiling
            else []
        )
        if row.cumulative > breach.cumulative_ceiling:
            why.append(f"cumulative {row.cumulative:.4g} over the programme ceiling {breach.cumulative_ceiling:g}")
    published = f" (published at {row.published_figure:.4g})" if row.published_figure is not None else ""
    reason = f"zone {row.worst_zone}: " if row.worst_zone else ""
    offending = [Place(row.worst_zone, policy.risk.zones if policy.risk else None)] if row.worst_zone else []
    return Alert(
        "risk_breach",
        policy.name,
        row.period,
        REVIEW_CHECK,
        reason + "; ".join(why) + published,
        tuple(offending),
        run_id=run_id,
        ui_url=ui_url,
    )


def run_review(
    policy: Policy,
    ledger: Ledger,
    work_root: Path,
    alerts_dir: Path,
    run_id: str | None = None,
    routing: AlertRouting | None = None,
) -> ReviewRun:
    """Apply the retention, review the programme, record the review in the ledger and the work folder, and
    deliver an alert per breach (its file in `alerts_dir`, then its channels: `routing`, by default the
    environment's merged with the policy's `alerts:`)."""
    pruned = prune_per_unit_artefacts(policy, ledger, work_root)
    review = review_programme(policy, ledger, work_root)
    body = ReviewEntry(
        dataset=policy.name,
        landscape_sha256=review.landscape_sha256,
        cumulative=review.cumulative,
        releases=len(review.releases),
        breaches=tuple(b.period for b in review.breaches),
    )
    entry = ledger.append(body.to_json())
    review = replace(review, ledger_entry=entry["hash"])
    review.write_to(reviews_folder(work_root, policy.name) / f"review-{entry['seq']:06d}.json")
    adversary = (
        load_landscape(policy.resolve(policy.risk.landscape))[0].adversary.value if review.breaches and policy.risk else None
    )
    routing = routing or AlertRouting.for_policy(policy)
    deliveries = [
        deliver(breach_alert(policy, breach, adversary, run_id), routing, alerts_dir) for breach in review.breaches
    ]
    return ReviewRun(review, [str(d.path) for d in deliveries if d.path], pruned, deliveries)


def latest_review(work_root: Path, dataset: str) -> Review | None:
    reviews = sorted(reviews_folder(work_root, dataset).glob("review-*.json"))
    return Review.read_from(reviews[-1]) if reviews else None


def review_outcome(review: Review | None, period_label: str) -> CheckOutcome:
    """Whether the latest risk review still finds this published release within its budget."""
    if review is None:
        return CheckOutcome(REVIEW_CHECK, True, "not reviewed yet: the release passed the risk gate when published")
    breach = review.breach_of(period_label)
    if breach is None:
        return CheckOutcome(REVIEW_CHECK, True, f"within budget under landscape {review.landscape_sha256[:12]}")
    row = breach.release
    return CheckOutcome(
        REVIEW_CHECK,
        False,
        f"over budget under landscape {review.landscape_sha256[:12]}: zone {row.worst_zone} "
        f"at {row.release_figure}, cumulative {row.cumulative:.4f}; options: withdraw, "
        "re-publish coarser, or accept in review",
        [breach.to_json()],
        {"release_figure": row.release_figure, "cumulative": row.cumulative},
    )


def programme_outcome(review: Review) -> CheckOutcome:
    """Whether every published release of the review is still within its budget."""
    breaches = review.breaches
    summary = (
        f"all {len(review.releases)} published releases within budget (cumulative {review.cumulative:.4f})"
        if not breaches
        else f"{len(breaches)} published release(s) now over budget: {[b.period for b in breaches]}"
    )
    return CheckOutcome(
        "published_within_budget", not breaches, summary, [b.to_json() for b in breaches], {"cumulative": review.cumulative}
    )
