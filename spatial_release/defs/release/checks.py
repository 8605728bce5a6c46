"""Blocking asset checks (ERROR severity). Those on protected_table and risk_assessment stand between the
candidate and the published release, so a failure stops publication. Each check reads the files itself
(no asset input) and carries the partitions, so it evaluates the run's partition only."""

import warnings
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from spatial_release import stages
from spatial_release.defs.check_results import check_result
from spatial_release.defs.partitions import period_of
from spatial_release.defs.programmes import Programme
from spatial_release.defs.resources import CountingEngine, ReleaseSettings
from spatial_release.guarantees import CheckOutcome
from spatial_release.risk import WARN

# partitions_def on asset checks is a preview feature; it was verified on the pinned dagster 1.13.27 and is
# what makes a check evaluate only its run's partition.
warnings.filterwarnings("ignore", message=".*partitions_def on an AssetCheckSpec.*")


@dataclass(frozen=True)
class _CheckScope:
    """One programme's checks: what every check's definition and evaluation share."""

    programme: Programme
    partitions_def: dg.PartitionsDefinition

    def release_context(self, context: dg.AssetCheckExecutionContext, settings: ReleaseSettings) -> stages.ReleaseContext:
        return settings.context(self.programme.load(), period_of(context.partition_key))


def _guarantee(
    scope: _CheckScope,
    protected_table: dg.AssetsDefinition,
    name: str,
    run: Callable,
    description: str,
    reports_progress: bool = False,
) -> dg.AssetChecksDefinition:
    """A guarantee on the protected table, re-derived against what is already published."""

    @dg.asset_check(
        asset=protected_table, name=name, blocking=True, partitions_def=scope.partitions_def, description=description
    )
    def _check(
        context: dg.AssetCheckExecutionContext, settings: ReleaseSettings, counting: CountingEngine
    ) -> dg.AssetCheckResult:
        extra = {"progress": context.log.info} if reports_progress else {}
        with counting.tasks() if reports_progress else nullcontext():  # the audit's components: the engine's tasks
            return check_result(run(scope.release_context(context, settings), published=settings.published(), **extra))

    return _check


def _input_check(
    scope: _CheckScope, asset: dg.AssetsDefinition, name: str, run: Callable, description: str
) -> dg.AssetChecksDefinition:
    """A check of one step's input to the release, on the release context alone."""

    @dg.asset_check(asset=asset, name=name, blocking=True, partitions_def=scope.partitions_def, description=description)
    def _check(context: dg.AssetCheckExecutionContext, settings: ReleaseSettings) -> dg.AssetCheckResult:
        return check_result(run(scope.release_context(context, settings)))

    return _check


def _input_checks(
    scope: _CheckScope, validated_pings: dg.AssetsDefinition, cell_counts: dg.AssetsDefinition
) -> list[dg.AssetChecksDefinition]:
    return [
        _input_check(
            scope,
            validated_pings,
            "rejected_share",
            stages.check_rejected_share,
            "The share of quarantined pings stays within the policy's source.max_rejected_share.",
        ),
        _input_check(
            scope,
            cell_counts,
            "outside_share",
            stages.check_outside_share,
            "The share of valid pings outside the geometry stays within source.max_outside_share; the report names "
            "the files and what looks wrong (swapped axes, a flipped sign, another region).",
        ),
    ]


def _work_files_guarantee(scope: _CheckScope, protected_table: dg.AssetsDefinition) -> dg.AssetChecksDefinition:
    """Before the risk step reads the earlier releases' key sets (under k-anonymity; a DP programme's risk step
    reads the ledger only)."""
    return _guarantee(
        scope,
        protected_table,
        stages.WORK_FILES_CHECK,
        stages.check_earlier_work_files,
        "The work files of the dataset's published releases that this release's risk step and the reviews "
        "read (key sets, memberships, key areas, audit intervals, candidate tables) match the sha256 their "
        "ledger entries record. Names the file and the entry; a release recorded before the digests is read "
        "unverified, and the summary says which.",
    )


def _dp_guarantees(scope: _CheckScope, protected_table: dg.AssetsDefinition) -> list[dg.AssetChecksDefinition]:
    """Under protection.method dp the mechanism's guarantee replaces the k floor and the suppression audit;
    these still block."""
    return [
        _guarantee(
            scope,
            protected_table,
            "withheld_absent",
            stages.check_dp_withheld_absent,
            "Keys the DP mechanism did not select are absent: every published key is a key of the data and shows "
            "at least the selection threshold; no null rows, flag column or zero.",
        ),
        _no_identifiers(scope, protected_table),
        _guarantee(
            scope,
            protected_table,
            "dp_mechanism",
            stages.check_dp_mechanism,
            "The recorded mechanism (OpenDP thresholded Laplace or Gaussian: scale, threshold, contribution "
            "bounds, sensitivity) is the one the policy calls for, re-calibrated here, and OpenDP's privacy map "
            "of it is within the policy's epsilon/delta (or rho/delta).",
        ),
        _guarantee(
            scope,
            protected_table,
            "privacy_budget",
            stages.check_privacy_budget,
            "The population's releases in the ledger (keyed on the data too), composed by OpenDP with this one, "
            "stay within the policy's privacy budget; a release that would exceed it is refused.",
        ),
    ]


def _no_identifiers(scope: _CheckScope, protected_table: dg.AssetsDefinition) -> dg.AssetChecksDefinition:
    """The one guarantee both protection methods share word for word."""
    return _guarantee(
        scope,
        protected_table,
        "no_identifiers",
        stages.check_no_identifiers,
        "No identifier or quasi-identifier column (or unit id value) of the input reaches a release file.",
    )


