"""Optional dependencies: what the ``report`` extra brings and the error when it is missing.

tj-monitor's core (sampling, limits, process-tree PSS, JSONL) needs psutil and numpy only, so
tj-data and tj-dist can depend on it without pulling a plotting stack. rich (tables, the live
view), matplotlib (PNG curves) and tensorboard (event files) come with
``pip install 'tj-monitor[report]'`` and are imported where they are used.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

__all__ = ["REPORT_EXTRA", "check_extra", "missing_extra", "require"]

REPORT_EXTRA = "tj-monitor[report]"


def missing_extra(module: str, feature: str) -> ImportError:
    """The error for ``feature`` when ``module`` (from the report extra) is not installed."""
    dist = module.split(".")[0]
    return ImportError(f"{feature} needs {dist}: pip install '{REPORT_EXTRA}'")


def require(module: str, feature: str) -> ModuleType:
    """Import ``module`` for ``feature``, or raise ``missing_extra``'s error."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing_extra(module, feature) from exc


def check_extra(module: str, feature: str) -> None:
    """Raise ``missing_extra``'s error now when ``module`` is not installed, without importing
    it (for objects that import it later, at first use)."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or blocked in sys.modules
        found = False
    if not found:
        raise missing_extra(module, feature)
