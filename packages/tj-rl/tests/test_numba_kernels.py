"""The compiled feature kernels (``EnvConfig(kernel="numba")``) give numpy's arrays bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from tj_rl.env import EnvConfig
from tj_rl.env.costs import safety_counts
from tj_rl.env.features import PAD_ROW, ROW_COLUMNS, GraphConfig
from tj_rl.env.graphs import PaddedGraphs, graph_batch
from tj_rl.env.numba_kernels import graph_batch_numba, lane_batch_numba, safety_counts_numba
from tj_rl.env.observation import LaneLayout, lane_batch

_COL = {c: i for i, c in enumerate(ROW_COLUMNS)}


def _rows(rng: np.random.Generator, counts: list[int], spread: float, ties: bool) -> np.ndarray:
    """A step's ``data`` [L, m, 16] as ``session.read_lights`` builds it (real rows, then pads)."""
    data = np.empty((len(counts), max(counts), len(ROW_COLUMNS)))
    data[:] = PAD_ROW
    for li, c in enumerate(counts):
        r = data[li, :c]
        centre = rng.uniform(-1000, 1000, 2)
        rel = rng.uniform(-spread, spread, (c, 2))
        if ties and c > 5:
            rel[1] = rel[0]  # same place: equal distances everywhere
            rel[3] = -rel[2]  # mirrored: equal distance to the centre
            rel[5] = rel[4][::-1]
        rad = np.deg2rad(rng.uniform(0, 360, c))
        r[:, _COL["rel_x"]], r[:, _COL["rel_y"]] = rel[:, 0], rel[:, 1]
        r[:, _COL["x"]], r[:, _COL["y"]] = rel[:, 0] + centre[0], rel[:, 1] + centre[1]
        r[:, _COL["speed"]] = rng.uniform(0, 15, c) * (rng.random(c) > 0.3)
        r[:, _COL["accel"]] = rng.normal(0, 3, c)
        r[:, _COL["heading_sin"]], r[:, _COL["heading_cos"]] = np.cos(rad), np.sin(rad)
        r[:, _COL["dist_to_stop_line"]] = rng.uniform(-5, 100, c)
        r[:, _COL["waiting_time"]] = rng.uniform(0, 50, c) * (rng.random(c) > 0.5)
        r[:, _COL["length"]] = rng.choice([4.5, 5.0, 12.0], c)
        r[:, _COL["movement"]] = rng.integers(0, 6, c)
        r[:, _COL["dist2"]] = rel[:, 0] * rel[:, 0] + rel[:, 1] * rel[:, 1]
    return data


