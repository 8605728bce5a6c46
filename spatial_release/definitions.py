"""Dagster entry point (`dg dev`, `dagster dev -w workspace.yaml`): each concern's definitions, merged, with
the shared resources."""

import dagster as dg

from spatial_release.defs import alerts, release, review
from spatial_release.defs.resources import CountingEngine, ReleaseSettings

defs = dg.Definitions.merge(
    release.defs,
    review.defs,
    alerts.defs,
    dg.Definitions(resources={"settings": ReleaseSettings(), "counting": CountingEngine()}),
)
