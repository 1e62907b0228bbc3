"""The manifest: the one file that makes a store directory a dataset (DESIGN §4.1).

It is written last and atomically, so its presence means every shard it lists is complete.
Large per-sample arrays (the size index) stay in the shards' `node_ptr`/`edge_ptr`, not here.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tj_data._version import __version__
from tj_data.errors import StoreCorruptError, StoreFormatVersionError
from tj_data.schema import Schema
from tj_monitor import atomic_write_json

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "MANIFEST", "PARTIAL_MANIFEST", "Manifest", "ShardInfo"]

FORMAT_NAME = "tj-graph-store"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
PARTIAL_MANIFEST = "manifest.partial.json"
BACKENDS = ("npy", "hdf5")


@dataclass(kw_only=True)
class ShardInfo:
    """One shard: where it lives, its counts, and sha256 + byte size of each stored array."""

    name: str
    num_samples: int
    num_nodes: int
    num_edges: int
    files: dict[str, dict[str, Any]]  # array name -> {"sha256", "nbytes"}
    container: str | None = None  # hdf5: file name holding the shard's group

    @property
    def nbytes(self) -> int:
        return sum(int(f["nbytes"]) for f in self.files.values())

    def to_json(self) -> dict[str, Any]:
        d = {
            "name": self.name,
            "num_samples": self.num_samples,
            "num_nodes": self.num_nodes,
            "num_edges": self.num_edges,
            "nbytes": self.nbytes,
            "files": self.files,
        }
        if self.container is not None:
            d["container"] = self.container
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ShardInfo:
        return cls(
            name=str(d["name"]),
            num_samples=int(d["num_samples"]),
            num_nodes=int(d["num_nodes"]),
            num_edges=int(d["num_edges"]),
            files={str(k): dict(v) for k, v in d["files"].items()},
            container=d.get("container"),
        )


@dataclass(kw_only=True)
class Manifest:
    """Parsed manifest.json (see the package README for the exact JSON)."""

    backend: str
    schema: Schema
    shards: list[ShardInfo] = field(default_factory=list)
    episode_ends: list[int] = field(default_factory=list)
    statistics: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    complete: bool = True
    format_version: int = FORMAT_VERSION
    library: str = f"tj-data {__version__}"

    @property
    def num_samples(self) -> int:
        return sum(s.num_samples for s in self.shards)

    @property
    def num_nodes(self) -> int:
        return sum(s.num_nodes for s in self.shards)

    @property
    def num_edges(self) -> int:
        return sum(s.num_edges for s in self.shards)

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.shards)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT_NAME,
            "format_version": self.format_version,
            "library": self.library,
            "backend": self.backend,
            "complete": self.complete,
            "num_samples": self.num_samples,
            "num_nodes": self.num_nodes,
            "num_edges": self.num_edges,
            "nbytes": self.nbytes,
            "schema": self.schema.to_json(),
            "shards": [s.to_json() for s in self.shards],
            "episode_ends": list(self.episode_ends),
            "statistics": self.statistics,
            "metadata": self.metadata,
        }

    def save(self, path: Path) -> None:
        atomic_write_json(path, self.to_json())

    @classmethod
    def load(cls, path: Path) -> Manifest:
        try:
            raw = json.loads(Path(path).read_bytes())
        except FileNotFoundError:
            raise
        except (OSError, ValueError) as exc:
            raise StoreCorruptError(f"{path}: not a readable JSON manifest ({exc})") from exc
        return cls.from_json(raw, source=str(path))

    @classmethod
    def from_json(cls, raw: Any, *, source: str = MANIFEST) -> Manifest:
        if not isinstance(raw, dict) or raw.get("format") != FORMAT_NAME:
            raise StoreCorruptError(f"{source}: expected a JSON object with format={FORMAT_NAME!r}")
        version = raw.get("format_version")
        if not isinstance(version, int):
            raise StoreCorruptError(f"{source}: format_version missing or not an integer")
        if version > FORMAT_VERSION or version < 1:
            raise StoreFormatVersionError(
                f"{source}: format_version {version} is not supported by tj-data {__version__} "
                f"(reads versions 1..{FORMAT_VERSION}); it was written by {raw.get('library')!r}: "
                "upgrade tj-data to read it"
            )
        try:
            m = cls(
                backend=str(raw["backend"]),
                schema=Schema.from_json(raw["schema"]),
                shards=[ShardInfo.from_json(s) for s in raw["shards"]],
                episode_ends=[int(v) for v in raw.get("episode_ends", [])],
                statistics=dict(raw.get("statistics", {})),
                metadata=dict(raw.get("metadata", {})),
                complete=bool(raw.get("complete", True)),
                format_version=version,
                library=str(raw.get("library", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreCorruptError(
                f"{source}: malformed manifest ({type(exc).__name__}: {exc})"
            ) from exc
        m.check(source)
        return m

    def check(self, source: str = MANIFEST) -> None:
        """Internal consistency: backend, unique shard names, counts and episode ends."""
        if self.backend not in BACKENDS:
            raise StoreCorruptError(f"{source}: backend {self.backend!r} not in {BACKENDS}")
        names = [s.name for s in self.shards]
        if len(set(names)) != len(names):
            raise StoreCorruptError(f"{source}: duplicate shard names")
        for s in self.shards:
            if min(s.num_samples, s.num_nodes, s.num_edges) < 0:
                raise StoreCorruptError(f"{source}: shard {s.name} has negative counts")
        ends, total = self.episode_ends, self.num_samples
        if any(b <= a for a, b in itertools.pairwise(ends)) or (
            ends and (ends[0] <= 0 or ends[-1] > total)
        ):
            raise StoreCorruptError(
                f"{source}: episode_ends must increase strictly within (0, {total}], got "
                f"{ends[:5]}{'...' if len(ends) > 5 else ''}"
            )
