"""Policy files: the reviewed, versioned description of one dataset's release programme.

A policy is YAML validated on load. Every error names the file and the field, because the person who reads
it is reviewing a change to a policy file, not debugging Python. Everything that can be checked without the
traces is checked here, before any work starts: a repeated key (YAML would silently keep the last one), each
`source.time_formats[i]` (parsed by DuckDB, the parser ingest uses), and the structural-zeros list and the
landscape the policy names (they must exist and be readable as such). Errors about those files name the
file and the field but never quote their content: a mistyped path may point at any file on the machine.
"""

from spatial_release.policy.loading import UniqueKeyLoader, check_referenced_files, load_policy, load_yaml, parse_policy
from spatial_release.policy.model import (
    BUCKET_PATTERN, DEFAULT_MISSING_UNIT_VALUES, NAME_PATTERN, Geometry, GridGeometry, LinkedZoning, Policy,
    PolicyError, RiskSpec, SourceSpec, SuppressionSpec, SyntheticSource, TimeSpec, TripEnd, ZoneParent,
    ZonesGeometry,
)

__all__ = [
    "BUCKET_PATTERN", "DEFAULT_MISSING_UNIT_VALUES", "NAME_PATTERN", "Geometry", "GridGeometry", "LinkedZoning",
    "Policy", "PolicyError", "RiskSpec", "SourceSpec", "SuppressionSpec", "SyntheticSource", "TimeSpec", "TripEnd",
    "UniqueKeyLoader", "ZoneParent", "ZonesGeometry", "check_referenced_files", "load_policy", "load_yaml",
    "parse_policy",
]
