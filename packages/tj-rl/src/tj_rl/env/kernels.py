"""The step's feature functions by ``EnvConfig.kernel``: numpy, or their numba-compiled twins
(bit for bit the same arrays; numba is imported only by processes that choose it)."""

from __future__ import annotations

from typing import Any

from tj_rl.env.costs import safety_counts
from tj_rl.env.graphs import graph_batch
from tj_rl.env.observation import lane_batch

__all__ = ["step_kernels"]


def step_kernels(name: str) -> tuple[Any, Any, Any]:
    """The step's feature functions (graphs, lane aggregates, safety counts): numpy, or their
    compiled twins (imported only when chosen: numba's import costs every process that loads it)."""
    if name == "numba":
        from tj_rl.env import numba_kernels as nk

        return nk.graph_batch_numba, nk.lane_batch_numba, nk.safety_counts_numba
    return graph_batch, lane_batch, safety_counts
