"""Phase 3's iteration batch and the frozen GNN's embedding cache.

``IterationBatch``: the RAM path and the spilled path (a tj-data store, memory-mapped) return the
same samples for the same indices, it spills only past its byte bound, ``column`` reads a field in
sample order, ``close`` removes the spill dir, nothing is added after ``seal``. ``EmbeddingCache``:
the cached path returns the computed path's node and risk tensors (per sample, in any micro-batch
order), counts hits and misses, ``enabled=False`` always computes, ``shrink`` frees.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tj_data import collate_graphs
from tj_data.live import sample_nbytes
from tj_hybrid.phase3.batch import EmbeddingCache, IterationBatch
from tj_models import RiskGNN, TrafficAgentConfig
from tj_rl.rollout.batch import rollout_graph
from tj_rl.rollout.samples import ROLLOUT_FIELDS, rollout_schema

MOVEMENTS = 16
# one light's observation shapes (what phase 3's plan hands the ranks): 4 phases, 6 lanes
SPACE = {"nodes": np.zeros((16, 9), np.float32), "edge_attr": np.zeros((32, 4), np.float32),
         "phase": np.zeros(4, np.float32), "action_mask": np.zeros(4, np.int8),
         "lanes": np.zeros((6, 3), np.float32), "lane_mask": np.zeros(6, np.int8),
         "phase_lanes": np.zeros((4, 6), np.int8)}  # fmt: skip
SCHEMA = rollout_schema(SPACE)


def _samples(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Rollout samples of the schema: 0-6 vehicles each (some graphs empty), random fields."""
    rng = np.random.default_rng(seed)
    dtypes = {f.name: f.dtype for f in SCHEMA.fields}
    out = []
    for i in range(n):
        nodes = int(rng.integers(0, 7)) if i else 0
        edges = int(rng.integers(0, 2 * nodes + 1))
        sample: dict[str, Any] = {
            "x": rng.normal(size=(nodes, 9)).astype(np.float32),
            "movement": rng.integers(-1, MOVEMENTS, nodes).astype(np.int64),
            "edge_index": rng.integers(0, max(nodes, 1), (2, edges)).astype(np.int32),
            "edge_attr": rng.normal(size=(edges, 4)).astype(np.float32),
            "phase": np.eye(4, dtype=np.float32)[i % 4],
            "time_in_phase": np.float32(rng.uniform(0, 60)),
            "action_mask": (rng.random(4) > 0.3).astype(np.int8),
            "lanes": rng.normal(size=(6, 3)).astype(np.float32),
            "lane_mask": (rng.random(6) > 0.3).astype(np.int8),
            "phase_lanes": (rng.random((4, 6)) > 0.5).astype(np.int8),
        }
        for name in ROLLOUT_FIELDS:
            value = rng.integers(0, 4) if np.dtype(dtypes[name]).kind == "i" else rng.normal()
            sample[name] = np.asarray(value, dtype=dtypes[name])[()]
        SCHEMA.validate_sample(sample, where=f"test sample {i}")
        out.append(sample)
    return out


