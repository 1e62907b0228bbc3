"""Shared fixtures: synthetic traffic windows, a GraphBatch stand-in, random batches, permutations."""

from __future__ import annotations

import dataclasses
import itertools
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import pytest

# torch_geometric calls torch.jit.script at import time, which torch 2.15 deprecates
warnings.filterwarnings(
    "ignore", message="`torch.jit.script` is deprecated", category=FutureWarning
)

import torch  # noqa: E402
from torch import Tensor  # noqa: E402
from torch_geometric.data import Batch, Data  # noqa: E402

from tj_models import FeatureLayout, TrafficAgent, edge_features, radius_edges  # noqa: E402
from tj_models.synthetic import (  # noqa: E402
    SyntheticTrafficConfig,
    collate_windows,
    synthetic_windows,
)

# Tests run on 2 shared cores: OpenMP spinning across threads made tiny-model steps ~20x slower.
torch.set_num_threads(1)


@dataclass
class MiniBatch:
    """Stands in for tj-data's GraphBatch (not importable from tj-models): PyG names, plain tensors."""

    x: Tensor
    edge_index: Tensor
    edge_attr: Tensor
    batch: Tensor
    ptr: Tensor
    movement: Tensor
    vehicle_id: Tensor
    y_next: Tensor
    y_mask: Tensor
    risk: Tensor
    phase: Tensor
    time_in_phase: Tensor
    phase_count: Tensor


def to_mini(b: Batch) -> MiniBatch:
    return MiniBatch(**{f.name: getattr(b, f.name) for f in dataclasses.fields(MiniBatch)})


def random_batch(counts: list[int], *, seed: int = 0, phases: list[int] | None = None) -> Batch:
    """Random vehicle graphs with the given node counts (0 = an empty intersection)."""
    g = torch.Generator().manual_seed(seed)
    data = []
    vid = 0
    for i, n in enumerate(counts):
        x = torch.randn(n, 9, generator=g) * torch.tensor([30, 30, 5, 1, 1, 1, 50, 20, 1.0])
        x[:, 2] = x[:, 2].abs()
        x[:, 8] = 4.5
        ang = torch.rand(n, generator=g) * 6.28
        x[:, 4], x[:, 5] = ang.sin(), ang.cos()
        ei = radius_edges(x[:, :2], torch.tensor([0, n]), torch.zeros(n, dtype=torch.long), 30.0, 4)
        k = phases[i] if phases else 2 + i % 3
        data.append(
            Data(
                x=x,
                edge_index=ei,
                edge_attr=edge_features(x, ei, FeatureLayout(), "math"),
                movement=torch.randint(-1, 12, (n,), generator=g),
                vehicle_id=torch.arange(vid, vid + n),
                y_next=x + 0.1,
                y_mask=torch.rand(n, generator=g) > 0.2,
                risk=(torch.rand(n, generator=g) > 0.8).float(),
                phase=torch.tensor([i % k]),
                time_in_phase=torch.tensor([float(3 * i)]),
                phase_count=torch.tensor([k]),
                num_nodes=n,
            )
        )
        vid += n
    return Batch.from_data_list(data)


def permute_within_graphs(b: Batch | MiniBatch, seed: int) -> tuple[MiniBatch, Tensor]:
    """Shuffle nodes inside each graph (and the edge order); returns the batch and ``perm``
    with ``new.x == old.x[perm]``."""
    g = torch.Generator().manual_seed(seed)
    ptr = b.ptr.tolist()
    perm = torch.cat([torch.randperm(e - s, generator=g) + s for s, e in itertools.pairwise(ptr)])
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel())
    eperm = torch.randperm(b.edge_index.shape[1], generator=g)
    fields = {f.name: getattr(b, f.name) for f in dataclasses.fields(MiniBatch)}
    for name in ("x", "movement", "vehicle_id", "y_next", "y_mask", "risk"):
        fields[name] = fields[name][perm]
    fields["edge_index"] = inv[b.edge_index[:, eperm]]
    fields["edge_attr"] = b.edge_attr[eperm]
    return MiniBatch(**fields), perm


@pytest.fixture(scope="session")
def windows() -> list:
    cfg = SyntheticTrafficConfig(steps=9, warmup_steps=8, arrival_rate=0.5)
    return synthetic_windows(cfg, streams=3, window=6, stride=2, seed=1)


@pytest.fixture(scope="session")
def steps(windows: list) -> list[Batch]:
    """A window batch: 6 steps of 4 graphs (graph b of every step is one stream)."""
    return collate_windows(windows[:4])


@pytest.fixture
def tiny_agent() -> TrafficAgent:
    torch.manual_seed(0)
    return TrafficAgent.preset("tiny")


@pytest.fixture
def make_batch() -> Callable[..., Batch]:
    return random_batch


@pytest.fixture
def permute() -> Callable[..., tuple[MiniBatch, Tensor]]:
    return permute_within_graphs


@pytest.fixture
def mini() -> Callable[[Batch], MiniBatch]:
    return to_mini
