"""Synthetic traffic windows for the models suite: PyG batches shaped like tj-rl's snapshots.

``graphs`` intersections of Poisson(``vehicles``) vehicles each, every vehicle linked to its 4
nearest neighbours within 30 m (tj-rl's snapshot defaults, math heading); vehicles keep their ids
and drive towards the stop line between steps, so the world model sees matching nodes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["EDGE_RADIUS_M", "MAX_NEIGHBOURS", "bench_window", "load_windows", "save_windows"]

EDGE_RADIUS_M = 30.0
MAX_NEIGHBOURS = 4
STEP_S = 2.0


def _graph(n: int, t: int, theta: Any, dist: Any, speed: Any, vid: Any, movement: Any,
           risk: Any) -> Any:  # fmt: skip
    import torch
    from torch_geometric.data import Data

    from tj_models import FeatureLayout, edge_features, radius_edges

    d = dist - speed * STEP_S * t
    zeros = torch.zeros(n)
    x = torch.stack([-torch.cos(theta) * d, -torch.sin(theta) * d, speed, zeros,
                     torch.sin(theta), torch.cos(theta), d, zeros, torch.full((n,), 4.5)], -1)  # fmt: skip
    ei = radius_edges(x[:, :2], torch.tensor([0, n]), torch.zeros(n, dtype=torch.long),
                      EDGE_RADIUS_M, MAX_NEIGHBOURS)  # fmt: skip
    return Data(
        x=x, edge_index=ei, edge_attr=edge_features(x, ei, FeatureLayout(), "math"),
        movement=movement, vehicle_id=vid, y_next=x, y_mask=torch.ones(n, dtype=torch.bool),
        risk=risk, phase=torch.tensor([t % 2]), time_in_phase=torch.tensor([STEP_S * t]),
        phase_count=torch.tensor([2]), num_nodes=n,
    )  # fmt: skip


def bench_window(graphs: int, vehicles: float, steps: int, seed: int) -> list[Any]:
    """``steps`` PyG ``Batch`` es of ``graphs`` streams each (one per time step)."""
    import torch
    from torch_geometric.data import Batch

    g = torch.Generator().manual_seed(seed)
    window: list[list[Any]] = [[] for _ in range(steps)]
    for b in range(graphs):
        n = int(torch.poisson(torch.tensor(float(vehicles)), generator=g))
        theta = torch.randint(0, 4, (n,), generator=g).float() * (torch.pi / 2)
        dist = torch.rand(n, generator=g) * 120
        speed = torch.rand(n, generator=g) * 14
        vid = torch.arange(n) + 1000 * b
        movement = torch.randint(0, 12, (n,), generator=g)
        for t in range(steps):
            risk = (torch.rand(n, generator=g) < 0.1).float()
            window[t].append(_graph(n, t, theta, dist, speed, vid, movement, risk))
    return [Batch.from_data_list(step) for step in window]


def save_windows(path: Path, graphs: int, vehicles: float, steps: int) -> Path:
    """Build the suite's two windows once (``full``: seed 1, ``graphs`` streams; ``small``: seed
    2, one stream, for the untimed first step) and save them for the children to load."""
    import torch

    windows = {"full": bench_window(graphs, vehicles, steps, seed=1),
               "small": bench_window(1, vehicles, steps, seed=2)}  # fmt: skip
    torch.save(windows, path)
    return path


def load_windows(path: Path) -> dict[str, list[Any]]:
    """``{"full": [...], "small": [...]}`` as ``save_windows`` wrote them (our own file)."""
    import torch

    return torch.load(path, weights_only=False)
