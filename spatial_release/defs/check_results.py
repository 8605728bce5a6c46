"""A domain check's outcome as a Dagster asset check result (ERROR severity unless told otherwise), or as
the evaluation a step logs for a check of another asset's partition."""

import dagster as dg

from spatial_release.guarantees import CheckOutcome


def _metadata(outcome: CheckOutcome) -> dict:
    metadata = {
        k: (v if isinstance(v, (int, float, str)) or v is None else dg.MetadataValue.json(v))
        for k, v in outcome.figures.items()
    }
    metadata["summary"] = outcome.summary
    if outcome.offending:
        metadata["offending"] = dg.MetadataValue.json(outcome.offending)
    return metadata


def check_result(
    outcome: CheckOutcome, severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR
) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=outcome.passed, severity=severity, description=outcome.summary, metadata=_metadata(outcome)
    )


def check_evaluation(outcome: CheckOutcome, asset_key: dg.AssetKey, partition: str, **metadata) -> dg.AssetCheckEvaluation:
    """The outcome as the evaluation of the check `outcome.name` on `asset_key`'s `partition` (ERROR
    severity), with `metadata` added."""
    return dg.AssetCheckEvaluation(
        asset_key=asset_key,
        check_name=outcome.name,
        passed=outcome.passed,
        partition=partition,
        severity=dg.AssetCheckSeverity.ERROR,
        description=outcome.summary,
        metadata={**_metadata(outcome), **metadata},
    )
