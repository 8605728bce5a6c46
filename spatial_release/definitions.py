"""Dagster entry point (`dg dev`, `dagster dev -w workspace.yaml`): one graph per policy file in the policies
folder (`SPATIAL_RELEASE_POLICIES`, default `policies/`; see spatial_release.defs.catalogue), the alert
sensor over all of their jobs, and the shared resources.

Loaded lazily (`@dg.definitions`): importing this module reads no policy file; Dagster's tools call `defs()`
when they load the code location, and tests call it to get the Definitions."""

import dagster as dg

from spatial_release.defs.catalogue import build_catalogue


@dg.definitions
def defs() -> dg.Definitions:
    return build_catalogue().definitions()
