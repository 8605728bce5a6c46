"""Differential privacy beside k-anonymity (`protection.method: dp`): per-unit contribution bounding, DP
partition selection and noise from OpenDP, and consistent integer post-processing. No Dagster here."""

from spatial_release.dp.bounding import bound_contributions, bounded_counts, ladder_counts
from spatial_release.dp.consistency import consistent_counts, consistent_ladder
from spatial_release.dp.mechanism import DpParams, DpRelease, Sensitivity, calibrate, release_counts

__all__ = [
    "DpParams",
    "DpRelease",
    "Sensitivity",
    "bound_contributions",
    "bounded_counts",
    "calibrate",
    "consistent_counts",
    "consistent_ladder",
    "ladder_counts",
    "release_counts",
]
