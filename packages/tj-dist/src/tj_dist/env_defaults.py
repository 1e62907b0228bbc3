"""Act on the detected environment: NCCL/allocator defaults, pin_memory advice, data-path warnings.

Only standard variables are touched (NCCL_*, PYTORCH_ALLOC_CONF), never one the user already set,
and every change is logged and returned so the run's log says exactly what was decided and why.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

from .environment import DrvfsMount, EnvironmentInfo

__all__ = ["EnvDefaults", "apply_env_defaults", "check_data_path"]

log = logging.getLogger(__name__)

# WSL2 has no GPU peer-to-peer path and no InfiniBand: NCCL probing them hangs or fails.
WSL2_NCCL_DEFAULTS = {"NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1"}
# PYTORCH_ALLOC_CONF is the current name; torch still reads the older PYTORCH_CUDA_ALLOC_CONF.
ALLOC_CONF_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")
MIN_SHM_BYTES = 1 << 30


@dataclass(kw_only=True)
class EnvDefaults:
    """What `apply_env_defaults` did: variables it set, what it recommends, what it warned about."""

    set_vars: dict[str, str] = field(default_factory=dict)
    kept_user_vars: dict[str, str] = field(default_factory=dict)
    pin_memory: bool = True
    warnings: list[str] = field(default_factory=list)


def _warn(result: EnvDefaults, message: str) -> None:
    result.warnings.append(message)
    log.warning(message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def apply_env_defaults(
    env: EnvironmentInfo,
    *,
    environ: MutableMapping[str, str] | None = None,
    expandable_segments: bool = True,
) -> EnvDefaults:
    """Set the defaults `env` calls for, before CUDA or NCCL is initialised.

    Under WSL2: NCCL_P2P_DISABLE=1 and NCCL_IB_DISABLE=1 unless already set, pin_memory=False is
    recommended (WSL2 limits pinned host memory), and expandable segments are never enabled (a
    user-set value is kept but warned about). Elsewhere with a GPU, expandable segments are enabled
    (`expandable_segments`) to cut fragmentation from variable-size graph batches. A /dev/shm below
    1 GB (DataLoader workers pass batches through it) is warned about everywhere.
    """
    target = os.environ if environ is None else environ
    result = EnvDefaults(pin_memory=not env.wsl2)

    def set_default(name: str, value: str, why: str) -> None:
        if name in target:
            result.kept_user_vars[name] = target[name]
            log.info(
                "keeping user's %s=%s (default would be %s: %s)", name, target[name], value, why
            )
            return
        target[name] = value
        result.set_vars[name] = value
        log.info("set %s=%s (%s)", name, value, why)

    if env.wsl2:
        for name, value in WSL2_NCCL_DEFAULTS.items():
            set_default(name, value, "WSL2 has no GPU peer-to-peer or InfiniBand transport")
        log.info("WSL2: recommending pin_memory=False (pinned host memory is limited under WSL2)")
        for name in ALLOC_CONF_VARS:
            if "expandable_segments:true" in target.get(name, "").replace(" ", "").lower():
                _warn(
                    result,
                    f"{name}={target[name]!r} enables expandable_segments under WSL2, where the "
                    "CUDA driver's virtual-memory support is limited; remove it if allocations fail",
                )
    elif env.cuda and expandable_segments:
        if any(name in target for name in ALLOC_CONF_VARS):
            for name in ALLOC_CONF_VARS:
                if name in target:
                    result.kept_user_vars[name] = target[name]
        else:
            set_default(
                "PYTORCH_ALLOC_CONF",
                "expandable_segments:True",
                "less fragmentation from variable-size batches",
            )

    if env.shm_bytes is not None and env.shm_bytes < MIN_SHM_BYTES:
        _warn(
            result,
            f"/dev/shm is {env.shm_bytes / 2**20:.0f} MiB (< 1 GiB): DataLoader workers may fail "
            "with 'bus error'; enlarge it (docker --shm-size) or use fewer workers",
        )
    return result


def _drvfs_mount_for(path: Path, mounts: tuple[DrvfsMount, ...]) -> DrvfsMount | None:
    best: DrvfsMount | None = None
    for mount in mounts:
        root = Path(mount.mount_point)
        if (path == root or root in path.parents) and (
            best is None or len(mount.mount_point) > len(best.mount_point)
        ):
            best = mount
    return best


def check_data_path(
    path: str | os.PathLike[str], env: EnvironmentInfo | None = None
) -> DrvfsMount | None:
    """Warn when `path` lies on a Windows drive mounted into WSL (`/mnt/c`, 9p/drvfs).

    Reading training data across the VM boundary was measured 5-10x slower than the Linux
    filesystem; copy the dataset into the WSL home (ext4) instead. Returns the mount, or None.
    """
    if env is None:
        from .environment import detect_environment

        env = detect_environment(probe_gpus=False)
    resolved = Path(os.path.realpath(os.fspath(path)))  # a symlink into /mnt/c counts
    mount = _drvfs_mount_for(resolved, env.drvfs_mounts)
    if mount is not None:
        message = (
            f"data path {resolved} is on the Windows drive {mount.source} mounted at "
            f"{mount.mount_point} ({mount.fstype}/drvfs): I/O there is 5-10x slower than the WSL "
            "filesystem; copy the data under your Linux home (e.g. ~/data) and train from there"
        )
        log.warning(message)
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    return mount
