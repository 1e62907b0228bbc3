"""The ``lanes`` arrival columns (``arriving_5s``, ``arriving_10s``): counted by hand on a small
case with both feature kernels, and an agent made for the three older columns still acts on them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from tj_rl.env import EnvConfig, TrafficSignalCore
from tj_rl.env.features import PAD_ROW, ROW_COLUMNS
from tj_rl.env.numba_kernels import lane_batch_numba
from tj_rl.env.observation import LANE_FEATURES, LaneLayout, lane_batch

_COL = {c: i for i, c in enumerate(ROW_COLUMNS)}
# (movement, speed m/s, distance to the stop line m): seconds to the line in the comment
_VEHICLES = [
    (0, 10.0, 40.0),  # 4 s: within 5 s and 10 s
    (0, 10.0, 50.0),  # 5 s exactly: within both
    (0, 10.0, 80.0),  # 8 s: within 10 s only
    (0, 10.0, 150.0),  # 15 s: neither
    (0, 0.05, 3.0),  # halting: neither
    (1, 12.0, -4.0),  # past the stop line: neither
    (1, 0.1, 0.5),  # just moving, 5 s: within both
    (2, 8.0, 60.0),  # 7.5 s: within 10 s only
]


def _data(pad: int) -> tuple[np.ndarray, list[int]]:
    data = np.empty((1, len(_VEHICLES) + pad, len(ROW_COLUMNS)), np.float32)
    data[:] = PAD_ROW
    for i, (move, speed, dist) in enumerate(_VEHICLES):
        data[0, i, _COL["movement"]] = move
        data[0, i, _COL["speed"]] = speed
        data[0, i, _COL["dist_to_stop_line"]] = dist
        data[0, i, _COL["waiting_time"]] = 0.0
    return data, [len(_VEHICLES)]


@pytest.mark.parametrize("kernel", [lane_batch, lane_batch_numba])
@pytest.mark.parametrize("pad", [0, 3])
def test_arrival_columns_count_by_hand(kernel, pad: int) -> None:
    layout = LaneLayout(
        offsets=(0,), sizes=(4,), capacity=np.full(4, 10.0, np.float32),
        offset_array=np.zeros((1, 1), np.intp), incoming=np.array([True, True, True, False]),
    )  # fmt: skip
    data, counts = _data(pad)
    _, feats, queue = kernel(data, counts, layout)
    assert feats.shape == (4, len(LANE_FEATURES)) and feats.dtype == np.float32
    soon, later = LANE_FEATURES.index("arriving_5s"), LANE_FEATURES.index("arriving_10s")
    assert feats[:, soon].tolist() == [2.0, 1.0, 0.0, 0.0]
    assert feats[:, later].tolist() == [3.0, 1.0, 1.0, 0.0]
    assert feats[:, LANE_FEATURES.index("halting")].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert queue == 1.0


def test_an_agent_made_for_three_lane_columns_reads_the_first_three(default_sc, to_batch) -> None:
    from tj_models import TrafficAgent, TrafficAgentConfig
    from tj_rl.control.actor import Actor
    from tj_rl.control.fit import check_spaces

    core = TrafficSignalCore(EnvConfig(metrics=False), scenario=default_sc)
    try:
        light = core.possible_agents[0]
        greens, lanes = check_spaces(core.observation_spaces[light], core.action_spaces[light])
        obs, _ = core.reset(seed=0)
        for _ in range(6):  # vehicles on the approaches
            obs, *_ = core.step({light: 0})
    finally:
        core.close()
    batch = to_batch([obs[light]])
    assert batch["lanes"].shape[-1] == len(LANE_FEATURES) == 5

    def actor(stats: int) -> Actor:
        base = TrafficAgentConfig.preset("tiny", max_actions=greens)
        config = replace(base, gnn=replace(base.gnn, num_movements=lanes),
                         controller=replace(base.controller, movement_stats=stats))  # fmt: skip
        torch.manual_seed(0)
        return Actor.from_agent(TrafficAgent(config).eval())

    changed = dict(batch, lanes=batch["lanes"].clone())
    changed["lanes"][..., 3:] += 7.0  # other arrivals, the same first three columns
    with torch.no_grad():
        old = actor(3)
        assert torch.equal(old(batch).logits, old(changed).logits)
        new = actor(5)
        assert not torch.equal(new(batch).logits, new(changed).logits)