def _guarantees(scope: _CheckScope, protected_table: dg.AssetsDefinition) -> list[dg.AssetChecksDefinition]:
    if scope.programme.policy.protection.method == "dp":
        return _dp_guarantees(scope, protected_table)
    return [
        _guarantee(
            scope,
            protected_table,
            "k_floor",
            stages.check_k_floor,
            "Every published (cell, bucket) and margin holds >= k distinct units (inclusive), re-derived from the counts.",
        ),
        _guarantee(
            scope,
            protected_table,
            "structural_zeros_hold",
            stages.check_structural_zeros,
            "No cell of the public structural-zeros list holds a unit in any bucket: a listed zero that "
            "does would be withheld (its gap shows someone was there) or contradict the list. Names the "
            "cell and bucket; the zeros list must be corrected.",
        ),
        _guarantee(
            scope,
            protected_table,
            "withheld_absent",
            stages.check_withheld_absent,
            "Withheld cells are absent: no null rows, no flag column, no zero that is not a structural zero.",
        ),
        _no_identifiers(scope, protected_table),
        _guarantee(
            scope,
            protected_table,
            "suppression_audit",
            stages.check_suppression_audit,
            "Attacker LP (HiGHS) over everything published: every withheld primary v keeps an integer "
            "interval with lo <= v - 1 and up >= max(k, v + 1). Infeasible, time-out or solver error fails. "
            "Verifies the protection step's audit certificate (input hashes, witness points checked "
            "exactly) and solves only what it cannot certify; `spatial-release audit` solves from scratch.",
            reports_progress=True,
        ),
        _guarantee(
            scope,
            protected_table,
            "suppression_budget",
            stages.check_suppression_budget,
            "The share of unit counts in withheld cells stays within the policy's suppression budget.",
        ),
        _work_files_guarantee(scope, protected_table),
    ]


def _risk_budget_check(scope: _CheckScope, risk_assessment: dg.AssetsDefinition) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=risk_assessment,
        name="risk_budget",
        blocking=True,
        partitions_def=scope.partitions_def,
        description="Worst-zone risk under the per-release ceiling and the cumulative figure under the "
        "programme ceiling; past warn_at it warns; a missing estimate blocks.",
    )
    def risk_budget(context: dg.AssetCheckExecutionContext, settings: ReleaseSettings) -> dg.AssetCheckResult:
        ctx = scope.release_context(context, settings)
        outcome = stages.check_risk_budget(ctx)
        if stages.read_risk(ctx.area).status == WARN:  # publishes, but the warning shows on the check
            return check_result(
                CheckOutcome(outcome.name, False, outcome.summary, outcome.offending, outcome.figures),
                dg.AssetCheckSeverity.WARN,
            )
        return check_result(outcome)

    return risk_budget


def _within_risk_budget_check(scope: _CheckScope, published_release: dg.AssetSpec) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=published_release.key,
        name=stages.REVIEW_CHECK,
        partitions_def=scope.partitions_def,
        description="The latest risk review still finds this published release within its budget. "
        "The review job reports this check for every release it re-assesses, so a "
        "release a review finds over budget turns red here, on its partition.",
    )
    def within_risk_budget(context: dg.AssetCheckExecutionContext, settings: ReleaseSettings) -> dg.AssetCheckResult:
        ctx = scope.release_context(context, settings)
        review = stages.latest_review(Path(settings.work_dir), ctx.policy.name)
        return check_result(stages.review_outcome(review, ctx.period.label))

    return within_risk_budget


def _published_by_the_publish_job_check(scope: _CheckScope, published_release: dg.AssetSpec) -> dg.AssetChecksDefinition:
    """Whether the partition's period is published as the ledger records it. The Dagster UI lets an operator
    report a materialisation of published_release by hand ("Report materialization events"; Dagster cannot
    disable it), which shows the period "Materialized" without any release: the publication guard sensor
    (defs.alerts) records this check failed on every such report and passed on every publication by the
    publish job; run here (from the UI), it reads the ledger and the release folder."""

    @dg.asset_check(
        asset=published_release.key,  # dg.asset_check's annotation does not take an AssetSpec
        name=stages.PUBLICATION_CHECK,
        partitions_def=scope.partitions_def,
        description="The period is published: the ledger records its release and the release folder holds "
        "release.json and every file the ledger entry names, with the sha256 it records. A materialisation "
        "reported by hand in the UI (not by the publish job) fails this check on its partition (the "
        "publication_guard sensor reports it, with an unbacked_publication alert); a publication passes it.",
    )
    def published_by_the_publish_job(
        context: dg.AssetCheckExecutionContext, settings: ReleaseSettings
    ) -> dg.AssetCheckResult:
        period = period_of(context.partition_key)
        return check_result(
            stages.check_publication(scope.programme.policy, period, Path(settings.releases_dir), settings.ledger())
        )

    return published_by_the_publish_job


def build_checks(
    programme: Programme,
    partitions_def: dg.PartitionsDefinition,
    validated_pings: dg.AssetsDefinition,
    cell_counts: dg.AssetsDefinition,
    protected_table: dg.AssetsDefinition,
    risk_assessment: dg.AssetsDefinition,
    published_release: dg.AssetSpec,
) -> list:
    scope = _CheckScope(programme, partitions_def)
    return [
        _within_risk_budget_check(scope, published_release),
        _published_by_the_publish_job_check(scope, published_release),
        *_input_checks(scope, validated_pings, cell_counts),
        *_guarantees(scope, protected_table),
        _risk_budget_check(scope, risk_assessment),
    ]


__all__ = ["build_checks"]
