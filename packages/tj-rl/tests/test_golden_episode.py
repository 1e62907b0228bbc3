"""Golden episodes: the observations, rewards, costs and info numbers of short seeded episodes are
pinned to values recorded before the environment's speed work (``data/golden_episode.npz``), so
optimising the feature path can never change what an agent sees.

Two episodes: the embedded default scenario (one light, default config, 30 decisions) on both
backends (they must agree with each other and with the file), and a 2x2 grid with small padding
(node and edge overflow, several lights batched, the ``delay`` reward). Regenerate only when a
change of semantics is intended, and say so in the CHANGELOG:

    uv run python packages/tj-rl/tests/test_golden_episode.py --write
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from tj_rl.env import (
    EnvConfig,
    SyntheticSpec,
    TrafficSignalCore,
    build_graph,
    build_scenario,
    default_scenario,
)

REPO = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).resolve().parent / "data" / "golden_episode.npz"
GRID_SPEC = SyntheticSpec(
    kind="grid", rows=2, cols=2, lanes=1, turn_lanes=0, edge_length=150.0, attach_length=100.0,
    duration=300.0, rates=(1500.0,), seed=3, name="grid",
)  # fmt: skip
INFO_SCALARS = ("reward", "cost", "overflow_nodes", "overflow_edges", "num_vehicles",
                "vetoed", "applied_action", "sys_queue", "sys_min_expected")  # fmt: skip


def run_episode(scenario, config: EnvConfig, seed: int) -> dict[str, np.ndarray]:
    """Every observation key, reward, cost vector and info number of one seeded episode with random
    feasible actions, stacked over (step, agent) in agent order (step 0 is the reset), plus the
    uncapped graphs that recording builds from ``env.last_frames`` (concatenated, with counts)."""
    env = TrafficSignalCore(config, scenario=scenario)
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {}

    def add(obs: dict, rewards: dict | None, infos: dict | None) -> None:
        for agent in env.possible_agents:
            for key, value in obs[agent].items():
                rows.setdefault(f"obs/{key}", []).append(np.asarray(value))
            g = build_graph(env.last_frames[agent], env.lights[agent].centre, config.graph)
            rows.setdefault("raw/counts", []).append(np.array([g.num_nodes, g.edge_index.shape[1]]))
            rows.setdefault("raw/x", []).append(g.x)
            rows.setdefault("raw/movement", []).append(g.movement)
            rows.setdefault("raw/edge_index", []).append(g.edge_index.T)
            rows.setdefault("raw/edge_attr", []).append(g.edge_attr)
            if rewards is None:
                continue
            info = infos[agent]
            rows.setdefault("costs", []).append(info["costs"])
            scalars = [rewards[agent], info["cost"], info["overflow_nodes"],
                       info["overflow_edges"], info["num_vehicles"], info["vetoed"],
                       info["applied_action"], info["system"]["queue"],
                       info["system"]["min_expected_vehicles"]]  # fmt: skip
            rows.setdefault("scalars", []).append(np.array(scalars, np.float64))

    try:
        obs, _ = env.reset(seed=seed)
        add(obs, None, None)
        for step in range(1, 10**6):
            actions = {a: int(rng.choice(np.flatnonzero(o["action_mask"]))) for a, o in obs.items()}
            if step % 3 == 0:  # a random green, feasible or not: vetoes are pinned too
                actions = {a: int(rng.integers(env.action_spaces[a].n)) for a in obs}
            obs, rewards, _, trunc, infos = env.step(actions)
            add(obs, rewards, infos)
            if trunc["__all__"]:
                break
    finally:
        env.close()
    return {k: (np.concatenate if k[:4] == "raw/" else np.stack)(v) for k, v in rows.items()}


def _default_case(backend: str) -> dict[str, np.ndarray]:
    sc = default_scenario(REPO / "configs/scenarios/default/default.sumocfg").replace(end=300.0)
    return run_episode(sc, EnvConfig(backend=backend, metrics=False), seed=5)


def _grid_case(grid_dir: Path) -> dict[str, np.ndarray]:
    sc = build_scenario(GRID_SPEC, grid_dir).replace(end=120.0)
    cfg = EnvConfig(metrics=False, max_nodes=6, max_edges=10, reward="delay")
    return run_episode(sc, cfg, seed=11)


def _compare(got: dict[str, np.ndarray], golden: np.lib.npyio.NpzFile, prefix: str) -> None:
    keys = sorted(k[len(prefix) :] for k in golden.files if k.startswith(prefix))
    assert sorted(got) == keys
    for key in keys:
        want, have = golden[prefix + key], got[key]
        assert have.shape == want.shape and have.dtype == want.dtype, key
        if np.issubdtype(want.dtype, np.floating):
            np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-5, err_msg=key)
        else:
            np.testing.assert_array_equal(have, want, err_msg=key)


@pytest.fixture(scope="module")
def golden():
    with np.load(GOLDEN) as data:
        yield {k: data[k] for k in data.files}


class _Npz(dict):
    @property
    def files(self) -> list[str]:
        return list(self)


@pytest.mark.parametrize("backend", ["libsumo", "traci"])
def test_default_scenario_episode_is_pinned(backend: str, golden) -> None:
    got = _default_case(backend)
    _compare(got, _Npz(golden), "default/")
    assert got["scalars"][:, 5].sum() > 0  # the episode does exercise vetoes


def test_grid_episode_with_overflow_is_pinned(tmp_path: Path, golden) -> None:
    got = _grid_case(tmp_path)
    _compare(got, _Npz(golden), "grid/")
    assert got["scalars"][:, 2].sum() > 0 and got["scalars"][:, 3].sum() > 0  # overflow counted


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    out = {f"default/{k}": v for k, v in _default_case("libsumo").items()}
    with tempfile.TemporaryDirectory() as tmp:
        out |= {f"grid/{k}": v for k, v in _grid_case(Path(tmp)).items()}
    GOLDEN.parent.mkdir(exist_ok=True)
    np.savez_compressed(GOLDEN, **out)
    print(f"wrote {GOLDEN} ({GOLDEN.stat().st_size} bytes, {len(out)} arrays)")
