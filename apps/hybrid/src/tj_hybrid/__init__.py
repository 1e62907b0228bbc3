"""TJ Transport's three-phase trainer.

Entry points: ``uv run apps/hybrid --phase all`` (or the ``tj-hybrid`` console script) and
``uv run apps/hybrid doctor``. Library use: ``load_config``, then ``tj_hybrid.runner.run`` with
phases from ``tj_hybrid.phases.select_phases``. Importing this package is light: no torch, no
phase; each phase's module is imported when it runs.
"""

from importlib import metadata as _metadata

from tj_hybrid.config import HybridConfig, LoadedConfig, load_config
from tj_hybrid.phases import REGISTRY, PhaseSpec, select_phases
from tj_hybrid.run_dir import PhaseDir, RunDir

__version__ = _metadata.version("tj-hybrid")

__all__ = [
    "REGISTRY",
    "HybridConfig",
    "LoadedConfig",
    "PhaseDir",
    "PhaseSpec",
    "RunDir",
    "__version__",
    "load_config",
    "select_phases",
]
