"""The env in a child process (``ProcessTrafficSignalEnv``) and several of them stepped at once
(``ParallelVectorEnv``, ``ParallelEnvRunner``): the same results as the env in this process, its
errors raised here as themselves, a killed child reported like a SUMO death and replaced, no child
outliving its env or its parent, and a real PPO iteration sampling from two simulations."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest

from tj_rl.env import EnvConfig, Scenario, ScenarioError, TrafficSignalCore
from tj_rl.rllib.env import ProcessTrafficSignalEnv, runner_stream
from tj_rl.rllib.sim_child import SimChild, SimChildDied
from tj_rl.traffic import DemandPool

_CFG = EnvConfig(metrics=False)


def _run(env, *, seed: int, action_seed: int = 0) -> list:
    """One episode with random feasible actions: the reset's and every step's full result."""
    rng = np.random.default_rng(action_seed)
    obs, infos = env.reset(seed=seed)
    out = [(obs, infos)]
    while True:
        acts = {a: int(rng.choice(np.flatnonzero(o["action_mask"]))) for a, o in obs.items()}
        result = env.step(acts)
        out.append(result)
        obs = result[0]
        if result[3]["__all__"]:
            return out


def _gone(pid: int, timeout: float = 30.0) -> bool:
    """The process ``pid`` has ended (polled; bounded)."""
    try:
        proc = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return True
    _, alive = psutil.wait_procs([proc], timeout=timeout)
    return not alive or (proc.status() == psutil.STATUS_ZOMBIE and proc.ppid() != os.getpid())


def test_same_episode_as_the_env_in_this_process(default_sc: Scenario, assert_identical) -> None:
    env = ProcessTrafficSignalEnv(_CFG, scenario=default_sc)
    try:
        assert env.child_pid != os.getpid()
        child = _run(env, seed=3)
    finally:
        env.close()
    core = TrafficSignalCore(_CFG, scenario=default_sc)
    try:
        here = _run(core, seed=3)
        assert env.observation_spaces == core.observation_spaces
        assert env.action_spaces == core.action_spaces
        assert env.possible_agents == core.possible_agents
    finally:
        core.close()
    assert len(child) == len(here) > 2
    assert_identical(child, here)


def test_the_childs_errors_are_raised_here_as_themselves(default_sc: Scenario) -> None:
    env = ProcessTrafficSignalEnv(_CFG, scenario=default_sc)
    try:
        env.reset(seed=1)
        with pytest.raises(ValueError, match="outside its action space"):
            env.step({"A0": 99})
        with pytest.raises(ValueError, match="unknown agent"):
            env.step({"nobody": 0})
        obs, *_ = env.step({"A0": 0})  # the env goes on after an error, as in this process
        assert set(obs) == {"A0"}
        with pytest.raises(RuntimeError, match="nothing was sent"):
            env.receive()
        env.send_step({"A0": 0})
        with pytest.raises(RuntimeError, match="before the reply"):
            env.send_step({"A0": 0})
        env.receive()
    finally:
        env.close()


def test_sumo_dying_in_the_child_ends_the_episode_as_it_does_here(
    tmp_path: Path, default_sc: Scenario, late_bad_route
) -> None:
    sc = default_sc.with_routes(late_bad_route(tmp_path))
    env = ProcessTrafficSignalEnv(_CFG, scenario=sc)
    try:
        trace = _run(env, seed=0)
    finally:
        env.close()
    reasons = {i.get("truncated_reason", "") for i in trace[-1][4].values()}
    assert len(reasons) == 1 and reasons.pop().startswith("sumo_died: ")


def test_a_killed_child_is_reported_like_a_sumo_death_and_replaced(default_sc: Scenario) -> None:
    env = ProcessTrafficSignalEnv(_CFG, scenario=default_sc)
    try:
        obs, _ = env.reset(seed=1)
        obs, *_ = env.step({"A0": 0})
        first = env.child_pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        last, rewards, terms, truncs, infos = env.step({"A0": 1})
        assert truncs["__all__"] and not terms["__all__"] and rewards == {"A0": 0.0}
        reason = infos["A0"]["truncated_reason"]
        assert reason.startswith("sumo_died: simulation child") and "SIGKILL" in reason, reason
        assert last["A0"] is obs["A0"] or all(np.array_equal(last["A0"][k], obs["A0"][k])
                                              for k in obs["A0"])  # fmt: skip
        assert env.child_pid is None and _gone(first)
        obs, infos = env.reset()  # a new child, a new episode
        assert env.child_pid not in (None, first)
        assert infos["A0"]["seed"] != default_sc.seed  # not the first episode's SUMO seed again
        env.step({"A0": 0})
        second = env.child_pid
        assert second is not None
        os.kill(second, signal.SIGKILL)  # dead before a reset: the reset runs in a new child
        assert _gone(second)
        obs, infos = env.reset(seed=5)
        third = env.child_pid
        assert third not in (None, first, second) and infos["A0"]["seed"] == 5
    finally:
        env.close()
    assert third is not None and _gone(third)
    env.close()  # idempotent


def test_a_child_that_cannot_start_its_env_fails_loudly(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="sumocfg file not found"):
        SimChild({"scenario": str(tmp_path / "missing.sumocfg")})
    child = SimChild({"scenario": None, "metrics": False})
    try:
        os.kill(child.pid, signal.SIGKILL)
        with pytest.raises(SimChildDied, match="killed by SIGKILL"):
            child.call("reset", {"seed": 0, "options": None})
    finally:
        child.close()


_PARENT = """
import sys, time
from tj_rl.rllib.env import ProcessTrafficSignalEnv, runner_stream
env = ProcessTrafficSignalEnv({"metrics": False})
print(env.child_pid, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_child_dies_with_its_sigkilled_parent() -> None:
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)  # fmt: skip
    child = None
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert psutil.Process(child).ppid() == parent.pid
        parent.kill()
        parent.wait(timeout=60)
        assert _gone(child, timeout=60), "the simulation child outlived its SIGKILLed parent"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)
        parent.communicate(timeout=60)  # reaped, its pipe closed
        if child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)


