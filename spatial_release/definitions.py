"""Dagster entry point (`dg dev`, `dagster dev -w workspace.yaml`): one graph per policy file in the policies
folder (`SPATIAL_RELEASE_POLICIES`, default `policies/`; see spatial_release.defs.catalogue), the alert
sensor over all of their jobs, and the shared resources."""

from spatial_release.defs.catalogue import build_catalogue

catalogue = build_catalogue()

defs = catalogue.definitions()
