"""Shared fixtures: the embedded default scenario and a small generated grid, both cut short, the
shield checker, a tiny untrained agent that fits the default light, a fresh interpreter for tests about what a new process loads, a recorded
episode with an exact comparison for tests that two env configurations behave the same, and the
stacking of padded observations into one torch batch."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from tj_rl.env import (
    EnvConfig,
    Scenario,
    SyntheticSpec,
    TrafficSignalCore,
    build_scenario,
    default_scenario,
)

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def default_sc() -> Scenario:
    """The embedded default scenario (one light, 4 green phases), 2 minutes long."""
    return default_scenario(REPO / "configs/scenarios/default/default.sumocfg").replace(end=120.0)


@pytest.fixture(scope="session")
def default_agent(tmp_path_factory: pytest.TempPathFactory, default_sc: Scenario) -> Path:
    """A tiny tj-models agent folder that fits the default light (untrained weights, seed 0)."""
    from dataclasses import replace

    import torch

    from tj_models import TrafficAgent, TrafficAgentConfig
    from tj_rl.control.fit import check_spaces

    core = TrafficSignalCore(EnvConfig(metrics=False), scenario=default_sc)
    light = core.possible_agents[0]
    greens, lanes = check_spaces(core.observation_spaces[light], core.action_spaces[light])
    core.close()
    base = TrafficAgentConfig.preset("tiny", max_actions=greens)
    torch.manual_seed(0)
    config = replace(base, gnn=replace(base.gnn, num_movements=lanes))
    return TrafficAgent(config).save(tmp_path_factory.mktemp("agent") / "agent")


@pytest.fixture(scope="session")
def arterial_sc() -> Scenario:
    """The embedded arterial (4 lights, 70/60 km/h main road, mixed and red-running drivers)."""
    return Scenario.from_sumocfg(REPO / "configs/scenarios/arterial/arterial.sumocfg").replace(
        end=120.0
    )


@pytest.fixture(scope="session")
def grid_sc(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    """A 2x2 grid of lights (2 green phases each), 2 minutes of dense demand."""
    spec = SyntheticSpec(
        kind="grid",
        rows=2,
        cols=2,
        lanes=1,
        turn_lanes=0,
        edge_length=150.0,
        attach_length=100.0,
        duration=300.0,
        rates=(1500.0,),
        seed=3,
        name="grid",
    )
    return build_scenario(spec, tmp_path_factory.mktemp("grid")).replace(end=120.0)


def _check_safe(
    states: list[str], greens: tuple[str, ...], *, yellow: int, all_red: int, min_green: int
) -> None:
    """Per-second light states are safe: every link leaves green through exactly ``yellow`` s of
    yellow; a link turns green only after ``all_red`` s without any yellow; every green phase
    (not cut by the episode's start or end) lasts at least ``min_green`` s."""
    n = len(states)
    for k in range(1, n):
        a, b = states[k - 1], states[k]
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x in "Gg" and y not in "Gg":
                assert y == "y", f"t={k}: link {i} {x}->{y} without yellow"
                span = range(min(yellow, n - k))
                assert all(states[k + j][i] == "y" for j in span), f"t={k}: short yellow"
            if x not in "Gg" and y in "Gg":
                assert x != "y", f"t={k}: link {i} yellow->green"
                window = states[max(0, k - all_red) : k]
                assert all("y" not in s for s in window), f"t={k}: green within all-red"
    start = 0
    for k in range(1, n + 1):
        if k == n or states[k] != states[start]:
            if states[start] in greens and start > 0 and k < n:
                assert k - start >= min_green, f"green {states[start]} for {k - start} s at {start}"
            start = k


@pytest.fixture(scope="session")
def check_safe():
    return _check_safe


def _fresh_python(code: str, timeout: float = 300.0) -> str:
    """Run ``code`` in a new interpreter of this environment; its last stdout line (the test's
    verdict: printing is how a fresh process reports what it loaded)."""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=timeout
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def fresh_python():
    return _fresh_python


def _episode_trace(config: EnvConfig, scenario: Scenario, *, seed: int, action_seed: int) -> list:
    """One episode with random feasible actions: the reset's ``(obs, None, None, frames)``, then
    ``(obs, rewards, infos, frames)`` per step (``frames``: ``env.last_frames``)."""
    env = TrafficSignalCore(config, scenario=scenario)
    rng = np.random.default_rng(action_seed)
    try:
        obs, _ = env.reset(seed=seed)
        out = [(obs, None, None, env.last_frames)]
        while True:
            acts = {a: int(rng.choice(np.flatnonzero(o["action_mask"]))) for a, o in obs.items()}
            obs, rewards, _, trunc, infos = env.step(acts)
            out.append((obs, rewards, infos, env.last_frames))
            if trunc["__all__"]:
                return out
    finally:
        env.close()


def _assert_identical(a, b) -> None:
    """Equal trees of dicts, sequences, dataclasses, arrays (same dtype, bit for bit) and values."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_identical(a[k], b[k])
    elif isinstance(a, tuple | list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_identical(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), f"differs at {np.argwhere(a != b)[:3]}"
    elif hasattr(a, "__dataclass_fields__"):
        for k in a.__dataclass_fields__:
            _assert_identical(getattr(a, k), getattr(b, k))
    else:
        assert a == b


@pytest.fixture(scope="session")
def episode_trace():
    return _episode_trace


@pytest.fixture(scope="session")
def assert_identical():
    return _assert_identical


def _to_batch(observations: list[dict[str, np.ndarray]]) -> dict:
    """Padded observations stacked into one torch batch (a leading sample axis per key)."""
    import torch

    return {k: torch.as_tensor(np.stack([o[k] for o in observations])) for k in observations[0]}


@pytest.fixture(scope="session")
def to_batch():
    return _to_batch


@pytest.fixture
def local_ray():
    """A one-CPU local Ray for the RLlib tests, started and stopped by tj-rl's own
    ``RaySession`` (Ray's uv hook off, session files in a short private dir, no stragglers)."""
    import shutil
    import tempfile

    import ray

    from tj_dist.ray_session import RaySession, RaySessionConfig

    temp_dir = tempfile.mkdtemp(prefix="tjray")
    config = RaySessionConfig(num_cpus=1, object_store_bytes=80 * 2**20, temp_dir=temp_dir)
    try:
        with RaySession(config):
            yield ray
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)


def _late_bad_route(out: Path) -> Path:
    """A route file with three good vehicles and one whose route SUMO rejects only when it loads
    it (t~60-80 s): SUMO dies mid-episode, not at start."""
    edges = "top0A0 top0A0.100.00 A0right0"
    good = "".join(
        f'<vehicle id="ok{t}" depart="{t}"><route edges="{edges}"/></vehicle>' for t in (0, 20, 40)
    )
    path = out / "late.rou.xml"
    path.write_text(
        f'<routes>{good}<vehicle id="late" depart="80"><route edges="no_such_edge"/></vehicle>'
        "</routes>"
    )
    return path


@pytest.fixture(scope="session")
def late_bad_route():
    return _late_bad_route


class CountingRunner:
    """The real command runner of the demand pools, counting its calls (how the tests see
    whether randomTrips or duarouter ran)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, cmd: Sequence[str], cwd: Path) -> None:
        from tj_rl.traffic.demand import run_command

        self.calls += 1
        run_command(cmd, cwd)


@pytest.fixture
def counting_runner() -> CountingRunner:
    return CountingRunner()
