"""Policy files: the reviewed, versioned description of one dataset's release programme.

A policy is YAML validated on load. Every error names the file and the field, because the person who reads
it is reviewing a change to a policy file, not debugging Python. Everything that can be checked without the
traces is checked here, before any work starts: the file itself (a regular file of at most MAX_CONFIG_BYTES),
its YAML (`strict_yaml`: a repeated key, which YAML would silently keep the last of, a merge key, an alias, a
value YAML 1.1 reads otherwise than YAML 1.2, such as `1:0` = 60), each
`source.time_formats[i]` (parsed by DuckDB, the parser ingest uses), and the structural-zeros list and the
landscape the policy names (they must exist and be readable as such), and the `audit_with` datasets (policy
files beside it). Errors about those files name the
file and the field but never quote their content: a mistyped path may point at any file on the machine.
"""

from spatial_release.configfile import StrictLoader
from spatial_release.policy.loading import (
    MAX_CONFIG_BYTES,
    check_audit_with,
    check_referenced_files,
    load_policy,
    load_yaml,
    parse_policy,
    read_config,
)
from spatial_release.policy.model import (
    BUCKET_PATTERN,
    DEFAULT_MISSING_UNIT_VALUES,
    NAME_PATTERN,
    DpProtection,
    Geometry,
    GridGeometry,
    KanonProtection,
    LinkedZoning,
    Policy,
    PolicyError,
    RiskSpec,
    SourceSpec,
    SuppressionSpec,
    SyntheticSource,
    TimeSpec,
    TripEnd,
    ZoneParent,
    ZonesGeometry,
)

__all__ = [
    "BUCKET_PATTERN",
    "DEFAULT_MISSING_UNIT_VALUES",
    "NAME_PATTERN",
    "DpProtection",
    "Geometry",
    "KanonProtection",
    "GridGeometry",
    "LinkedZoning",
    "Policy",
    "PolicyError",
    "RiskSpec",
    "SourceSpec",
    "SuppressionSpec",
    "SyntheticSource",
    "TimeSpec",
    "TripEnd",
    "MAX_CONFIG_BYTES",
    "StrictLoader",
    "ZoneParent",
    "ZonesGeometry",
    "check_audit_with",
    "check_referenced_files",
    "load_policy",
    "load_yaml",
    "parse_policy",
    "read_config",
]
