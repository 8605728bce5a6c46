"""A domain check's outcome as a Dagster asset check result (ERROR severity unless told otherwise)."""

import dagster as dg

from spatial_release.guarantees import CheckOutcome


def check_result(
    outcome: CheckOutcome, severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR
) -> dg.AssetCheckResult:
    metadata = {
        k: (v if isinstance(v, (int, float, str)) or v is None else dg.MetadataValue.json(v))
        for k, v in outcome.figures.items()
    }
    metadata["summary"] = outcome.summary
    if outcome.offending:
        metadata["offending"] = dg.MetadataValue.json(outcome.offending)
    return dg.AssetCheckResult(passed=outcome.passed, severity=severity, description=outcome.summary, metadata=metadata)
