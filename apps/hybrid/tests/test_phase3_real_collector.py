"""Phase 3's real collector process (``collector_main``: a tiny agent on the embedded scenario,
real SUMO) SIGKILLed mid-run: it is replaced, and samples of the rollout schema keep arriving."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

REPO = Path(__file__).resolve().parents[3]


def _until(cond: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.02)


def _get(pool: Any, timeout: float = 60.0) -> Any:
    sample = pool.queue.get(timeout=timeout)
    assert sample is not None, "the queue closed"
    return sample


def _gone(pid: int) -> bool:
    """Stopped and reaped (a zombie still has its pid)."""
    return not psutil.pid_exists(pid)


@pytest.fixture(scope="module")
def real_spec(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """A ``CollectorSpec`` of the real collector (tiny agent, embedded scenario, 60 s episodes)
    and the rollout schema of its samples."""
    import dataclasses

    import torch

    from tj_hybrid.phase3.collectors import CollectorSpec
    from tj_models import TrafficAgent, TrafficAgentConfig
    from tj_rl.env import EnvConfig, TrafficSignalCore, default_scenario
    from tj_rl.rollout.samples import rollout_schema

    scenario = default_scenario(REPO / "configs/scenarios/default/default.sumocfg").replace(end=60.0)
    env = EnvConfig(metrics=False)
    core = TrafficSignalCore(env, scenario=scenario)
    try:
        light = core.possible_agents[0]
        space, actions = core.observation_spaces[light], int(core.action_spaces[light].n)
    finally:
        core.close()
    base = TrafficAgentConfig.preset("tiny", max_actions=actions)
    movements = int(space["movement"].high.max()) + 1
    config = dataclasses.replace(base, gnn=dataclasses.replace(base.gnn,
                                                               num_movements=max(movements, 16)))
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("phase3-collector")
    agent_dir = TrafficAgent(config).save(root / "agent")
    fields = {f.name: getattr(env, f.name) for f in dataclasses.fields(env)}
    spec = CollectorSpec(env_config={**fields, "scenario": scenario}, agent_dir=str(agent_dir),
                         weights=str(root / "weights.safetensors"), fragment_steps=4, gamma=0.99,
                         lam=0.95, seed=5)  # fmt: skip
    return spec, rollout_schema(space)


@pytest.mark.slow
def test_real_collector_sigkilled_mid_run_is_replaced(real_spec: tuple[Any, Any]) -> None:
    from tj_data import LiveQueue
    from tj_hybrid.phase3.collectors import CollectorPool

    spec, schema = real_spec
    pool = CollectorPool(spec, 1, LiveQueue(max_items=1 << 20, max_bytes=8 << 20), name="rank0")
    with pool:
        first = _get(pool, timeout=180)
        schema.validate_sample(first)
        assert int(first["version"]) == 0
        victim = pool.pids()[0]
        os.kill(victim, signal.SIGKILL)
        _until(lambda: pool.stats.restarts == 1, "the replacement", timeout=180)
        assert pool.pids()[0] != victim and _gone(victim)
        assert "SIGKILL" in pool.stats.deaths[0]
        while len(pool.queue):  # what the killed one had sent
            _get(pool)
        fresh = pool.stats.samples
        for i in range(8):  # the replacement's samples, of the rollout schema
            sample = _get(pool, timeout=180)
            schema.validate_sample(sample, where=f"sample {i} after the restart")
        assert pool.stats.samples >= fresh + 8
        assert pool.error is None
    assert _gone(pool.pids()[0])
