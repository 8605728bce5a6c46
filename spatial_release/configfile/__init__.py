"""Configuration files: bounded reads of regular files and strict YAML (see `reading`, `strict_yaml`)."""

from spatial_release.configfile.reading import (
    MAX_CONFIG_BYTES,
    MAX_POPULATION_BYTES,
    MAX_ZEROS_BYTES,
    ConfigFileError,
    load_yaml,
    read_config,
    size_text,
)
from spatial_release.configfile.strict_yaml import MAX_DEPTH, StrictLoader, YamlRefused, field_name

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_DEPTH",
    "MAX_POPULATION_BYTES",
    "MAX_ZEROS_BYTES",
    "ConfigFileError",
    "StrictLoader",
    "YamlRefused",
    "field_name",
    "load_yaml",
    "read_config",
    "size_text",
]
