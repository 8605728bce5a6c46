"""Dagster entry point (`dg dev`, `dagster dev -w workspace.yaml`)."""

import dagster as dg

from spatial_release.defs.assets import cell_counts, protected_table, published_release, validated_pings
from spatial_release.defs.checks import ALL_CHECKS
from spatial_release.defs.jobs import release_job
from spatial_release.defs.resources import ReleaseSettings
from spatial_release.defs.schedules import quarterly_release_schedule

defs = dg.Definitions(
    assets=[validated_pings, cell_counts, protected_table, published_release],
    asset_checks=ALL_CHECKS,
    jobs=[release_job],
    schedules=[quarterly_release_schedule],
    resources={"settings": ReleaseSettings()},
)
