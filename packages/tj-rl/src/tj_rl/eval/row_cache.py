"""Episode rows kept on disk by what decides them, so that an evaluation runs each episode once.

Why: a training run evaluates the same baselines on the same traffic again and again (phase 2's
teacher choice and table, phase 3's cost limit and table, ``eval --agent``, every training seed of
a benchmark); on a real city that is most of an hour of SUMO. DESIGN §10 makes an episode's row a
function of (policy, traffic, SUMO seed, env settings) only, tested in ``test_heldout``, so a row
run once can be looked up instead of run again.

A row's key is the sha256 of:
- the policy's fingerprint (``policy_fingerprint``): a baseline's name (made afresh for every
  episode), or what the policy object's own ``fingerprint()`` says: its class and options, an
  agent's files. A policy without one (a random draw that carries over between episodes, an agent
  that samples) is never cached;
- the scenario it runs on (``scenario_fingerprint``): the bytes of its .sumocfg, net, route and
  additional files and its time, step, seed and options (not its name or paths);
- the env settings (``env_fingerprint``) but those that no row depends on (the cost weights, which
  only weigh ``info["cost"]``; the temp folder; sumo-gui's delay); a callable reward: never cached;
- the SUMO seed and the code (``code_fingerprint``): tj-rl's and tj-models' sources and the
  versions of SUMO, numpy, numba and torch. A changed source file is a new key; nothing is stale.

Storage: one JSON file per row (tj-monitor's atomic write: a killed writer leaves a temp file, not
a half row, and the next write of that row sweeps it); a file that does not parse is a miss,
deleted. Not tj-data's ``DiskCache``: its codec
imports torch, which evaluation processes of baselines never need (5 s per process here), and rows
are small flat dicts, so JSON (NaN included) is all they need. The folder grows by about 1 KB per
episode and can be deleted at any time.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from collections.abc import Mapping
from importlib import metadata, util
from pathlib import Path
from typing import Any

from tj_monitor import atomic_write_json

__all__ = [
    "RowCache",
    "code_fingerprint",
    "env_fingerprint",
    "file_digest",
    "policy_fingerprint",
    "scenario_fingerprint",
]

log = logging.getLogger(__name__)

FORMAT = 1  # bump when a row's layout changes
_SOURCES = ("tj_rl", "tj_models")  # whose code decides a row (tj-models: an agent's forward)
_VERSIONS = ("eclipse-sumo", "libsumo", "numpy", "numba", "torch")
# EnvConfig fields no row depends on: the cost weights only weigh info["cost"], which rows do not
# keep (they sum the named costs); where temp files go; sumo-gui's pause per step
_NOT_IN_ROWS = frozenset({"cost_weights", "temp_dir", "gui_delay_ms"})
_SUFFIXES = (".py", ".c", ".h")
_digests: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256 hex


def file_digest(path: str | Path) -> str:
    """The sha256 of a file's bytes (remembered per path, size and modification time)."""
    p = Path(path)
    st = p.stat()
    memo = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if memo not in _digests:
        with open(p, "rb") as f:
            _digests[memo] = hashlib.file_digest(f, "sha256").hexdigest()
    return _digests[memo]


@functools.cache
def code_fingerprint() -> str:
    """tj-rl's and tj-models' source files (names and bytes) and the versions of the libraries
    that run an episode, hashed: a row made by other code never matches."""
    h = hashlib.sha256(f"format {FORMAT}".encode())
    for name in _SOURCES:
        spec = util.find_spec(name)
        roots = list(spec.submodule_search_locations or []) if spec else []
        for root in map(Path, roots):
            for f in sorted(p for p in root.rglob("*") if p.suffix in _SUFFIXES and p.is_file()):
                h.update(f"{name}/{f.relative_to(root).as_posix()}:{file_digest(f)}".encode())
    for dist in _VERSIONS:
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            version = "-"
        h.update(f"{dist}=={version}".encode())
    return h.hexdigest()


def _files(value: Any) -> Any:
    """Paths -> their content digests (tuples of them too); anything else as it is."""
    if isinstance(value, Path):
        return file_digest(value)
    if isinstance(value, tuple) and value and all(isinstance(v, Path) for v in value):
        return tuple(file_digest(v) for v in value)
    return value


def scenario_fingerprint(scenario: Any) -> str:
    """A tj-rl ``Scenario`` by what SUMO runs: its files' bytes and every other field but its
    name (the same files elsewhere, e.g. another run's data folder, are the same scenario)."""
    parts = {f.name: _files(getattr(scenario, f.name)) for f in dataclasses.fields(scenario)
             if f.name != "name"}  # fmt: skip
    return hashlib.sha256(repr(sorted(parts.items())).encode()).hexdigest()


def env_fingerprint(config: Any) -> str | None:
    """An ``EnvConfig`` by the fields a row depends on; None when it cannot be named (a reward
    given as a callable)."""
    if callable(config.reward):
        return None
    parts = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
             if f.name not in _NOT_IN_ROWS}  # fmt: skip
    return hashlib.sha256(repr(sorted(parts.items())).encode()).hexdigest()


def policy_fingerprint(policy: Any) -> str | None:
    """A baseline's name (evaluation makes it afresh for every episode), or the object's own
    ``fingerprint()``; None: its rows are not cached (it has none, or says None)."""
    if isinstance(policy, str):
        return f"name:{policy}"
    fingerprint = getattr(policy, "fingerprint", None)
    return fingerprint() if callable(fingerprint) else None


class RowCache:
    """Episode rows under ``directory`` (created), keyed as the module docstring says; safe for
    several processes (atomic writes; a row is the same whoever wrote it). ``hits`` and
    ``misses`` count this object's lookups."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.hits = 0
        self.misses = 0

    def __repr__(self) -> str:
        return f"RowCache({str(self.directory)!r})"

    def key(self, policy: Any, scenario: Any, config: Any, seed: int) -> str | None:
        """The key of ``policy``'s episode on ``scenario`` (the one it runs on: its window and
        route file applied) with ``config`` and SUMO seed ``seed``; None: not cacheable."""
        pol, env = policy_fingerprint(policy), env_fingerprint(config)
        if pol is None or env is None:
            return None
        parts = (code_fingerprint(), pol, scenario_fingerprint(scenario), env, int(seed))
        return hashlib.sha256(repr(parts).encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str | None) -> dict[str, Any] | None:
        """The row kept under ``key``, or None (no key, no row, or a damaged file: deleted)."""
        if key is None:
            return None
        path = self._path(key)
        try:
            kept = json.loads(path.read_text())
            row = kept["row"] if kept.get("key") == key else None
        except FileNotFoundError:
            row = None
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning("row cache: %s is damaged (%s); running its episode again", path, exc)
            path.unlink(missing_ok=True)
            row = None
        if isinstance(row, dict):
            self.hits += 1
            return row
        self.misses += 1
        return None

    def put(self, key: str | None, row: Mapping[str, Any]) -> None:
        """Keep ``row`` under ``key`` (nothing without a key)."""
        if key is None:
            return
        path = self._path(key)
        path.parent.mkdir(exist_ok=True)
        atomic_write_json(path, {"key": key, "row": {k: _plain(v) for k, v in row.items()}},
                          indent=None)  # fmt: skip


def _plain(value: Any) -> Any:
    """numpy scalars as Python numbers (JSON writes floats exactly and reads them back equal)."""
    item = getattr(value, "item", None)
    return item() if callable(item) and not isinstance(value, str) else value
