"""Crash-safe checkpoints: atomic write + completion marker, keep the last k, resume the newest good one.

A save writes `ckpt-<step>.pt` through tj-monitor's `atomic_open` (a temp file in the same
directory, so the rename is atomic even on another filesystem; fsync of the file, rename, fsync of
the directory), hashing the bytes as they are written, and only then writes the marker
`ckpt-<step>.pt.done` (JSON: size, sha256) the same way. A kill at any moment leaves either the
previous set or a file without a valid marker, which `load_latest` skips with a warning; the next
save removes the dead writer's temp (``.tmp-ckpt-...``). Loading uses
`torch.load(weights_only=True)`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch

from tj_monitor import atomic_open, atomic_write_json, fsync_dir, remove_stale_temps

from .process_group import is_main_process

__all__ = [
    "CheckpointError",
    "CheckpointInfo",
    "CorruptCheckpointError",
    "LoadedCheckpoint",
    "list_checkpoints",
    "load_checkpoint",
    "load_latest",
    "save_checkpoint",
]

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
_NAME = re.compile(r"^ckpt-(\d{9,})\.pt$")
_HASH_CHUNK = 8 << 20


class CheckpointError(RuntimeError):
    """A checkpoint file that is missing or cannot be loaded (the message names the path)."""


class CorruptCheckpointError(CheckpointError):
    """The file does not match its completion marker: truncated, corrupt, or never finished."""


@dataclass(frozen=True, kw_only=True)
class CheckpointInfo:
    step: int
    path: Path
    marker: Path


@dataclass(frozen=True, kw_only=True)
class LoadedCheckpoint:
    step: int
    path: Path
    state: dict[str, Any]


class _HashingWriter:
    """File wrapper that hashes bytes on their way to disk (no second read to checksum)."""

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.size += len(data)
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()


def _check_directory(directory: Path, *, create: bool) -> None:
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"checkpoint directory {directory} exists and is not a directory")
    if create:
        directory.mkdir(parents=True, exist_ok=True)


def _marker_for(path: Path) -> Path:
    return path.with_name(path.name + ".done")


def save_checkpoint(
    directory: str | os.PathLike[str],
    state: Mapping[str, Any],
    *,
    step: int,
    keep: int = 2,
) -> Path | None:
    """Atomically save `state` as step `step` on rank 0 and keep the newest `keep` (>= 2).

    Other ranks return None at once: call it inside `rank_zero_only()` so they wait for the write.
    """
    if keep < 2:
        raise ValueError(
            f"keep={keep} must be >= 2 (the previous checkpoint is the crash fallback)"
        )
    if step < 0:
        raise ValueError(f"step={step} must be >= 0")
    directory = Path(directory)
    _check_directory(directory, create=is_main_process())
    if not is_main_process():
        return None
    final = directory / f"ckpt-{step:09d}.pt"
    marker = _marker_for(final)
    if marker.exists():  # re-saving a step: drop the old marker first, never pair it with new bytes
        marker.unlink()
        fsync_dir(directory)
    started = time.perf_counter()
    with atomic_open(final) as file:
        writer = _HashingWriter(file)
        torch.save(dict(state), writer)
    meta = {
        "format": FORMAT_VERSION,
        "step": step,
        "file": final.name,
        "bytes": writer.size,
        "sha256": writer.sha256.hexdigest(),
        "torch": torch.__version__,
        "saved_at": time.time(),
    }
    atomic_write_json(marker, meta)
    log.info(
        "saved %s (%.1f MB, %.2f s)", final, writer.size / 2**20, time.perf_counter() - started
    )
    _prune(directory, keep)
    return final


def _prune(directory: Path, keep: int) -> None:
    """Remove all but the newest `keep` complete checkpoints, older incomplete ones, and the temps
    of writers that died (one writer per directory: any dead writer's temp is garbage)."""
    complete = list_checkpoints(directory)
    for info in complete[:-keep]:
        info.marker.unlink(missing_ok=True)  # marker first: a crash here leaves an ignored file
        info.path.unlink(missing_ok=True)
    newest = complete[-1].step if complete else -1
    for path in directory.iterdir():
        match = _NAME.match(path.name)
        if match and int(match.group(1)) < newest and not _marker_for(path).exists():
            path.unlink(missing_ok=True)
    remove_stale_temps(directory)  # writes killed mid-way
    fsync_dir(directory)


def list_checkpoints(directory: str | os.PathLike[str]) -> list[CheckpointInfo]:
    """Checkpoints that have a completion marker, oldest first (not yet verified)."""
    directory = Path(directory)
    _check_directory(directory, create=False)
    if not directory.exists():
        return []
    found = []
    for path in directory.iterdir():
        match = _NAME.match(path.name)
        if match and _marker_for(path).exists():
            found.append(
                CheckpointInfo(step=int(match.group(1)), path=path, marker=_marker_for(path))
            )
    return sorted(found, key=lambda info: info.step)


def _verify(path: Path) -> None:
    marker = _marker_for(path)
    try:
        meta = json.loads(marker.read_text())
        expected_size, expected_sha = int(meta["bytes"]), str(meta["sha256"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CorruptCheckpointError(
            f"{path}: completion marker {marker} is missing or unreadable ({exc})"
        ) from exc
    size = path.stat().st_size if path.exists() else -1
    if size != expected_size:
        raise CorruptCheckpointError(
            f"{path}: {size} bytes on disk, marker says {expected_size} (truncated?)"
        )
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_HASH_CHUNK):
            digest.update(chunk)
    if digest.hexdigest() != expected_sha:
        raise CorruptCheckpointError(f"{path}: sha256 does not match its marker (corrupt file)")


def load_checkpoint(
    path: str | os.PathLike[str],
    *,
    map_location: str | torch.device = "cpu",
    verify: bool = True,
    weights_only: bool = True,
) -> dict[str, Any]:
    """Load one checkpoint; with `verify`, its size and sha256 must match its marker first."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    if verify:
        _verify(path)
    try:
        state = torch.load(path, map_location=map_location, weights_only=weights_only)
    except Exception as exc:
        detail = f"{type(exc).__name__}: {exc}"
        if weights_only and "WeightsUnpickler error:" in detail:
            # torch's message is a page long; its one useful line names the refused type
            line = detail.split("WeightsUnpickler error:", 1)[1].strip().splitlines()[0]
            detail = (
                f"weights_only loading refused it ({line.split('. Please')[0]}); the file is "
                "intact: store plain types/tensors, register the type with "
                "torch.serialization.add_safe_globals, or pass weights_only=False for a trusted file"
            )
        raise CheckpointError(f"{path}: cannot be loaded: {detail}") from exc
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: holds a {type(state).__name__}, expected a dict")
    return state


def load_latest(
    directory: str | os.PathLike[str],
    *,
    map_location: str | torch.device = "cpu",
    verify: bool = True,
    weights_only: bool = True,
) -> LoadedCheckpoint | None:
    """The newest checkpoint that is complete and intact; skipped ones are warned about.

    Returns None when the directory has no usable checkpoint (a fresh run).
    """
    directory = Path(directory)
    _check_directory(directory, create=False)
    if not directory.exists():
        return None
    complete = list_checkpoints(directory)
    complete_paths = {info.path for info in complete}
    newest_complete = complete[-1].step if complete else -1
    for path in sorted(directory.iterdir()):
        match = _NAME.match(path.name)
        if match and path not in complete_paths and int(match.group(1)) > newest_complete:
            _warn(f"skipping incomplete checkpoint {path}: no completion marker (killed mid-save?)")
    for info in reversed(complete):
        try:
            state = load_checkpoint(
                info.path, map_location=map_location, verify=verify, weights_only=weights_only
            )
        except CorruptCheckpointError as exc:
            _warn(f"skipping checkpoint: {exc}")
            continue
        except CheckpointError as exc:
            if verify:
                raise  # intact bytes that will not load: a format/type problem, not corruption
            _warn(f"skipping checkpoint: {exc}")
            continue
        log.info("resuming from %s (step %d)", info.path, info.step)
        return LoadedCheckpoint(step=info.step, path=info.path, state=state)
    return None


def _warn(message: str) -> None:
    log.warning(message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)
