"""The suites, one module each, in the order ``uv run apps/bench`` runs them.

Each module defines ``SUITE`` (a ``tj_bench.Suite``). They are imported only when selected, so a
suite whose dependencies are missing fails alone, with its import error as the reason.
"""

from __future__ import annotations

import importlib

from tj_bench.suite import Suite

__all__ = ["NAMES", "load_suite"]

NAMES = (
    "data", "loader", "quant", "cache", "env", "models", "dist", "monitor",
    "phase1", "phase2", "phase3", "imitation", "multinode",
)  # fmt: skip


def load_suite(name: str) -> Suite:
    """Import ``tj_bench.suites.<name>`` and return its ``SUITE``."""
    if name not in NAMES:
        raise KeyError(f"unknown suite {name!r}; suites: {', '.join(NAMES)}")
    module = importlib.import_module(f"tj_bench.suites.{name}")
    suite = module.SUITE
    if not isinstance(suite, Suite) or suite.name != name:
        raise TypeError(f"tj_bench.suites.{name}.SUITE is not the Suite named {name!r}")
    return suite
