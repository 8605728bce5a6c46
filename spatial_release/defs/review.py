"""The risk review: re-assess every published release when the ledger or the landscape changes.

A sensor watches the number of release entries in the ledger and the landscape file's hash (review
entries are not watched, or the review would trigger itself); the quarterly schedule runs it too. A release
now over its ceiling fails the review's check and writes an alert record (stages.run_review).
"""

import json
from pathlib import Path

import dagster as dg

from spatial_release import stages
from spatial_release.defs.outcomes import check_result
from spatial_release.defs.resources import ReleaseSettings
from spatial_release.period import Period
from spatial_release.policy import Policy


@dg.asset(group_name="review", description="Every published release re-assessed under the current landscape.")
def risk_review(context: dg.AssetExecutionContext, settings: ReleaseSettings) -> dg.MaterializeResult:
    policy = settings.load_policy()
    done = stages.run_review(policy, settings.ledger(), Path(settings.work_dir), Path(settings.alerts_dir))
    review = done.review
    report_release_checks(context, policy, review)
    for breach in review.breaches:
        row = breach.release
        context.log.warning(f"{policy.name} {row.period} is over its risk budget: zone "
                            f"{row.worst_zone} at {row.release_figure}, cumulative {row.cumulative}")
    return dg.MaterializeResult(metadata={
        "releases_reviewed": len(review.releases), "cumulative": review.cumulative,
        "breaches": dg.MetadataValue.json([b.to_json() for b in review.breaches]),
        "alerts": dg.MetadataValue.json(done.alerts),
        "review": dg.MetadataValue.json([r.to_json() for r in review.releases]), "ledger_entry": review.ledger_entry,
        "per_unit_data_pruned": dg.MetadataValue.json(done.pruned),
    })


def report_release_checks(context: dg.AssetExecutionContext, policy: Policy, review: stages.Review) -> None:
    """Record the review's verdict as the `within_risk_budget` check of each published release's
    partition, so a release that is now over budget shows failed on that release in the UI."""
    key = dg.AssetKey(["monthly", "published_release"] if policy.period == "month" else ["published_release"])
    for row in (r for r in review.releases if r.dataset == policy.name):  # not other programmes' releases
        outcome = stages.review_outcome(review, row.period)
        context.log_event(dg.AssetCheckEvaluation(
            asset_key=key, check_name=stages.REVIEW_CHECK, passed=outcome.passed, description=outcome.summary,
            partition=Period.parse(row.period).partition_key, severity=dg.AssetCheckSeverity.ERROR,
            metadata={"cumulative": row.cumulative, "release_figure": row.release_figure,
                      "landscape_sha256": review.landscape_sha256}))


@dg.asset_check(asset=risk_review, name="published_within_budget",
                description="Every published release is still under its ceilings under the current landscape.")
def published_within_budget(context: dg.AssetCheckExecutionContext, settings: ReleaseSettings) -> dg.AssetCheckResult:
    review = stages.latest_review(Path(settings.work_dir), settings.load_policy().name)
    return check_result(stages.programme_outcome(review))


risk_review_job = dg.define_asset_job("risk_review_job", selection=dg.AssetSelection.assets(risk_review),
                                      description="Re-assess every published release under the current landscape.")


@dg.sensor(job=risk_review_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Starts a risk review when a release is added to the ledger or the landscape file changes.")
def risk_review_sensor(context: dg.SensorEvaluationContext, settings: ReleaseSettings) -> dg.SensorResult:
    current = stages.review_trigger(settings.load_policy(), settings.ledger())
    previous = json.loads(context.cursor) if context.cursor else None
    if current == previous:
        return dg.SensorResult(skip_reason="ledger releases and landscape unchanged")
    if current["releases"] == 0:
        return dg.SensorResult(skip_reason="no published release to review yet", cursor=json.dumps(current))
    run_key = f"review-{current['dataset']}-{current['releases']}-{current['landscape'][:12]}"
    return dg.SensorResult(run_requests=[dg.RunRequest(run_key=run_key, tags={"reason": "ledger or landscape changed"})],
                           cursor=json.dumps(current))


quarterly_review_schedule = dg.ScheduleDefinition(
    name="quarterly_risk_review_schedule", job=risk_review_job, cron_schedule="0 6 1 1,4,7,10 *",
    execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.RUNNING)


defs = dg.Definitions(assets=[risk_review], asset_checks=[published_within_budget], jobs=[risk_review_job],
                      schedules=[quarterly_review_schedule], sensors=[risk_review_sensor])
