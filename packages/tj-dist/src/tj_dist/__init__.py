"""tj-dist: DDP/NCCL/AMP/gradient-accumulation/checkpoint helpers and a WSL2-aware environment.

Small functions and dataclasses that behave the same under torchrun, `launch_local`, a single CPU
process and Ray Train. See the package README for one runnable example per helper.
"""

from importlib import metadata as _metadata

from tj_monitor import die_with_parent  # re-exported: tj-monitor owns the process toolkit

from .accumulate import GradAccumulator, MicroBatch
from .checkpoint import (
    CheckpointError,
    CheckpointInfo,
    CorruptCheckpointError,
    LoadedCheckpoint,
    list_checkpoints,
    load_checkpoint,
    load_latest,
    save_checkpoint,
)
from .ddp import unwrap_model, wrap_ddp
from .env_defaults import EnvDefaults, apply_env_defaults, check_data_path
from .environment import (
    DrvfsMount,
    EnvironmentInfo,
    GpuInfo,
    detect_environment,
    is_wsl2,
    parse_drvfs_mounts,
)
from .launch import RankFailedError, free_port, launch_local
from .model_tools import apply_activation_checkpointing, freeze, trainable_parameters, unfreeze
from .precision import Amp, AmpConfig, PrecisionChoice, choose_precision, enable_tf32
from .process_group import (
    DistInfo,
    cleanup,
    get_rank,
    get_world_size,
    init_distributed,
    is_main_process,
    rank_zero_only,
)
from .train_state import (
    capture_rng_state,
    restore_rng_state,
    restore_training_state,
    training_state,
)

__version__ = _metadata.version("tj-dist")  # one source of truth: pyproject.toml

# The Ray session and the local multi-node cluster import Ray (the ``ray`` extra): loaded on first
# use of their names only, so torch.distributed users never pay for Ray.
_RAY = {
    "RaySession": "tj_dist.ray_session",
    "RaySessionConfig": "tj_dist.ray_session",
    "RaySessionResult": "tj_dist.ray_session",
    "derive_caps": "tj_dist.ray_session",
    "LocalCluster": "tj_dist.ray_cluster",
}


def __getattr__(name: str) -> object:
    """Load the Ray names of ``_RAY`` on first use."""
    module = _RAY.get(name)
    if module is None:
        raise AttributeError(f"module 'tj_dist' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "Amp",
    "AmpConfig",
    "CheckpointError",
    "CheckpointInfo",
    "CorruptCheckpointError",
    "DistInfo",
    "DrvfsMount",
    "EnvDefaults",
    "EnvironmentInfo",
    "GpuInfo",
    "GradAccumulator",
    "LoadedCheckpoint",
    "LocalCluster",
    "MicroBatch",
    "PrecisionChoice",
    "RankFailedError",
    "RaySession",
    "RaySessionConfig",
    "RaySessionResult",
    "__version__",
    "apply_activation_checkpointing",
    "apply_env_defaults",
    "capture_rng_state",
    "check_data_path",
    "choose_precision",
    "cleanup",
    "derive_caps",
    "detect_environment",
    "die_with_parent",
    "enable_tf32",
    "free_port",
    "freeze",
    "get_rank",
    "get_world_size",
    "init_distributed",
    "is_main_process",
    "is_wsl2",
    "launch_local",
    "list_checkpoints",
    "load_checkpoint",
    "load_latest",
    "parse_drvfs_mounts",
    "rank_zero_only",
    "restore_rng_state",
    "restore_training_state",
    "save_checkpoint",
    "trainable_parameters",
    "training_state",
    "unfreeze",
    "unwrap_model",
    "wrap_ddp",
]