def _assert_same(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert set(got) == set(want)
    for name, value in want.items():
        g = np.asarray(got[name])
        assert g.dtype == np.asarray(value).dtype, name
        np.testing.assert_array_equal(g, np.asarray(value), err_msg=name)


def _filled(samples: list[dict[str, Any]], ram_bytes: int, spill_dir: Path) -> IterationBatch:
    batch = IterationBatch(SCHEMA, ram_bytes=ram_bytes, spill_dir=spill_dir)
    for s in samples:
        batch.add(s)
    batch.seal()
    return batch


# ---------------------------------------------------------------------- IterationBatch
def test_ram_and_spilled_batches_return_the_same_samples(tmp_path: Path) -> None:
    samples = _samples(40)
    ram = _filled(samples, 1 << 30, tmp_path / "ram")
    disk = _filled(samples, 1, tmp_path / "disk")
    assert not ram.spilled and disk.spilled
    assert not (tmp_path / "ram").exists() and (tmp_path / "disk").is_dir()
    assert len(ram) == len(disk) == 40
    assert ram.nbytes == disk.nbytes == sum(sample_nbytes(s) for s in samples)
    idx = [7, 0, 39, 7, 12, 1, 0]  # unordered, repeated, the empty graph (0) included
    for a, b, i in zip(ram.take(idx), disk.take(idx), idx, strict=True):
        _assert_same(a, samples[i])
        _assert_same(b, samples[i])
    for name in ("advantage", "cost_advantage", "action", "version", "light"):
        want = np.stack([s[name] for s in samples])
        np.testing.assert_array_equal(ram.column(name), want)
        np.testing.assert_array_equal(disk.column(name), want)
        assert disk.column(name).dtype == want.dtype
    # what a micro-batch is made of: the two paths collate to the same batch
    for a, b in zip(collate_graphs(ram.take(idx), schema=SCHEMA).tensors().items(),
                    collate_graphs(disk.take(idx), schema=SCHEMA).tensors().items(),
                    strict=True):  # fmt: skip
        assert a[0] == b[0] and torch.equal(a[1], b[1]), a[0]
    ram.close()
    disk.close()
    assert not (tmp_path / "disk").exists()


def test_it_spills_only_past_its_bound(tmp_path: Path) -> None:
    samples = _samples(10, seed=1)
    bound = sum(sample_nbytes(s) for s in samples[:6])
    batch = IterationBatch(SCHEMA, ram_bytes=bound, spill_dir=tmp_path / "spill")
    for s in samples[:6]:
        batch.add(s)
    assert not batch.spilled and not (tmp_path / "spill").exists()  # exactly at the bound
    batch.add(samples[6])
    assert batch.spilled and (tmp_path / "spill").is_dir()
    for s in samples[7:]:
        batch.add(s)
    batch.seal()
    assert batch.spilled and len(batch) == 10
    for got, want in zip(batch.take(range(10)), samples, strict=True):
        _assert_same(got, want)
    batch.close()
    assert not (tmp_path / "spill").exists()
    batch.close()  # idempotent


@pytest.mark.parametrize("ram_bytes", [1 << 30, 1], ids=["ram", "spilled"])
def test_nothing_is_added_after_seal(tmp_path: Path, ram_bytes: int) -> None:
    samples = _samples(4, seed=2)
    batch = _filled(samples[:3], ram_bytes, tmp_path / "spill")
    with pytest.raises(RuntimeError, match=r"add after seal"):
        batch.add(samples[3])
    assert len(batch) == 3 and batch.nbytes == sum(sample_nbytes(s) for s in samples[:3])
    _assert_same(batch.take([2])[0], samples[2])
    batch.close()


def test_a_spilled_batch_is_read_only_once_sealed(tmp_path: Path) -> None:
    samples = _samples(3, seed=3)
    batch = IterationBatch(SCHEMA, ram_bytes=1, spill_dir=tmp_path / "spill")
    for s in samples:
        batch.add(s)
    with pytest.raises(RuntimeError, match=r"take before seal"):
        batch.take([0])
    batch.seal()
    _assert_same(batch.take([0])[0], samples[0])
    batch.close()


# ---------------------------------------------------------------------- EmbeddingCache
@pytest.fixture(scope="module")
def gnn() -> RiskGNN:
    base = TrafficAgentConfig.preset("tiny", max_actions=4).gnn
    torch.manual_seed(0)
    return RiskGNN(replace(base, num_movements=MOVEMENTS)).eval()


def _graph(samples: list[dict[str, Any]], keys: list[int]) -> Any:
    return rollout_graph(collate_graphs([samples[k] for k in keys], schema=SCHEMA))


@torch.no_grad()
def test_cached_embeddings_are_the_computed_ones(gnn: RiskGNN) -> None:
    samples = _samples(12, seed=4)
    cache = EmbeddingCache(1 << 20)
    keys = [0, 1, 2, 3, 4, 5]
    graph = _graph(samples, keys)
    direct = gnn(graph)
    first = cache.encode(gnn, graph, keys)
    assert (cache.hits, cache.misses) == (0, 6)
    torch.testing.assert_close(first.node, direct.node)
    torch.testing.assert_close(first.risk_logit, direct.risk_logit)
    again = cache.encode(gnn, graph, keys)  # epoch 2: every key is there
    assert (cache.hits, cache.misses) == (6, 6)
    assert torch.equal(again.node, first.node) and torch.equal(again.risk_logit, first.risk_logit)
    assert again.graph is graph and again.node.shape == (int(graph.ptr[-1]), gnn.out_dim)
    # another micro-batch of cached samples, in another order: each sample's own rows
    keys = [5, 2, 0, 3]
    graph = _graph(samples, keys)
    out = cache.encode(gnn, graph, keys)
    assert (cache.hits, cache.misses) == (10, 6)
    direct = gnn(graph)
    torch.testing.assert_close(out.node, direct.node, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.risk_logit, direct.risk_logit, rtol=1e-5, atol=1e-5)
    assert cache.stats()["hit_rate"] == pytest.approx(10 / 16)
    # one key missing: the micro-batch is computed (and cached)
    keys = [4, 8]
    out = cache.encode(gnn, _graph(samples, keys), keys)
    assert (cache.hits, cache.misses) == (10, 8)
    torch.testing.assert_close(out.node, gnn(_graph(samples, keys)).node)
    cache.encode(gnn, _graph(samples, [8]), [8])
    assert (cache.hits, cache.misses) == (11, 8)
    assert cache.stats()["bytes"] == cache.cache.nbytes > 0


@torch.no_grad()
def test_disabled_cache_always_computes(gnn: RiskGNN) -> None:
    samples = _samples(6, seed=5)
    cache = EmbeddingCache(1 << 20, enabled=False)
    keys = [1, 2, 3]
    graph = _graph(samples, keys)
    for _ in range(3):
        out = cache.encode(gnn, graph, keys)
        torch.testing.assert_close(out.node, gnn(graph).node)
    assert (cache.hits, cache.misses) == (0, 9)
    assert cache.stats() == {"hit_rate": 0.0, "bytes": 0.0}


@torch.no_grad()
def test_shrink_frees_and_evicted_samples_are_computed_again(gnn: RiskGNN) -> None:
    samples = _samples(12, seed=6)
    cache = EmbeddingCache(1 << 20)
    keys = list(range(1, 12))
    graph = _graph(samples, keys)
    cache.encode(gnn, graph, keys)
    full = cache.cache.nbytes
    freed = cache.shrink(full // 2)
    assert freed >= full // 2 and cache.cache.nbytes == full - freed
    out = cache.encode(gnn, graph, keys)  # some evicted: computed again, same values
    assert (cache.hits, cache.misses) == (0, 22)
    torch.testing.assert_close(out.node, gnn(graph).node)
    assert cache.shrink(1 << 30) == full and cache.cache.nbytes == 0
    cache.clear()
    assert cache.stats()["bytes"] == 0.0
