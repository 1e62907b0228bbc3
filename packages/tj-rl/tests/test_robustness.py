"""Faults: SUMO killed or failing mid-episode, libsumo misuse, idempotent close, parallel processes."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import psutil
import pytest

from tj_rl.env import EnvConfig, LibsumoBusyError, Scenario
from tj_rl.eval import evaluate
from tj_rl.rllib import TrafficSignalEnv


def _zombies() -> list[psutil.Process]:
    return [
        c for c in psutil.Process().children(recursive=True) if c.status() == psutil.STATUS_ZOMBIE
    ]


def _run_to_end(env: TrafficSignalEnv, obs: dict) -> dict:
    trunc, info = {"__all__": False}, {}
    while not trunc["__all__"]:
        obs, _, _, trunc, info = env.step(
            {a: int(o["action_mask"].argmax()) for a, o in obs.items()}
        )
    return info


def test_traci_sigkill_truncates_then_reset_restarts(default_sc: Scenario) -> None:
    env = TrafficSignalEnv(EnvConfig(backend="traci", metrics=True), scenario=default_sc)
    try:
        obs, _ = env.reset(seed=2)
        obs, *_ = env.step({"A0": 0})
        pid = env.backend.pid()
        assert pid != os.getpid() and psutil.Process(pid).name().startswith("sumo")
        os.kill(pid, signal.SIGKILL)
        obs2, rew, term, trunc, info = env.step({"A0": 0})
        assert trunc == {"A0": True, "__all__": True} and term["__all__"] is False
        assert info["A0"]["truncated_reason"].startswith("sumo_died: traci")
        assert rew["A0"] == 0.0 and env.observation_spaces["A0"].contains(obs2["A0"])
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        assert _zombies() == []
        with pytest.raises(RuntimeError, match="reset"):
            env.step({"A0": 0})
        obs, _ = env.reset(seed=2)
        assert env.backend.pid() not in (None, pid)
        info = _run_to_end(env, obs)
        assert (
            info["A0"]["truncated_reason"] == "time_limit"
            and info["A0"]["episode"]["throughput"] > 0
        )
    finally:
        env.close()
        env.close()
    assert [c for c in psutil.Process().children(recursive=True) if "sumo" in c.name()] == []
    assert _zombies() == []


@pytest.mark.parametrize("backend", ["libsumo", "traci"])
def test_sumo_error_mid_episode(backend: str, default_sc: Scenario, tmp_path: Path) -> None:
    """A vehicle with a broken route is loaded only at t~60 s (incremental route loading): SUMO
    fails mid-run. The step is truncated with SUMO's message and the next reset works."""
    edges = "top0A0 top0A0.100.00 A0right0"
    good = "".join(
        f'<vehicle id="ok{t}" depart="{t}"><route edges="{edges}"/></vehicle>'
        for t in (0, 20, 40, 60)
    )
    late = tmp_path / "late.rou.xml"
    late.write_text(
        f'<routes>{good}<vehicle id="late" depart="80"><route edges="no_such_edge"/></vehicle></routes>'
    )
    sc = default_sc.replace(
        route_files=(*default_sc.route_files, late), extra_args=("--route-steps", "10")
    )
    env = TrafficSignalEnv(EnvConfig(backend=backend), scenario=sc)
    try:
        obs, _ = env.reset(seed=0)
        info = _run_to_end(env, obs)
        reason = info["A0"]["truncated_reason"]
        assert reason.startswith(f"sumo_died: {backend}") and "no_such_edge" in reason
        assert 40.0 <= env.sim_time < 100.0
        env.scenario = default_sc  # the fixed scenario: the same env restarts cleanly
        obs, _ = env.reset(seed=0)
        assert _run_to_end(env, obs)["A0"]["truncated_reason"] == "time_limit"
    finally:
        env.close()
    assert _zombies() == []


