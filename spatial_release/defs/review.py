"""The risk review of one programme: re-assess every published release when the ledger or the landscape
changes.

A sensor watches the number of release entries in the ledger and the landscape file's hash (review
entries are not watched, or the review would trigger itself); a quarterly schedule runs it too. A release
now over its ceiling fails its own `within_risk_budget` check (red on that release's partition), fails the
review's blocking `published_within_budget` check (so the review run is a failure in the runs overview),
and is delivered as an alert (stages.run_review).
"""

import json
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from spatial_release import stages
from spatial_release.defs.check_results import check_result
from spatial_release.defs.programmes import Programme
from spatial_release.defs.release.reports import ledger_entry_shown, review_report
from spatial_release.defs.resources import ReleaseSettings
from spatial_release.guarantees import CheckOutcome
from spatial_release.history import population_releases
from spatial_release.policy import Policy
from spatial_release.risk.landscape import load_landscape


@dataclass(frozen=True)
class ReviewGraph:
    asset: dg.AssetsDefinition
    check: dg.AssetChecksDefinition
    job: object
    schedule: dg.ScheduleDefinition
    sensor: dg.SensorDefinition


def build_review(programme: Programme) -> ReviewGraph:
    risk_review = _risk_review_asset(programme)
    published_within_budget = _published_within_budget_check(programme, risk_review)
    job, schedule, sensor = _review_job_and_triggers(programme, risk_review)
    return ReviewGraph(risk_review, published_within_budget, job, schedule, sensor)


def _risk_review_asset(programme: Programme) -> dg.AssetsDefinition:
    @dg.asset(
        name="risk_review",
        key_prefix=[programme.prefix],
        group_name=programme.prefix,
        owners=programme.owners,
        kinds={"python"},
        tags={"dataset": programme.prefix},
        description=f"{programme.policy.name}: every published release re-assessed under the current landscape and ledger.",
    )
    def risk_review(context: dg.AssetExecutionContext, settings: ReleaseSettings) -> dg.MaterializeResult:
        policy = programme.load()
        if not population_releases(policy, settings.ledger()):
            # "Materialize all" and the quarterly schedule run it before anything is published: a review of
            # nothing would still be a ledger entry, recorded ahead of the first release.
            context.log.info(f"{policy.name}: no release of population {policy.population_key} yet; nothing reviewed")
            return dg.MaterializeResult(metadata=_nothing_to_review(policy))
        done = stages.run_review(
            policy, settings.ledger(), Path(settings.work_dir), Path(settings.alerts_dir), run_id=context.run.run_id
        )
        report_release_checks(context, programme, done.review)
        _log_breaches(context, policy, done)
        return dg.MaterializeResult(metadata=_review_metadata(policy, done))

    return risk_review


def _nothing_to_review(policy: Policy) -> dict:
    return {
        "releases_reviewed": 0,
        "breaches_found": 0,
        "review_report": dg.MetadataValue.md(
            f"Nothing to review: the ledger holds no release of population {policy.population_key}. "
            "No review was recorded and no ledger entry written."
        ),
    }


def _log_breaches(context: dg.AssetExecutionContext, policy: Policy, done: stages.ReviewRun) -> None:
    """One warning per release the review found over budget, with the alert delivered for it."""
    for breach, delivery in zip(done.review.breaches, done.deliveries):
        row = breach.release
        context.log.warning(
            f"{policy.name} {row.period} is over its risk budget: zone {row.worst_zone} at "
            f"{row.release_figure:.4g}, cumulative {row.cumulative:.4g}; alert "
            f"{delivery.summary()}"
        )


def _rounded(row: dict) -> dict:
    """A review row with its figures at 4 significant digits, as the report shows them (exact in the work area)."""
    return {k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in row.items()}


def _review_metadata(policy: Policy, done: stages.ReviewRun) -> dict:
    """The risk_review materialization's metadata: the counts, the programme's cumulative figure and the details."""
    review = done.review
    return {
        "releases_reviewed": len(review.releases),
        "breaches_found": len(review.breaches),
        f"risk_{review_adversary(policy)}_cumulative": float(f"{review.cumulative:.4g}"),
        "breaches": dg.MetadataValue.json([b.public_json() for b in review.breaches]),
        "alerts": dg.MetadataValue.json([d.to_json() for d in done.deliveries]),
        "review_report": dg.MetadataValue.md(review_report(review, policy.risk, review_adversary(policy))),
        "review": dg.MetadataValue.json([_rounded(r.to_json()) for r in review.releases]),
        "ledger_entry": ledger_entry_shown(review.ledger_entry),
        "per_unit_data_pruned": dg.MetadataValue.json(done.pruned),
        **(_privacy_metadata(review.privacy) if review.privacy is not None else {}),
    }


