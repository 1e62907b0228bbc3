"""Layered YAML configuration: defaults <- profile overlay <- ``--set a.b=c`` overrides.

Layers are plain dicts merged key by key (mappings merge recursively, everything else replaces),
so an overlay only names what it changes. Values of ``--set`` are parsed as YAML scalars/flow
collections (``--set train.lr=3e-4``, ``--set data.fields=[x,y]``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

_EXPONENT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+")

__all__ = ["ConfigError", "deep_merge", "load_layers", "load_yaml", "parse_override"]


class ConfigError(ValueError):
    """A configuration file, overlay or override is invalid; the message names where."""


def load_yaml(path: Path) -> dict[str, Any]:
    """Read one YAML mapping; errors name the file (and line, when YAML reports one)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def deep_merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``base`` updated by ``overlay``; nested mappings merge, other values replace."""
    out = dict(base)
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_override(text: str) -> dict[str, Any]:
    """Turn ``"a.b.c=value"`` into ``{"a": {"b": {"c": value}}}`` with YAML-typed ``value``."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--set {text!r}: expected KEY.PATH=VALUE, e.g. train.lr=3e-4")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {text!r}: value is not valid YAML: {exc}") from exc
    if isinstance(value, str) and _EXPONENT.fullmatch(value.strip()):
        value = float(value)  # YAML 1.1 reads "3e-4" as a string; the user meant a number
    for part in reversed(key.split(".")):
        value = {part: value}
    return value


def load_layers(
    defaults: Path, profile: Path | None = None, overrides: Iterable[str] = ()
) -> dict[str, Any]:
    """Merge the default file, an optional profile overlay and ``--set`` overrides, in order."""
    merged = load_yaml(defaults)
    if profile is not None:
        merged = deep_merge(merged, load_yaml(profile))
    for text in overrides:
        merged = deep_merge(merged, parse_override(text))
    return merged
