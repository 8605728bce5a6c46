"""The release concern: per programme (policy file), the asset graph ingest -> count -> protect -> assess
risk -> publish with its blocking checks, its release and publish jobs, schedule and publish sensor."""

from spatial_release.defs.release.assets import CANDIDATE_TAG, REFUSED_TAG, ReleaseGraph, build_release_graph

__all__ = ["CANDIDATE_TAG", "REFUSED_TAG", "ReleaseGraph", "build_release_graph"]
