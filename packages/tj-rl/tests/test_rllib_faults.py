"""Faults during PPO training on RLlib's new API stack, each injected for real: env runner processes
SIGKILLed mid-training (one runs libsumo, one a traci SUMO child), SUMO dying inside an env (a route
it rejects mid-episode), and a two-node local Ray cluster the session attaches to."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tj_monitor.processes import processes_naming
from tj_rl.env import COST_NAMES, default_scenario
from tj_rl.rllib.callbacks import DIED_KEY, TrafficCallbacks, sumo_died_reasons
from tj_rl.rllib.module import (
    SHARED_POLICY,
    GraphModuleConfig,
    shared_module_spec,
    shared_policy_mapping,
)
from tj_rl.traffic.routes import pick_route

pytestmark = pytest.mark.slow

_DEADLINE_S = 400.0  # generous: restarts import torch + RLlib; a loaded 2-core CI host is slow


def _ppo(env, env_config: dict, *, runners: int, cpus_per_runner: float = 0):
    """A small PPO on the graph module (one iteration = 64 env steps, one epoch)."""
    from ray.rllib.algorithms.ppo import PPOConfig

    return (
        PPOConfig()
        .environment(env, env_config=env_config)
        .env_runners(
            num_env_runners=runners,
            num_envs_per_env_runner=1,
            num_cpus_per_env_runner=cpus_per_runner,
        )
        .learners(num_learners=0, num_cpus_per_learner=0)
        .multi_agent(policies={SHARED_POLICY}, policy_mapping_fn=shared_policy_mapping)
        .rl_module(rl_module_spec=shared_module_spec(GraphModuleConfig()))
        .training(train_batch_size_per_learner=64, minibatch_size=32, num_epochs=1, lr=1e-3)
        .callbacks(TrafficCallbacks)
        .debugging(seed=0)
    )


def _env_config(temp_dir: Path, **extra) -> dict:
    """The embedded scenario cut to 2 minutes (12 decisions). Episode temp dirs go under the
    test's ``temp_dir``: a SIGKILLed runner cannot remove its episode's."""
    scenario = default_scenario().replace(end=120.0)
    return {
        "scenario": scenario,
        "metrics": False,
        "max_nodes": 16,
        "max_edges": 32,
        "temp_dir": str(temp_dir),
        **extra,
    }


def _runner_facts(algo) -> dict[int, dict]:
    """Per remote env runner (by index): its pid, node id and its traci SUMO's pid (or None)."""

    def facts(runner) -> dict:
        import ray

        env = runner.env.unwrapped.envs[0].unwrapped  # the vector env's TrafficSignalEnv
        return {
            "index": runner.worker_index,
            "pid": os.getpid(),
            "node": ray.get_runtime_context().get_node_id(),
            "backend": env.backend.name,
            "sumo": env.backend.pid() if env.backend.name == "traci" else None,
        }

    found = algo.env_runner_group.foreach_env_runner(facts, local_env_runner=False)
    return {f["index"]: f for f in found}


def _wait_until(condition: Callable[[], bool], what: str, deadline_s: float = _DEADLINE_S) -> None:
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"not within {deadline_s} s: {what}")
        time.sleep(0.2)


def _gone(proc: psutil.Process) -> bool:
    """Exited (a zombie has exited too, but must not be left: it counts as not gone)."""
    try:
        return not proc.is_running()
    except psutil.Error:
        return True


