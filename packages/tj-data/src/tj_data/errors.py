"""Exception hierarchy of tj-data: one class per kind of bad input, all under `StoreError`.

Every message names the file or field concerned and what was expected, so a user can fix the
input without reading the code. Nothing in tj-data skips bad data silently.
"""

from __future__ import annotations

__all__ = [
    "BudgetError",
    "CacheError",
    "JsonImportError",
    "QuantizationError",
    "SampleIndexError",
    "SchemaMismatchError",
    "StatisticsError",
    "StoreCorruptError",
    "StoreError",
    "StoreFormatVersionError",
    "StoreIncompleteError",
    "StoreNotFoundError",
]


class StoreError(Exception):
    """Base class of every error raised for a graph store or its input."""


class StoreNotFoundError(StoreError, FileNotFoundError):
    """The path holds no graph store (no manifest and no shard written by a writer)."""


class StoreIncompleteError(StoreError):
    """A writer was interrupted before committing its manifest (killed or never closed)."""


class StoreCorruptError(StoreError):
    """A shard or manifest is damaged: bad checksum, wrong length, truncated or missing file."""


class StoreFormatVersionError(StoreError):
    """The manifest was written by a newer (or unknown) format version than this reader knows."""


class SchemaMismatchError(StoreError, ValueError):
    """A sample, a schema or an option does not match the schema it is used with."""


class SampleIndexError(StoreError, IndexError):
    """A sample index outside ``[-len, len)`` of the dataset."""


class JsonImportError(StoreError, ValueError):
    """A malformed record in a JSON chunk import (the message names file, record and field)."""


class BudgetError(StoreError, ValueError):
    """A loader plan cannot fit its memory budget (the message names the term that is too large)."""


class CacheError(StoreError, OSError):
    """A cache cannot work as configured (e.g. a cache directory that is not writable)."""


class StatisticsError(StoreError, ValueError):
    """Statistics a normaliser or quantiser needs are missing from the manifest, or unusable."""


class QuantizationError(SchemaMismatchError):
    """Quantisation cannot be fitted or applied (zero-width range, overflow, wrong dtype)."""
