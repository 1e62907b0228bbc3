"""Model checkpoints as ``config.json`` + ``model.safetensors``: atomic, checksummed, no pickle.

safetensors stores raw tensors only, so loading can never execute code (unlike ``torch.load``
without ``weights_only``). Both files are written atomically with tj-monitor's helpers (temp in
the same directory, fsync, rename, fsync of the directory; the weights through a private folder,
because safetensors writes through a temp file of its own next to the path it is given); the
weights first, then the config that records their sha256, so a crash between the two is detected
on load as a checksum mismatch instead of silently pairing a config with the wrong weights.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor

from tj_monitor import atomic_write, atomic_write_text, remove_stale_temps

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


class CheckpointError(RuntimeError):
    """A checkpoint directory is missing, incomplete, corrupt or does not fit the model."""


def _package_version() -> str:
    try:
        return version("tj-models")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
        return "unknown"


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
    remove_stale_temps(directory)  # left by a writer that was killed
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state_dict.items()}
    weights = directory / WEIGHTS_NAME
    atomic_write(weights, lambda tmp: save_file(tensors, str(tmp), metadata={"format": "pt"}))
    meta = {
        "format": FORMAT,
        "tj_models_version": _package_version(),
        "weights": WEIGHTS_NAME,
        "weights_sha256": _sha256(weights),
        "config": dict(config),
    }
    text = json.dumps(meta, indent=2, sort_keys=True) + "\n"
    atomic_write_text(directory / CONFIG_NAME, text)
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
