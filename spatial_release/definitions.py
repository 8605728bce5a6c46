"""Dagster entry point (`dg dev`, `dagster dev -w workspace.yaml`)."""

import dagster as dg

from spatial_release.defs.assets import monthly_graph, quarterly_graph
from spatial_release.defs.jobs import ALL_JOBS
from spatial_release.defs.resources import CountingEngine, ReleaseSettings
from spatial_release.defs.review import published_within_budget, risk_review
from spatial_release.defs.schedules import ALL_SCHEDULES
from spatial_release.defs.sensors import ALL_SENSORS

defs = dg.Definitions(
    assets=[*quarterly_graph.assets, *monthly_graph.assets, risk_review],
    asset_checks=[*quarterly_graph.checks, *monthly_graph.checks, published_within_budget],
    jobs=ALL_JOBS,
    schedules=ALL_SCHEDULES,
    sensors=ALL_SENSORS,
    resources={"settings": ReleaseSettings(), "counting": CountingEngine()},
)
