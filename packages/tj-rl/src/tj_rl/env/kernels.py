"""The step's feature functions by ``EnvConfig.kernel``: numpy, or their numba-compiled twins
(bit for bit the same arrays; numba is imported only by processes that choose it)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tj_rl.env.costs import safety_counts
from tj_rl.env.features import ROW_COLUMNS
from tj_rl.env.graphs import graph_batch
from tj_rl.env.observation import lane_batch

__all__ = ["step_kernels", "warm_up"]


def step_kernels(name: str) -> tuple[Any, Any, Any]:
    """The step's feature functions (graphs, lane aggregates, safety counts): numpy, or their
    compiled twins (imported only when chosen: numba's import costs every process that loads it)."""
    if name == "numba":
        from tj_rl.env import numba_kernels as nk

        return nk.graph_batch_numba, nk.lane_batch_numba, nk.safety_counts_numba
    return graph_batch, lane_batch, safety_counts


def warm_up(kernels: tuple[Any, Any, Any], config: Any, lanes: Any, lights: int) -> None:
    """Run the step's feature functions once on an empty step, with the argument types of
    ``SumoSession.read_lights`` (read-only float64 rows, int counts): compiled kernels load (or,
    after an install, compile) their machine code here, when the env is built, instead of inside
    an episode's first steps (~5 ms for the safety kernel, first used in ``step``)."""
    graph_batch_fn, lane_batch_fn, safety_fn = kernels
    data = np.frombuffer(b"", np.float64).reshape(lights, 0, len(ROW_COLUMNS))
    counts = [0] * lights
    batch = graph_batch_fn(
        data, counts, config.graph, max_nodes=config.max_nodes, max_edges=config.max_edges
    )
    lane_batch_fn(data, counts, lanes)
    safety_fn(batch, ttc_threshold=config.ttc_threshold, hard_brake_decel=config.hard_brake_decel)
