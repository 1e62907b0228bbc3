"""Load the trainer configuration: find the files, merge the layers, validate, resolve paths.

Relative paths in the configuration (``run.root``, ``scenario.path``, ``phase1.data.path``, ...) are
relative to the project root: the folder that holds ``configs/``. So the same config works from
any working directory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tj_hybrid.config.layering import ConfigError, deep_merge, load_layers, load_yaml
from tj_hybrid.config.profiles import PROFILES, auto_profile
from tj_hybrid.config.schema import MOVED, HybridConfig
from tj_hybrid.config.validate import validate_dataclass

__all__ = ["LoadedConfig", "check_moved", "find_project_root", "load_config"]


@dataclass(frozen=True, kw_only=True)
class LoadedConfig:
    """The validated config plus where it came from (for logs and the run directory)."""

    config: HybridConfig
    profile: str
    profile_reason: str
    files: tuple[Path, ...]
    root: Path


def find_project_root(start: Path | None = None) -> Path:
    """The nearest folder (from ``start``/cwd up, then from this package up) with configs/hybrid.yaml."""
    here = Path(__file__).resolve()
    for base in (Path(start or Path.cwd()).resolve(), here):
        for folder in (base, *base.parents):
            if (folder / "configs" / "hybrid.yaml").is_file():
                return folder
    raise ConfigError("configs/hybrid.yaml not found; run from the project or pass --config")


def _resolve_paths(obj: Any, root: Path) -> Any:
    """A copy of the dataclass tree with relative Path fields made absolute under ``root``."""
    changes = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes[f.name] = _resolve_paths(value, root)
        elif isinstance(value, Path) and not value.is_absolute():
            changes[f.name] = root / value
    return dataclasses.replace(obj, **changes) if changes else obj


def check_moved(merged: dict[str, Any]) -> None:
    """Reject keys of an earlier layout with where they live now (``MOVED``)."""
    for old, new in MOVED.items():
        node: Any = merged
        for part in old.split("."):
            node = node.get(part) if isinstance(node, dict) else None
            if node is None:
                break
        else:
            raise ConfigError(f"config key {old} moved to {new}; rename it in your config or --set")


def load_config(
    config: Path | None = None, profile: str | None = None, overrides: Sequence[str] = ()
) -> LoadedConfig:
    """defaults (``config`` or configs/hybrid.yaml) <- profile overlay <- ``--set`` overrides."""
    if config is not None:
        defaults = Path(config).resolve()
        if not defaults.is_file():
            raise ConfigError(f"config file {defaults} does not exist")
        root = defaults.parent.parent if defaults.parent.name == "configs" else defaults.parent
    else:
        root = find_project_root()
        defaults = root / "configs" / "hybrid.yaml"
    reason = "given with --profile"
    if profile is None:
        profile, reason = auto_profile()
    if profile not in PROFILES:
        raise ConfigError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    load_yaml(defaults)  # errors in the defaults file come first
    overlay = defaults.parent / "profiles" / f"{profile}.yaml"
    if not overlay.is_file():
        raise ConfigError(f"profile {profile!r}: {overlay} does not exist")
    merged = deep_merge(load_layers(defaults, overlay, overrides), {"profile": profile})
    check_moved(merged)
    cfg = validate_dataclass(HybridConfig, merged)
    return LoadedConfig(
        config=_resolve_paths(cfg, root),
        profile=profile,
        profile_reason=reason,
        files=(defaults, overlay),
        root=root,
    )
