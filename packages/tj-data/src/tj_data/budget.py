"""The loader's default RAM budget: a tj-data policy on top of tj-monitor's memory limit.

The limit itself (min(physical RAM, the tightest cgroup v2/v1 limit)) is a machine fact and
lives in tj-monitor, once (`tj_monitor.memory_limit`); tj-data neither copies nor re-exports it.
"""

from __future__ import annotations

from tj_monitor import memory_limit

__all__ = ["default_budget"]


def default_budget(fraction: float = 0.5, *, limit: int | None = None) -> int:
    """A loader budget: `fraction` of the container-aware limit (`tj_monitor.memory_limit`;
    the rest is for the model, the OS and other processes). `limit` overrides the limit."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction={fraction}: expected 0 < fraction <= 1")
    return int(fraction * (memory_limit() if limit is None else limit))
