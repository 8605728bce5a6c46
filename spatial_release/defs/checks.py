"""Blocking asset checks (ERROR severity). Those on protected_table stand between the candidate and the
published release, so a failure stops publication. Each check reads the files itself (no asset input)
and carries the quarterly partitions, so it evaluates the run's partition only."""


import warnings
from collections.abc import Callable

import dagster as dg

from spatial_release import stages
from spatial_release.defs.assets import protected_table, validated_pings
from spatial_release.defs.partitions import period_of, quarterly
from spatial_release.defs.resources import ReleaseSettings
from spatial_release.guarantees import CheckOutcome

# partitions_def on asset checks is a preview feature; it was verified on the pinned dagster 1.13.27 and is
# what makes a check evaluate only its run's partition (see ../shared/notes/dagster.md, section 2.1).
warnings.filterwarnings("ignore", message=".*partitions_def on an AssetCheckSpec.*")


def _result(outcome: CheckOutcome) -> dg.AssetCheckResult:
    metadata = {k: (v if isinstance(v, (int, float, str)) or v is None else dg.MetadataValue.json(v))
                for k, v in outcome.figures.items()}
    metadata["summary"] = outcome.summary
    if outcome.offending:
        metadata["offending"] = dg.MetadataValue.json(outcome.offending)
    return dg.AssetCheckResult(passed=outcome.passed, severity=dg.AssetCheckSeverity.ERROR,
                               description=outcome.summary, metadata=metadata)


def _guarantee_check(name: str, run: Callable, description: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=protected_table, name=name, blocking=True, partitions_def=quarterly,
                    description=description)
    def _check(context: dg.AssetCheckExecutionContext, settings: ReleaseSettings) -> dg.AssetCheckResult:
        policy = settings.load_policy()
        area = settings.work_area(policy, period_of(context.partition_key))
        return _result(run(policy, area))

    return _check


k_floor = _guarantee_check(
    "k_floor", stages.check_k_floor,
    "Every published (cell, bucket) and margin holds >= k distinct units (inclusive), re-derived from the counts.")
withheld_absent = _guarantee_check(
    "withheld_absent", stages.check_withheld_absent,
    "Withheld cells are absent: no null rows, no flag column, no zero that is not a structural zero.")
no_identifiers = _guarantee_check(
    "no_identifiers", stages.check_no_identifiers,
    "No identifier or quasi-identifier column (or unit id value) of the input reaches a release file.")
suppression_audit = _guarantee_check(
    "suppression_audit", stages.check_suppression_audit,
    "Attacker LP (HiGHS) over everything published: every withheld primary v keeps an integer interval with "
    "lo <= v - 1 and up >= max(k, v + 1). Infeasible, time-out or solver error fails.")
suppression_budget = _guarantee_check(
    "suppression_budget", stages.check_suppression_budget,
    "The share of unit counts in withheld cells stays within the policy's suppression budget.")


@dg.asset_check(asset=validated_pings, name="rejected_share", blocking=True, partitions_def=quarterly,
                description="The share of quarantined pings stays within the policy's source.max_rejected_share.")
def rejected_share(context: dg.AssetCheckExecutionContext, settings: ReleaseSettings) -> dg.AssetCheckResult:
    policy = settings.load_policy()
    summary = stages.read_ingest_summary(settings.work_area(policy, period_of(context.partition_key)))
    problem = summary["rejected_share_problem"]
    outcome = CheckOutcome("rejected_share", problem is None,
                           problem or f"{summary['pings_rejected']} of {summary['pings_read']} pings quarantined",
                           figures={"rejected_share": summary["rejected_share"],
                                    "limit": summary["max_rejected_share"],
                                    "rejected_by_reason": summary["rejected_by_reason"]})
    return _result(outcome)


ALL_CHECKS = [rejected_share, k_floor, withheld_absent, no_identifiers, suppression_audit, suppression_budget]