def assert_same_batch(a: PaddedGraphs, b: PaddedGraphs) -> None:
    for name in ("nodes", "node_mask", "movement", "edge_index", "edge_attr", "edge_mask"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert np.array_equal(x, y), f"{name} differs at {np.argwhere(x != y)[:3].tolist()}"
    for name in ("num_nodes", "num_edges", "dropped_nodes", "dropped_edges"):
        assert list(getattr(a, name)) == list(getattr(b, name)), name
    for li, n in enumerate(a.num_nodes):  # beyond the real nodes order is padding
        assert np.array_equal(a.order[li, :n], b.order[li, :n]), "order"


def _cases(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for i in range(n):
        counts = rng.integers(0, 90, int(rng.integers(1, 6))).tolist()
        counts[0] = max(counts[0], 1)
        cfg = GraphConfig(
            edge_radius=float(rng.choice([5.0, 30.0, 80.0])),
            k_nearest=int(rng.integers(1, 7)),
            conflict_distance=float(rng.choice([1.0, 2.5, 10.0])),
        )
        caps = {
            "max_nodes": int(rng.choice([4, 32, 64])),
            "max_edges": int(rng.choice([3, 64, 512])),
        }
        yield (
            _rows(rng, counts, float(rng.choice([10.0, 60.0, 200.0])), i % 2 == 0),
            counts,
            cfg,
            caps,
        )


def test_graph_batch_equals_numpy_bit_for_bit() -> None:
    dropped = [0, 0]
    for data, counts, cfg, caps in _cases(150):
        a = graph_batch(data, counts, cfg, **caps)
        assert_same_batch(a, graph_batch_numba(data, counts, cfg, **caps))
        dropped[0] += sum(a.dropped_nodes)
        dropped[1] += sum(a.dropped_edges)
    assert all(dropped)  # the caps did bind in some cases
    for n_lights in (1, 3):  # no vehicle anywhere: data is [L, 0, 16]
        data, counts = np.zeros((n_lights, 0, len(ROW_COLUMNS))), [0] * n_lights
        caps = {"max_nodes": 8, "max_edges": 8}
        a = graph_batch(data, counts, GraphConfig(), **caps)
        assert_same_batch(a, graph_batch_numba(data, counts, GraphConfig(), **caps))


def test_exact_distance_ties_break_like_numpy() -> None:
    """Five vehicles on a circle around one vehicle: equal distances, neighbours by node order."""
    data = _rows(np.random.default_rng(1), [6], 5.0, False)
    angles = np.linspace(0, 2 * np.pi, 5, endpoint=False)
    data[0, 1:, _COL["x"]] = 100.0 + np.round(3 * np.cos(angles), 6)
    data[0, 1:, _COL["y"]] = 200.0 + np.round(3 * np.sin(angles), 6)
    data[0, 0, [_COL["x"], _COL["y"]]] = 100.0, 200.0
    data[0, :, _COL["dist2"]] = 1.0  # all equally far from the centre: nodes keep row order
    cfg = GraphConfig(edge_radius=10.0, k_nearest=3)
    for caps in ({"max_nodes": 6, "max_edges": 64}, {"max_nodes": 6, "max_edges": 5}):
        a = graph_batch(data, [6], cfg, **caps)
        assert_same_batch(a, graph_batch_numba(data, [6], cfg, **caps))
    assert a.order[0].tolist() == list(range(6))


def test_lane_batch_and_safety_counts_equal_numpy() -> None:
    rng = np.random.default_rng(2)
    for data, counts, cfg, caps in _cases(60, seed=3):
        sizes = tuple(int(s) for s in rng.integers(6, 9, len(counts)))  # movements 0..5 used
        offsets = tuple(int(o) for o in np.cumsum((0, *sizes[:-1])))
        layout = LaneLayout(
            offsets=offsets,
            sizes=sizes,
            capacity=rng.uniform(1, 20, sum(sizes)).astype(np.float32),
            offset_array=np.array(offsets, np.intp)[:, None],
            incoming=rng.random(sum(sizes)) < 0.5,
        )
        stats_a, feats_a, queue_a = lane_batch(data, counts, layout)
        stats_b, feats_b, queue_b = lane_batch_numba(data, counts, layout)
        assert np.array_equal(feats_a, feats_b) and feats_a.dtype == feats_b.dtype
        assert queue_a == queue_b
        for sa, sb in zip(stats_a, stats_b, strict=True):
            for name in ("count", "halting", "waiting"):
                x, y = getattr(sa, name), getattr(sb, name)
                assert x.dtype == y.dtype and np.array_equal(x, y), name
        batch = graph_batch(data, counts, cfg, **caps)
        for ttc, brake in ((2.0, 4.5), (50.0, 0.5)):
            got = safety_counts_numba(batch, ttc_threshold=ttc, hard_brake_decel=brake)
            want = safety_counts(batch, ttc_threshold=ttc, hard_brake_decel=brake)
            assert [w.tolist() for w in want] == [g.tolist() for g in got]


@pytest.mark.parametrize("fixture", ["default_sc", "grid_sc"])
def test_env_episode_identical_with_either_kernel(
    fixture, request, episode_trace, assert_identical
) -> None:
    """Same seed and actions: the same observations, rewards, infos (costs included) and frames at
    every step, caps binding on the dense grid."""
    scenario = request.getfixturevalue(fixture)
    a, b = (
        episode_trace(EnvConfig(kernel=k, max_nodes=16, max_edges=24), scenario, seed=11,
                      action_seed=5)
        for k in ("numpy", "numba")
    )  # fmt: skip
    assert len(a) == len(b) > 10
    assert_identical(a, b)


def test_kernel_config_is_checked() -> None:
    with pytest.raises(ValueError, match="kernel"):
        EnvConfig(kernel="cuda")
    with pytest.raises(ValueError, match="caps"):
        graph_batch_numba(np.zeros((1, 0, 16)), [0], GraphConfig(), max_nodes=0, max_edges=4)


def test_numba_env_loads_its_kernels_at_construction(fresh_python) -> None:
    """A fresh process: building the env loads every compiled kernel (no machine code is loaded
    inside an episode), and the warm-up used the step's own argument types (stepping adds no
    second specialisation). Before the warm-up the safety kernel loaded in the first ``step``."""
    code = (
        "from tj_rl.env import EnvConfig, TrafficSignalCore, default_scenario\n"
        "from tj_rl.env import numba_kernels as nk\n"
        "kernels = (nk._kernel, nk._lanes, nk._safety)\n"
        "env = TrafficSignalCore(EnvConfig(kernel='numba'), scenario=default_scenario())\n"
        "built = [len(k.signatures) for k in kernels]\n"
        "obs, _ = env.reset(seed=0)\n"
        "for _ in range(5):\n"
        "    obs, *_ = env.step({a: 0 for a in obs})\n"
        "env.close()\n"
        "print(built, [len(k.signatures) for k in kernels])\n"
    )
    assert fresh_python(code) == "[1, 1, 1] [1, 1, 1]"