# ---------------------------------------------------------------------- a. SIGKILL of runners
@pytest.mark.timeout(900)
def test_sigkilled_env_runners_restart_and_leave_no_sumo(local_ray, tmp_path: Path) -> None:
    """Two env runners, runner 1 on libsumo (SUMO inside the runner), runner 2 on traci (a SUMO
    child process). After one iteration both runner processes are SIGKILLed: Ray restarts them,
    RLlib restores them, training goes on, and no SUMO of a killed runner is left."""
    from ray.tune.registry import register_env

    from tj_rl.rllib import TrafficSignalEnv

    def make_env(ctx):
        backend = "traci" if ctx.worker_index == 2 else "libsumo"
        return TrafficSignalEnv({**ctx, "backend": backend})

    register_env("tj-rl-faults-mixed", make_env)
    config = _ppo("tj-rl-faults-mixed", _env_config(tmp_path), runners=2).fault_tolerance(
        restart_failed_env_runners=True,
        max_num_env_runner_restarts=5,
        delay_between_env_runner_restarts_s=0.1,
    )
    algo = config.build_algo()
    try:
        first = algo.train()
        before = _runner_facts(algo)
        assert [before[i]["backend"] for i in (1, 2)] == ["libsumo", "traci"]
        assert before[2]["sumo"] is not None  # the episode goes on across iterations
        runners = {i: psutil.Process(f["pid"]) for i, f in before.items()}
        sumo = psutil.Process(before[2]["sumo"])
        assert sumo.ppid() == before[2]["pid"] and sumo.name().startswith("sumo")
        for proc in runners.values():
            proc.send_signal(signal.SIGKILL)
        _wait_until(lambda: all(_gone(p) for p in runners.values()), "runners dead")
        # the traci SUMO loses its client and exits; it must not linger (nor stay a zombie)
        _wait_until(lambda: _gone(sumo), f"SUMO {sumo.pid} of the killed runner gone")

        # Ray restarts the actors (new processes build their env and module: seconds); until
        # RLlib's probe finds them back, an iteration samples nothing and returns at once
        result, tries = None, 0
        end = time.monotonic() + _DEADLINE_S
        while time.monotonic() < end and tries < 200:
            tries += 1
            result = algo.train()
            group = algo.env_runner_group
            sampled = result["env_runners"].get("num_env_steps_sampled", 0)
            if group.num_healthy_remote_env_runners() == 2 and sampled >= 64:
                break
        assert result is not None
        group = algo.env_runner_group
        assert group.num_healthy_remote_env_runners() == 2, f"after {tries} iterations"
        assert group.num_remote_worker_restarts() >= 2
        after = _runner_facts(algo)
        assert set(after) == {1, 2}
        assert all(after[i]["pid"] != before[i]["pid"] for i in (1, 2))  # new processes
        assert result["training_iteration"] > first["training_iteration"]
        lifetime = "num_env_steps_sampled_lifetime"
        assert result["env_runners"][lifetime] > first["env_runners"][lifetime]
        new_sumo = psutil.Process(after[2]["sumo"]) if after[2]["sumo"] else None
    finally:
        algo.stop()
    if new_sumo is not None:  # the restarted runner's SUMO ends with it
        _wait_until(lambda: _gone(new_sumo), "the restarted runner's SUMO gone after stop")


# ---------------------------------------------------------------------- b. SUMO dies in an env


