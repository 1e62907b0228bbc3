"""Model checkpoints as ``config.json`` + ``model.safetensors``: atomic, checksummed, no pickle.

safetensors stores raw tensors only, so loading can never execute code (unlike ``torch.load``
without ``weights_only``). Both files are written atomically (a private folder in the same directory,
fsync, rename, fsync of the directory); the weights first, then the config that records their
sha256, so a crash between the two is detected on load as a checksum mismatch instead of silently
pairing a config with the wrong weights.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor

__all__ = [
    "CONFIG_NAME",
    "FORMAT",
    "WEIGHTS_NAME",
    "CheckpointError",
    "read_checkpoint",
    "write_checkpoint",
]

FORMAT = "tj-models/agent-v1"
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
_WORK_PREFIX = ".writing-"


class CheckpointError(RuntimeError):
    """A checkpoint directory is missing, incomplete, corrupt or does not fit the model."""


def _package_version() -> str:
    try:
        return version("tj-models")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
        return "unknown"


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """``write`` into a private folder next to ``path``, fsync, rename over ``path``.

    A folder, not a temp file: safetensors itself writes through a temp file of its own
    (``.tmpXXXXXX``) next to the path it is given, so whatever a killed writer leaves behind is
    inside this one folder, which the next writer removes."""
    work = Path(tempfile.mkdtemp(prefix=_WORK_PREFIX, dir=path.parent))
    try:
        tmp = work / path.name
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _fsync_dir(path.parent)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checkpoint(
    directory: str | Path, config: Mapping[str, Any], state_dict: Mapping[str, Tensor]
) -> Path:
    """Write ``state_dict`` and ``config`` into ``directory``; returns the directory.

    One writer per directory: temp files of an earlier, killed writer are removed first.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(f"{_WORK_PREFIX}*"):  # left by a writer that was killed
        shutil.rmtree(stale, ignore_errors=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state_dict.items()}
    weights = directory / WEIGHTS_NAME
    _atomic_write(weights, lambda tmp: save_file(tensors, str(tmp), metadata={"format": "pt"}))
    meta = {
        "format": FORMAT,
        "tj_models_version": _package_version(),
        "weights": WEIGHTS_NAME,
        "weights_sha256": _sha256(weights),
        "config": dict(config),
    }
    text = json.dumps(meta, indent=2, sort_keys=True) + "\n"
    _atomic_write(directory / CONFIG_NAME, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return directory


def read_checkpoint(
    directory: str | Path, *, map_location: str | torch.device = "cpu"
) -> tuple[dict[str, Any], dict[str, Tensor], Path]:
    """``(config, state_dict, weights_path)`` of a checkpoint, verified against its checksum."""
    directory = Path(directory)
    config_path = directory / CONFIG_NAME
    if not config_path.is_file():
        raise CheckpointError(f"{config_path}: missing (not a tj-models checkpoint directory)")
    try:
        meta = json.loads(config_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{config_path}: not valid JSON ({exc})") from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise CheckpointError(f"{config_path}: format {got!r}, expected {FORMAT!r}")
    for key in ("weights", "weights_sha256", "config"):
        if key not in meta:
            raise CheckpointError(f"{config_path}: missing key {key!r}")
    weights = directory / str(meta["weights"])
    if weights.parent != directory or not weights.is_file():
        raise CheckpointError(f"{weights}: weights file missing")
    if _sha256(weights) != meta["weights_sha256"]:
        raise CheckpointError(
            f"{weights}: sha256 does not match {config_path} (corrupt, or a write was interrupted)"
        )
    try:
        state = load_file(str(weights), device=str(map_location))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{weights}: unreadable safetensors file ({exc})") from exc
    return meta["config"], state, weights