def _privacy_metadata(privacy: dict) -> dict:
    """A DP programme's privacy budget: spent and left (epsilon or rho, and delta)."""
    name = "epsilon" if privacy["accounting"] == "approx" else "rho"
    return {
        f"privacy_{name}_spent": float(f"{privacy['spent'][0]:.4g}"),
        f"privacy_{name}_left": float(f"{privacy['left'][0]:.4g}"),
        "privacy_delta_spent": float(f"{privacy['spent'][1]:.3g}"),
        "privacy_delta_left": float(f"{privacy['left'][1]:.3g}"),
    }


def _published_within_budget_check(programme: Programme, risk_review: dg.AssetsDefinition) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=risk_review,
        name="published_within_budget",
        blocking=True,
        description="Every published release of the programme is still under both ceilings under the "
        "current landscape; a breach fails the review run and names the release.",
    )
    def published_within_budget(context: dg.AssetCheckExecutionContext, settings: ReleaseSettings) -> dg.AssetCheckResult:
        review = stages.latest_review(Path(settings.work_dir), programme.policy.name)
        if review is None and not population_releases(programme.policy, settings.ledger()):
            return check_result(CheckOutcome("published_within_budget", True, "nothing published yet: nothing to review"))
        assert review is not None, "the risk_review asset writes its review before this check runs"
        return check_result(stages.programme_outcome(review))

    return published_within_budget


def _review_job_and_triggers(
    programme: Programme, risk_review: dg.AssetsDefinition
) -> tuple[object, dg.ScheduleDefinition, dg.SensorDefinition]:
    """The review job with the sensor and the quarterly schedule that start it. Built together because
    define_asset_job's job type is not public, so the job is not passed to a typed function."""
    name = programme.policy.name
    job = dg.define_asset_job(
        programme.name("risk_review_job"),
        selection=dg.AssetSelection.assets(risk_review),
        tags=programme.tags(),
        description=f"{name}: re-assess every published release under the current landscape.",
    )

    @dg.sensor(
        name=programme.name("risk_review_sensor"),
        job=job,
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Starts a {name} risk review when a release of its population is added to the ledger "
        "or the landscape file changes.",
    )
    def risk_review_sensor(context: dg.SensorEvaluationContext, settings: ReleaseSettings) -> dg.SensorResult:
        return _review_sensor_result(programme, context, settings)

    schedule = dg.ScheduleDefinition(
        name=programme.name("risk_review_schedule"),
        job=job,
        cron_schedule="0 6 1 1,4,7,10 *",
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"Re-assesses every published {name} release each quarter (06:00 UTC on the first day), even "
        "when nothing changed, so a slow drift of the landscape is caught.",
    )
    return job, schedule, risk_review_sensor


def _review_sensor_result(
    programme: Programme, context: dg.SensorEvaluationContext, settings: ReleaseSettings
) -> dg.SensorResult:
    """A review run when the ledger's releases or the landscape changed since the cursor's evaluation."""
    current = stages.review_trigger(programme.load(), settings.ledger())
    previous = json.loads(context.cursor) if context.cursor else None
    if current == previous:
        return dg.SensorResult(skip_reason="ledger releases and landscape unchanged")
    if current["releases"] == 0:
        return dg.SensorResult(skip_reason="no published release to review yet", cursor=json.dumps(current))
    run_key = f"review-{current['dataset']}-{current['releases']}-{current['landscape'][:12]}"
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=run_key, tags={"reason": "ledger or landscape changed"})],
        cursor=json.dumps(current),
    )


def review_adversary(policy: Policy) -> str:
    """The adversary the programme's landscape assumes, which labels the review's figures."""
    if policy.risk is None:
        return "gated"
    landscape, _ = load_landscape(policy.resolve(policy.risk.landscape))
    return landscape.adversary


def report_release_checks(context: dg.AssetExecutionContext, programme: Programme, review: stages.Review) -> None:
    """Record the review's verdict as the `within_risk_budget` check of each published release's
    partition, so a release that is now over budget shows failed on that release in the UI."""
    key = programme.key("published_release")
    for row in (r for r in review.releases if r.dataset == programme.policy.name):  # not other programmes'
        outcome = stages.review_outcome(review, row.period)
        context.log_event(
            dg.AssetCheckEvaluation(
                asset_key=key,
                check_name=stages.REVIEW_CHECK,
                passed=outcome.passed,
                description=outcome.summary,
                partition=row.period,  # partition keys are period labels
                severity=dg.AssetCheckSeverity.ERROR,
                metadata={
                    "cumulative": float(f"{row.cumulative:.4g}"),
                    "release_figure": row.release_figure,
                    "summary": outcome.summary,
                    "landscape_sha256": review.landscape_sha256,
                },
            )
        )