def test_route_stream_from_rllibs_env_context(default_sc: Scenario) -> None:
    from ray.rllib.env.env_context import EnvContext

    base = {"scenario": default_sc, "metrics": False}
    env = ProcessTrafficSignalEnv(EnvContext(base, worker_index=2, vector_index=1))
    try:
        assert env.route_stream == 2001  # as TrafficSignalEnv numbers env runners' streams
    finally:
        env.close()
    assert runner_stream(EnvContext({**base, "route_stream": 7}, worker_index=3)) is None
    assert runner_stream(base) is None


# ---------------------------------------------------------------------- the vector env
def _pool(tmp_path: Path, sc: Scenario) -> tuple[str, ...]:
    pool = DemandPool.for_scenario(sc, tmp_path / "pool", seeds=(1, 2, 3), rates=(300, 1800))
    return tuple(str(p) for p in pool.files)


def _vector_trace(vector, steps: int, seed: int) -> list:
    """Reset with ``seed`` then ``steps`` steps of action 0 (auto-resets included); lists copied
    (RLlib's own vector env hands out its internal lists, refilled by the next call)."""
    obs, infos = vector.reset(seed=seed)
    out = [(list(obs), list(infos))]
    for _ in range(steps):
        acts = [dict.fromkeys(o, 0) for o in obs]
        obs, rewards, terms, truncs, infos = vector.step(acts)
        out.append((list(obs), list(rewards), list(terms), list(truncs), list(infos)))
    return out


def _gym(env):
    """As RLlib hands sub-envs over: gym-wrapped (the vector reads ``.unwrapped``)."""
    from gymnasium.wrappers import OrderEnforcing

    return OrderEnforcing(env)


