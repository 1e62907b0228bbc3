"""TJ Transport's three-phase trainer.

Entry points: ``uv run apps/hybrid --phase all`` (or the ``tj-hybrid`` console script) and
``uv run apps/hybrid doctor``. Library use: ``load_config``, then ``tj_hybrid.runner.run`` with
phases from ``select_phases``; a finished run's results read back typed with ``read_result``,
``read_evaluation``, ``read_metrics`` and ``read_phase1_summary`` (``tj_hybrid.results``); phase
2's RL setup and PPO config with ``prepare_rl`` and ``build_ppo``; its teacher, demonstrations and
clone's module with ``make_teacher``, ``record_teacher`` and ``imitation_module`` (loaded on first
use: they live in phase 2's folder); held-out evaluation beside the baselines with
``evaluate_policies``. Importing this package is light: no torch, no Ray, no phase; each phase's
module is imported when it runs.
"""

from importlib import metadata as _metadata

from tj_hybrid.config import HybridConfig, LoadedConfig, auto_profile, load_config
from tj_hybrid.config.phase2 import CLONABLE
from tj_hybrid.data_paths import scenario_data_dir
from tj_hybrid.evaluation.heldout import evaluate_policies
from tj_hybrid.phase_api import PhaseResult
from tj_hybrid.phases import REGISTRY, PhaseSpec, select_phases
from tj_hybrid.results import (
    Evaluation,
    HeldOutSet,
    Phase1Summary,
    ResultsError,
    Spread,
    WorldModelErrors,
    phase_dir,
    read_evaluation,
    read_metrics,
    read_phase1_summary,
    read_result,
)
from tj_hybrid.rl_setup import RLSetup, build_ppo, prepare_rl
from tj_hybrid.run_dir import PhaseDir, RunDir

__version__ = _metadata.version("tj-hybrid")

# phase 2's teacher pieces, imported on first use (PEP 562): importing the package imports no phase
_PHASE2_IMITATION = ("imitation_module", "make_teacher", "record_teacher")


def __getattr__(name: str) -> object:
    if name in _PHASE2_IMITATION:
        import importlib

        return getattr(importlib.import_module("tj_hybrid.phase2.imitation"), name)
    raise AttributeError(f"module 'tj_hybrid' has no attribute {name!r}")

__all__ = [
    "CLONABLE",
    "REGISTRY",
    "Evaluation",
    "HeldOutSet",
    "HybridConfig",
    "LoadedConfig",
    "Phase1Summary",
    "PhaseDir",
    "PhaseResult",
    "PhaseSpec",
    "RLSetup",
    "ResultsError",
    "RunDir",
    "Spread",
    "WorldModelErrors",
    "__version__",
    "auto_profile",
    "build_ppo",
    "evaluate_policies",
    "imitation_module",
    "load_config",
    "make_teacher",
    "phase_dir",
    "prepare_rl",
    "read_evaluation",
    "read_metrics",
    "read_phase1_summary",
    "read_result",
    "record_teacher",
    "scenario_data_dir",
    "select_phases",
]