@pytest.mark.timeout(900)
def test_sumo_dying_in_an_env_is_counted_and_training_goes_on(
    local_ray, tmp_path: Path, late_bad_route
) -> None:
    """The env's demand pool holds one bad file among 16, drawn second by its stream (RLlib's env
    checker may use the first reset): that episode dies mid-run, the others are fine. Two
    iterations (~11 episodes) run; the callbacks count the death once, with its reason, and their
    count equals the deaths the env itself returned."""
    from tj_rl.rllib import TrafficSignalEnv

    class DeathCountingEnv(TrafficSignalEnv):
        """The real env, also counting the episodes it ended by SUMO dying (the truth)."""

        deaths = 0

        def step(self, action_dict):
            out = super().step(action_dict)
            reasons = {i.get("truncated_reason", "time_limit") for i in out[4].values()}
            self.deaths += int(reasons != {"time_limit"})
            return out

    bad = late_bad_route(tmp_path)
    good = default_scenario().route_files[0]
    files = (bad, *([good] * 15))
    stream = next(s for s in range(1000) if pick_route(files, 1, s) == bad)
    env_config = _env_config(
        tmp_path, route_files=files, route_stream=stream, sumo_args=("--route-steps", "10")
    )
    algo = _ppo(DeathCountingEnv, env_config, runners=1).build_algo()
    try:
        first = algo.train()
        second = algo.train()
        (deaths,) = algo.env_runner_group.foreach_env_runner(
            lambda runner: runner.env.unwrapped.envs[0].unwrapped.deaths, local_env_runner=False
        )
    finally:
        algo.stop()
    assert deaths == 1
    runners = first["env_runners"]
    assert runners[DIED_KEY] == 1
    (reason,) = sumo_died_reasons(first)
    assert reason.startswith("sumo_died: libsumo") and "no_such_edge" in reason
    assert runners["episode_len_min"] < runners["episode_len_max"]  # the short one died
    later = second["env_runners"]
    assert second["training_iteration"] == 2 and later["num_episodes"] >= 2
    assert later[DIED_KEY] == 1 and sumo_died_reasons(second) == []  # once over the run
    for result in (first, second):
        env_runners = result["env_runners"]
        costs = env_runners["episode_costs_mean"]
        assert set(costs) == set(COST_NAMES)
        assert all(isinstance(v, float) and v >= 0 for v in costs.values())
        for key in ("episode_weighted_cost_mean", "episode_vetoes_mean", "vetoes_lifetime"):
            assert isinstance(env_runners[key], float) and env_runners[key] >= 0, key
    assert second["learners"][SHARED_POLICY]["num_module_steps_trained"] >= 64


# ---------------------------------------------------------------------- c. two-node cluster
@pytest.mark.timeout(900)
def test_two_node_local_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``LocalCluster``: ``ray start --head`` plus a second ``ray start --address=...`` on this
    machine (one CPU each, token auth on with a token of its own), a ``RaySession`` that attaches,
    and PPO with two one-CPU env runners, which Ray can only place one per node."""
    if shutil.which("ray") is None and not os.access(Path(sys.executable).with_name("ray"), os.X_OK):
        pytest.skip("the `ray` CLI is not installed")
    import ray

    from tj_dist.ray_cluster import LocalCluster
    from tj_dist.ray_session import RaySession, RaySessionConfig
    from tj_rl.rllib import TrafficSignalEnv

    cluster = LocalCluster(nodes=2, cpus_per_node=1)
    # The driver gets RAY_AUTH_MODE=token and the cluster's token, set after Ray's import (Ray
    # reads the mode at import and caches it: RaySession's attach makes it read it again); the
    # set-then-delete makes monkeypatch restore RAY_ADDRESS whatever Ray sets.
    monkeypatch.setenv("RAY_AUTH_TOKEN", cluster.token)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_ADDRESS", "")
    monkeypatch.delenv("RAY_ADDRESS")
    with cluster:
        temp_dir = cluster.temp_dir
        assert temp_dir is not None and cluster.address is not None
        with RaySession(RaySessionConfig(address=cluster.address)) as session:
            assert not session.local
            _wait_until(lambda: sum(n["Alive"] for n in ray.nodes()) == 2, "two nodes alive", 60.0)
            assert ray.cluster_resources()["CPU"] == 2
            alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
            algo = _ppo(
                TrafficSignalEnv, _env_config(tmp_path), runners=2, cpus_per_runner=1
            ).build_algo()
            try:
                result = algo.train()
                facts = _runner_facts(algo)
            finally:
                algo.stop()
        assert session.result is not None and not session.result.local
        nodes = {f["node"] for f in facts.values()}
        assert len(facts) == 2 and nodes == alive  # one env runner on each node
        assert result["env_runners"]["num_env_steps_sampled"] >= 64
        assert processes_naming(temp_dir)  # the cluster outlives the session that attached
    assert processes_naming(temp_dir) == []
