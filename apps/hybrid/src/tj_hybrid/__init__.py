"""TJ Transport's three-phase trainer (phase 1 today; phases 2 and 3 come next).

Entry points: ``uv run apps/hybrid --phase all`` (or the ``tj-hybrid`` console script) and
``uv run apps/hybrid doctor``. Library use: ``load_config`` then ``run_phase1``.
"""

from tj_hybrid import _warnings  # noqa: F401  (first: silences one import-time warning)
from tj_hybrid.config import HybridConfig, load_config
from tj_hybrid.doctor import Check, run_checks
from tj_hybrid.phase1 import run_phase1
from tj_hybrid.run_dir import PhaseDir, RunDir

__version__ = "0.1.0"

__all__ = [
    "Check",
    "HybridConfig",
    "PhaseDir",
    "RunDir",
    "__version__",
    "load_config",
    "run_checks",
    "run_phase1",
]