def test_parallel_vector_equals_stepping_one_by_one(tmp_path: Path, default_sc: Scenario,
                                                    assert_identical) -> None:  # fmt: skip
    from ray.rllib.env.vector.sync_vector_multi_agent_env import SyncVectorMultiAgentEnv

    from tj_rl.rllib.vector import ParallelVectorEnv

    sc = default_sc.replace(end=60.0)  # 12 decisions: the 30 steps cross two auto-resets
    cfg = {"scenario": sc, "metrics": False, "route_files": _pool(tmp_path, sc)}
    parallel = ParallelVectorEnv([_gym(ProcessTrafficSignalEnv(cfg)) for _ in range(2)],
                                 stream_base=5)  # fmt: skip
    try:
        assert [e.route_stream for e in parallel._procs] == [5, 6]
        pids = [e.child_pid for e in parallel._procs]
        got = _vector_trace(parallel, 30, seed=7)
    finally:
        parallel.close()
    assert all(_gone(p) for p in pids)
    ones = [ProcessTrafficSignalEnv({**cfg, "route_stream": s}) for s in (5, 6)]
    sync = SyncVectorMultiAgentEnv([lambda e=e: _gym(e) for e in ones], copy=False)
    try:
        want = _vector_trace(sync, 30, seed=7)
    finally:
        sync.close()
    assert_identical(got, want)
    # each sub-env its own stream: their episodes draw different route files
    drawn = [[step[-1][i]["A0"].get("routes") for step in got] for i in range(2)]
    drawn = [[r for r in seq if r is not None] for seq in drawn]
    assert len(drawn[0]) == len(drawn[1]) >= 3 and drawn[0] != drawn[1], drawn


def test_parallel_vector_takes_process_envs_only(default_sc: Scenario) -> None:
    from tj_rl.rllib import TrafficSignalEnv
    from tj_rl.rllib.vector import ParallelVectorEnv

    env = TrafficSignalEnv(_CFG, scenario=default_sc)
    try:
        with pytest.raises(TypeError, match="ProcessTrafficSignalEnv only"):
            ParallelVectorEnv([_gym(env)])
    finally:
        env.close()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ppo_iteration_with_two_simulations_per_env_runner(local_ray, tmp_path: Path) -> None:
    """One PPO iteration on the local env runner with two simulations (children) batched into
    one forward: episodes of both finish, and stopping the algorithm stops the children."""
    from ray.rllib.algorithms.ppo import PPOConfig

    from tj_rl.env import default_scenario
    from tj_rl.rllib.module import (
        SHARED_POLICY,
        GraphModuleConfig,
        shared_module_spec,
        shared_policy_mapping,
    )
    from tj_rl.rllib.vector import ParallelEnvRunner, ParallelVectorEnv

    sc = default_scenario().replace(end=100.0)  # 20 decisions per episode
    env_config = {"scenario": sc, "metrics": False, "pad_to_scenario": True,
                  "temp_dir": str(tmp_path)}  # fmt: skip
    module = shared_module_spec(GraphModuleConfig())
    config = PPOConfig().environment(ProcessTrafficSignalEnv, env_config=env_config)
    config = config.env_runners(num_env_runners=0, num_envs_per_env_runner=2,
                                env_runner_cls=ParallelEnvRunner).learners(num_learners=0)  # fmt: skip
    config = config.multi_agent(policies={SHARED_POLICY}, policy_mapping_fn=shared_policy_mapping)
    config = config.rl_module(rl_module_spec=module).debugging(seed=0)
    config = config.training(train_batch_size_per_learner=80, minibatch_size=40, num_epochs=1)
    algo = config.build_algo()
    try:
        vector = algo.env_runner.env
        assert isinstance(vector, ParallelVectorEnv) and vector.num_envs == 2
        assert [e.route_stream for e in vector._procs] == [0, 1]
        result = algo.train()
        pids = [e.child_pid for e in vector._procs]
    finally:
        algo.stop()
    runners = result["env_runners"]
    assert runners["num_env_steps_sampled"] >= 80
    assert runners["num_episodes"] >= 2
    assert np.isfinite(result["learners"][SHARED_POLICY]["total_loss"])
    assert all(p is not None and _gone(p) for p in pids)
