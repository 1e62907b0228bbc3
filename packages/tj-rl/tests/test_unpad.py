"""Unpadding (``tj_rl.control.unpad``): a hand-built padded batch into one graph batch (masks
honoured, input untouched), and each light's green count, where the controller's program order
wraps, on SUMO's ``square`` (lights with 1 and 2 greens padded to 4). The per-sample-loop
equivalence on random observations is in ``test_rllib_module.py``."""

from __future__ import annotations

import numpy as np
import torch

from tj_models.controller import _program_order
from tj_rl.control.unpad import unpad_observations
from tj_rl.env import EnvConfig, Scenario, TrafficSignalCore
from tj_rl.env.runtime import sumo_home


def _padded(n_nodes: int, n_edges: int, real_nodes, edges, n_phases: int = 3) -> dict:
    """One padded observation: ``real_nodes`` slots are real (node features = 10 * slot + column),
    ``edges`` [(src, dst, real)] local slots (edge features = 100 + 10 * index + column)."""
    nodes = np.zeros((n_nodes, 9), np.float32)
    mask = np.zeros(n_nodes, np.int8)
    for s in real_nodes:
        nodes[s] = 10 * s + np.arange(9)
        mask[s] = 1
    ei = np.zeros((2, n_edges), np.int64)
    ea = np.zeros((n_edges, 4), np.float32)
    em = np.zeros(n_edges, np.int8)
    for k, (a, b, real) in enumerate(edges):
        ei[:, k] = (a, b)
        ea[k] = 100 + 10 * k + np.arange(4)
        em[k] = real
    phase = np.zeros(n_phases + 3, np.float32)
    return {
        "nodes": nodes, "node_mask": mask, "movement": np.arange(n_nodes, dtype=np.int64) + 1,
        "edge_index": ei, "edge_attr": ea, "edge_mask": em, "phase": phase,
        "time_in_phase": np.zeros(1, np.float32), "action_mask": np.ones(n_phases, np.int8),
    }  # fmt: skip


def test_unpad_hand_built_batch(to_batch) -> None:
    """Three samples of 4 node and 4 edge slots: a prefix of 3 real nodes with 2 real edges (and
    a padded one), an empty sample, and real nodes in slots 1 and 3 only, whose edges include one
    into a padding node (dropped: masks are honoured) and a masked one."""
    a = _padded(4, 4, [0, 1, 2], [(1, 0, 1), (2, 1, 1), (0, 0, 0)])
    b = _padded(4, 4, [], [])
    c = _padded(4, 4, [1, 3], [(3, 1, 1), (0, 3, 1), (1, 3, 0), (1, 3, 1)])
    a["phase"][1], c["phase"][2] = 1.0, 1.0  # current greens 1 and 2; b: none (-1)
    a["time_in_phase"][0], b["time_in_phase"][0], c["time_in_phase"][0] = 12.0, 0.0, 30.0
    batch = to_batch([a, b, c])
    before = {k: v.clone() for k, v in batch.items()}
    g = unpad_observations(batch)
    assert g.ptr.tolist() == [0, 3, 3, 5]  # node offsets per sample
    assert g.batch.tolist() == [0, 0, 0, 2, 2]
    x = [a["nodes"][0], a["nodes"][1], a["nodes"][2], c["nodes"][1], c["nodes"][3]]
    np.testing.assert_array_equal(g.x.numpy(), np.stack(x))
    assert g.movement.tolist() == [1, 2, 3, 2, 4]
    # sample a: local ids + 0; sample c: slot 1 -> node 3, slot 3 -> node 4
    assert g.edge_index.tolist() == [[1, 2, 4, 3], [0, 1, 3, 4]]
    edge_attr = [a["edge_attr"][0], a["edge_attr"][1], c["edge_attr"][0], c["edge_attr"][3]]
    np.testing.assert_array_equal(g.edge_attr.numpy(), np.stack(edge_attr))
    assert g.phase.tolist() == [1, -1, 2] and g.time_in_phase.tolist() == [12.0, 0.0, 30.0]
    assert g.x.dtype == torch.float32 and g.edge_index.dtype == torch.int64
    for k, v in batch.items():  # the input is untouched
        assert torch.equal(v, before[k]) and v.dtype == before[k].dtype


def test_unpad_counts_each_lights_greens_so_program_order_wraps_there(to_batch) -> None:
    """SUMO's ``tools/game/square`` (lights with 1 or 2 greens) padded to 4 actions: the graph
    batch's ``phase_count`` is each light's own green count (as phase 1's recorded batches have
    it), so the controller's program order wraps at the light's greens, not at the padding."""
    root = sumo_home() / "tools/game/square"
    sc = Scenario(net_file=root / "square.net.xml", route_files=(root / "square.rou.xml",),
                  end=30.0)  # fmt: skip
    env = TrafficSignalCore(EnvConfig(metrics=False, max_phases=4), scenario=sc)
    try:
        obs, _ = env.reset(seed=0)
        greens = {i: lt.program.n_greens for i, lt in env.lights.items()}
    finally:
        env.close()
    ids = sorted(obs)
    g = unpad_observations(to_batch([obs[i] for i in ids]))
    assert g.phase_count.tolist() == [greens[i] for i in ids]
    assert {1, 2} <= set(greens.values())
    order = _program_order(g, 4)
    for row, i, cur in zip(order.tolist(), ids, g.phase.tolist(), strict=True):
        n = greens[i]
        want = [1 + (j - cur) % n for j in range(n)] if cur >= 0 else [0] * n
        assert row[:n] == want, (i, row)  # the green before the current one is the last: n