def test_libsumo_closed_behind_the_envs_back(default_sc: Scenario) -> None:
    """The closest libsumo analogue of a killed process: the simulation vanishes mid-episode."""
    import libsumo

    env = TrafficSignalEnv(EnvConfig(), scenario=default_sc)
    try:
        obs, _ = env.reset(seed=0)
        env.step({"A0": 0})
        libsumo.close()
        _, _, _, trunc, info = env.step({"A0": 0})
        assert trunc["__all__"] and info["A0"]["truncated_reason"].startswith("sumo_died: libsumo")
        obs, _ = env.reset(seed=0)
        assert _run_to_end(env, obs)["A0"]["truncated_reason"] == "time_limit"
    finally:
        env.close()


def test_libsumo_one_simulation_per_process(default_sc: Scenario) -> None:
    import libsumo

    first = TrafficSignalEnv(EnvConfig(), scenario=default_sc)
    second = TrafficSignalEnv(EnvConfig(), scenario=default_sc)
    try:
        first.reset(seed=0)
        first.step({"A0": 0})
        t = first.sim_time
        with pytest.raises(LibsumoBusyError, match=r"one per process.*backend='traci'"):
            second.reset(seed=0)
        first.step({"A0": 0})  # the first simulation was not reloaded behind its back
        assert first.sim_time == t + 10
        first.close()
        assert not libsumo.isLoaded()
        second.reset(seed=0)
        second.step({"A0": 0})
    finally:
        first.close()
        second.close()
    assert not libsumo.isLoaded()


def test_close_is_idempotent(default_sc: Scenario) -> None:
    env = TrafficSignalEnv(EnvConfig(backend="traci", metrics=True), scenario=default_sc)
    env.close()  # before any reset
    env.reset(seed=0)
    workdir = env._session.workdir
    assert workdir is not None and workdir.is_dir()
    env.close()
    env.close()
    assert not workdir.exists()  # the episode's temp dir is gone
    assert [c for c in psutil.Process().children(recursive=True) if "sumo" in c.name()] == []


def test_two_libsumo_envs_in_two_processes(default_sc: Scenario) -> None:
    """libsumo is one simulation per process: two processes run two at once, deterministically."""
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=ctx) as pool:
        futures = [pool.submit(evaluate, default_sc, "fixed-time", 1, [11]) for _ in range(2)]
        tables = [f.result(timeout=300) for f in futures]
    rows = [t.rows[0] for t in tables]
    assert rows[0]["status"] == rows[1]["status"] == "time_limit"
    assert rows[0]["throughput"] > 0
    assert {k: v for k, v in rows[0].items() if not isinstance(v, float) or np.isfinite(v)} == {
        k: v for k, v in rows[1].items() if not isinstance(v, float) or np.isfinite(v)
    }
    assert _zombies() == []


def test_missing_libsumo_is_loud(monkeypatch: pytest.MonkeyPatch) -> None:
    """No silent fallback to traci when libsumo cannot be imported."""
    import sys

    from tj_rl.env import make_backend

    monkeypatch.setitem(sys.modules, "libsumo", None)  # makes `import libsumo` fail
    with pytest.raises(
        ImportError, match=r"backend='libsumo' needs the libsumo wheel.*backend='traci'"
    ):
        make_backend("libsumo")
    assert make_backend("traci").name == "traci"


def test_traci_close_lets_sumo_flush_its_outputs(default_sc: Scenario) -> None:
    """After a clean TraCI close SUMO still writes its outputs: close() waits for it to exit by
    itself instead of terminating it at once (which truncated the statistics output on a loaded
    machine), so SUMO is never signalled and the episode metrics parse."""
    env = TrafficSignalEnv(EnvConfig(backend="traci", metrics=True), scenario=default_sc)
    try:
        obs, _ = env.reset(seed=4)
        proc = env.backend._proc
        signalled: list[str] = []
        proc.terminate = lambda: signalled.append("terminate")  # type: ignore[method-assign]
        proc.kill = lambda: signalled.append("kill")  # type: ignore[method-assign]
        info = _run_to_end(env, obs)
        assert signalled == [] and proc.returncode == 0
        assert info["A0"]["episode"]["throughput"] > 0
    finally:
        env.close()
    assert not _zombies()
