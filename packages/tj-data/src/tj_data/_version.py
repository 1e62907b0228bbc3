"""The installed version, from package metadata: one source of truth (pyproject.toml)."""

from importlib import metadata as _metadata

__version__ = _metadata.version("tj-data")
