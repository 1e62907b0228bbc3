"""Configuration: YAML layers, validation into typed configs, profile selection."""

from tj_hybrid.config.layering import ConfigError, deep_merge, load_layers, parse_override
from tj_hybrid.config.loading import LoadedConfig, load_config
from tj_hybrid.config.profiles import PROFILES, auto_profile, describe_profile
from tj_hybrid.config.schema import MOVED, HybridConfig
from tj_hybrid.config.sections import parse_bytes
from tj_hybrid.config.validate import to_plain, validate_dataclass

__all__ = [
    "MOVED",
    "PROFILES",
    "ConfigError",
    "HybridConfig",
    "LoadedConfig",
    "auto_profile",
    "deep_merge",
    "describe_profile",
    "load_config",
    "load_layers",
    "parse_bytes",
    "parse_override",
    "to_plain",
    "validate_dataclass",
]
