"""Phase-2 hand-off: a trained ``TrafficRLModule`` exported as a tj-models agent (``export_agent``)
and run without Ray (``AgentPolicy``): every exported tensor is the module's (world model and shield
the base agent's), the same observations give the same logits as the module, actions stay in the
mask, held-out evaluation runs it beside a baseline, a truncated weights file is an error naming
it, and importing the policy never imports Ray (fresh interpreter)."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ray.rllib.core.columns import Columns

from tj_models import CheckpointError, ControllerConfig, TrafficAgent, TrafficAgentConfig
from tj_rl.control import FixedTimePolicy
from tj_rl.control.agent_policy import AgentPolicy
from tj_rl.env import EnvConfig, Scenario, TrafficSignalCore, default_scenario
from tj_rl.env.runtime import child_env, sumo_home, tool_command
from tj_rl.eval.heldout import evaluate_heldout
from tj_rl.rllib.export import ENCODER_PREFIX, export_agent
from tj_rl.rllib.module import GraphModuleConfig, TrafficRLModule, graph_module_spec
from tj_rl.traffic.demand import DemandPool

_FAST = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


# ---------------------------------------------------------------------- helpers
def _spaces_of(env: TrafficSignalCore):
    agent = env.possible_agents[0]
    return env.observation_spaces[agent], env.action_spaces[agent]


@pytest.fixture(scope="module")
def spaces(default_sc: Scenario):
    """The default light's spaces: 4 green phases, no padding."""
    return _spaces_of(TrafficSignalCore(EnvConfig(metrics=False), scenario=default_sc))


def _movements(obs_space) -> int:
    return int(obs_space["movement"].high.max()) + 1


def _base_config(movements: int, max_actions: int = 4) -> TrafficAgentConfig:
    base = TrafficAgentConfig.preset("tiny", max_actions=int(max_actions))
    return replace(base, gnn=replace(base.gnn, num_movements=max(movements, 16)))


def _save_base(directory: Path, config: TrafficAgentConfig, seed: int = 1) -> Path:
    """A phase-1 agent: random weights, GNN input statistics that are not the defaults."""
    torch.manual_seed(seed)
    agent = TrafficAgent(config)
    with torch.no_grad():
        agent.gnn.node_scaler.mean.normal_()
    return agent.save(directory)


def _build(spaces, config: GraphModuleConfig, seed: int = 0) -> TrafficRLModule:
    torch.manual_seed(seed)
    obs_space, act_space = spaces
    return graph_module_spec(config, observation_space=obs_space, action_space=act_space).build()


def _trained(spaces, base: Path, **kwargs) -> TrafficRLModule:
    """A module started from ``base`` whose GNN (fine-tuned) and controller weights all moved."""
    module = _build(spaces, GraphModuleConfig(agent_dir=str(base), gnn="finetune", **kwargs))
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    return module


def _to_batch(observations: list[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(np.stack([o[k] for o in observations])) for k in observations[0]}


def _sample_obs(space, seed: int, n: int) -> list[dict[str, np.ndarray]]:
    space.seed(seed)
    return [space.sample() for _ in range(n)]


def _episode_obs(env: TrafficSignalCore, steps: int, seed: int = 0) -> list[dict]:
    """The per-light observations of ``steps`` decisions of the fixed-time baseline."""
    obs, infos = env.reset(seed=seed)
    policy = FixedTimePolicy()
    policy.reset(env)
    out = [obs]
    for _ in range(steps):
        obs, _, _, trunc, infos = env.step(policy.compute_actions(obs, infos))
        out.append(obs)
        if trunc["__all__"]:
            break
    return out


@pytest.fixture(scope="module")
def exported(spaces, tmp_path_factory: pytest.TempPathFactory):
    """(base agent dir, trained module, exported agent dir)."""
    root = tmp_path_factory.mktemp("handoff")
    base = _save_base(root / "phase1", _base_config(_movements(spaces[0])))
    module = _trained(spaces, base, controller=ControllerConfig(hidden_dim=16, heads=2))
    return base, module, export_agent(module, base, root / "phase2")


# ---------------------------------------------------------------------- export_agent
def test_export_writes_the_modules_weights_and_keeps_world_model_and_shield(exported) -> None:
    base_dir, module, out = exported
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    agent, base = TrafficAgent.load(out), TrafficAgent.load(base_dir)
    state, base_state = agent.state_dict(), base.state_dict()
    mapped = {ENCODER_PREFIX + k: v for k, v in module.gnn.state_dict().items()}
    mapped |= {f"controller.{k}": v for k, v in module.controller.state_dict().items()}
    kept = [k for k in state if k.startswith(("world_model.", "shield.")) and k not in mapped]
    assert len(mapped) + len(kept) == len(state)  # every exported tensor is accounted for
    for k, v in mapped.items():
        assert torch.equal(state[k], v), k
    assert kept and any(k.startswith("shield.") for k in kept)
    for k in kept:
        assert torch.equal(state[k], base_state[k]), k
    # the module's weights moved away from the base, so equality above is not an accident
    assert not torch.equal(state[ENCODER_PREFIX + "input.weight"], base.gnn.input.weight)
    assert not torch.equal(state[ENCODER_PREFIX + "node_scaler.mean"], torch.zeros(9))
    # the configuration: the module's controller, the base's GNN, world model and shield
    assert agent.config.controller == module.controller.config
    assert agent.config.controller.hidden_dim == 16 != base.config.controller.hidden_dim
    assert agent.config.gnn == module.gnn.config == base.config.gnn
    assert agent.config.world_model == base.config.world_model
    assert agent.config.max_actions == module.controller.max_actions == 4


def test_export_from_a_config_and_refusals(spaces, exported, tmp_path: Path) -> None:
    base_dir, module, _ = exported
    # a config as the base: fresh world model and shield, the module's networks
    cfg = TrafficAgent.load(base_dir).config
    agent = TrafficAgent.load(export_agent(module, cfg, tmp_path / "from-config"))
    torch.testing.assert_close(agent.controller.state_dict(), module.controller.state_dict())
    # an agent with another action count: its world model and shield would not fit
    wide = _save_base(tmp_path / "wide", _base_config(_movements(spaces[0]), max_actions=6))
    with pytest.raises(ValueError, match=r"base agent .*wide.*max_actions: 6 != 4"):
        export_agent(module, wide, tmp_path / "out")
    # a module with a randomly initialised GNN of another size than the base's
    fresh = _build(spaces, GraphModuleConfig(preset="tiny"))
    other = replace(cfg, gnn=replace(cfg.gnn, num_movements=cfg.gnn.num_movements + 1))
    with pytest.raises(ValueError, match=r"gnn\.num_movements: \d+ != \d+"):
        export_agent(fresh, other, tmp_path / "out")
    with pytest.raises(ValueError, match="is the base agent's directory"):
        export_agent(module, base_dir, base_dir)
    with pytest.raises(TypeError, match="RiskGNN"):
        export_agent(object(), cfg, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing written by a refused export


# ---------------------------------------------------------------------- AgentPolicy
def test_policy_logits_equal_the_modules(spaces, exported, default_sc: Scenario) -> None:
    """The same weights and observations (random ones, and a real episode's) give the module's
    logits and values; the module is the fine-tuned one, in train mode, as RLlib leaves it."""
    _, module, out = exported
    policy = AgentPolicy(out)
    env = TrafficSignalCore(EnvConfig(metrics=False), scenario=default_sc)
    try:
        real = [o["A0"] for o in _episode_obs(env, 20)]
    finally:
        env.close()
    for obs in (_sample_obs(spaces[0], 5, 7), real):
        batch = _to_batch(obs)
        got = policy.forward(policy.batch(obs))
        with torch.no_grad():
            want = module.forward_train({Columns.OBS: batch})
        torch.testing.assert_close(got.logits, want[Columns.ACTION_DIST_INPUTS], atol=1e-6, rtol=0)
        torch.testing.assert_close(got.value, want[Columns.EMBEDDINGS], atol=1e-6, rtol=0)
        assert got.logits.shape == (len(obs), 4) and not got.logits.requires_grad
        np.testing.assert_array_equal(
            policy.actions(policy.batch(obs)).numpy(), got.logits.argmax(-1).numpy()
        )


@_FAST
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 6), data=st.data())
def test_actions_always_in_the_mask(spaces, exported, seed: int, n: int, data) -> None:
    _, _, out = exported
    obs = _sample_obs(spaces[0], seed, n)
    for o in obs:
        bits = data.draw(st.lists(st.booleans(), min_size=4, max_size=4))
        o["action_mask"] = np.array(bits if any(bits) else [0, 0, 1, 0], np.int8)
    lights = {f"L{i}": o for i, o in enumerate(obs)}
    for policy in (AgentPolicy(out), AgentPolicy(out, sample=True, seed=seed)):
        for _ in range(3 if policy.sample else 1):
            actions = policy.compute_actions(lights, {})
            assert list(actions) == list(lights)
            for light, action in actions.items():
                assert isinstance(action, int) and lights[light]["action_mask"][action] == 1


def test_sampling_is_seeded(spaces, exported) -> None:
    _, _, out = exported
    obs = {f"L{i}": o for i, o in enumerate(_sample_obs(spaces[0], 9, 40))}

    def draws(seed: int) -> list[dict[str, int]]:  # two steps of one policy
        policy = AgentPolicy(out, sample=True, seed=seed)
        return [policy.compute_actions(obs, {}) for _ in range(2)]

    first = draws(0)
    assert draws(0) == first and first[0] != first[1]  # one stream, not re-seeded per step
    assert draws(1) != first  # another seed, other draws (40 lights, 2 steps)
    greedy = AgentPolicy(out).compute_actions(obs, {})
    assert greedy == AgentPolicy(out, seed=1).compute_actions(obs, {})  # argmax ignores seeds
    assert first[0] != greedy  # sampling is not the argmax


def test_batches_all_lights_of_a_grid_in_one_pass(grid_sc: Scenario, tmp_path: Path) -> None:
    """Four lights of a grid: one forward pass over all of them equals one pass per light."""
    env = TrafficSignalCore(EnvConfig(metrics=False), scenario=grid_sc)
    try:
        obs_space, act_space = _spaces_of(env)
        base = _save_base(tmp_path / "p1", _base_config(_movements(obs_space), act_space.n))
        module = _trained((obs_space, act_space), base)
        policy = AgentPolicy(export_agent(module, base, tmp_path / "p2"))
        policy.reset(env)
        steps = _episode_obs(env, 15)
    finally:
        env.close()
    assert len(steps[-1]) == 4
    for obs in steps[::5]:
        together = policy.forward(policy.batch(list(obs.values()))).logits
        alone = torch.cat([policy.forward(policy.batch([o])).logits for o in obs.values()])
        torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-5)
        assert policy.compute_actions(obs, {}) == dict(
            zip(obs, together.argmax(-1).tolist(), strict=True)
        )


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory, default_sc: Scenario) -> DemandPool:
    sc = default_sc.replace(end=60.0)
    return DemandPool.for_scenario(sc, tmp_path_factory.mktemp("pool"), seeds=(1,), rates=(900,))


def test_held_out_evaluation_with_the_agent(exported, pool: DemandPool, default_sc) -> None:
    _, _, out = exported
    normal, _heavy = pool.held_out((10, 11))
    table = evaluate_heldout(
        default_sc.replace(end=60.0),
        {"agent": AgentPolicy(out), "fixed-time": "fixed-time"},
        normal,
        seeds=[5],
        training_seeds=[0, 1],
    )
    assert table.policies == ("agent", "fixed-time") and len(table.rows) == 4
    agent_rows = [r for r in table.rows if r["policy"] == "agent"]
    assert sorted(r["routes"] for r in agent_rows) == sorted(f.name for f in normal.files)
    for r in agent_rows:
        assert r["status"] == "time_limit" and r["vetoes"] == 0  # only feasible actions
        assert r["throughput"] > 0 and np.isfinite(r["avg_delay"])
    assert table.summary()["agent"]["avg_delay"].n == 2


def test_env_the_agent_cannot_read_is_refused_at_reset(exported, default_sc) -> None:
    _, _, out = exported
    policy = AgentPolicy(out)
    env = TrafficSignalCore(EnvConfig(max_phases=6, metrics=False), scenario=default_sc)
    try:
        with pytest.raises(ValueError, match=r"6 actions per light.*scores 4"):
            policy.reset(env)
    finally:
        env.close()
    with pytest.raises(ValueError, match="sample"):
        AgentPolicy(out, sample=1)  # type: ignore[arg-type]


def test_truncated_or_missing_weights_are_errors_naming_the_file(exported, tmp_path) -> None:
    _, _, out = exported
    broken = Path(shutil.copytree(out, tmp_path / "broken"))
    weights = broken / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=re.escape(str(weights))):
        AgentPolicy(broken)
    weights.unlink()
    with pytest.raises(CheckpointError, match=re.escape(str(weights)) + ".*missing"):
        AgentPolicy(broken)
    with pytest.raises(CheckpointError, match=r"config\.json.*missing"):
        AgentPolicy(tmp_path / "nothing")


def test_agent_policy_never_imports_ray(fresh_python, exported) -> None:
    """A fresh interpreter imports the policy (no torch yet), loads an agent and drives SUMO's
    default scenario for a few decisions: Ray is never imported."""
    _, _, out = exported
    code = (
        "import sys\n"
        "from tj_rl.control.agent_policy import AgentPolicy\n"
        "import tj_rl.control, tj_rl.env as E\n"
        "early = sorted(m for m in ('torch', 'ray', 'tj_models') if m in sys.modules)\n"
        "assert tj_rl.control.AgentPolicy is AgentPolicy\n"
        f"policy = AgentPolicy({str(out)!r})\n"
        "env = E.TrafficSignalCore(E.EnvConfig(metrics=False),\n"
        "    scenario=E.default_scenario().replace(end=30.0))\n"
        "obs, infos = env.reset(seed=0)\n"
        "policy.reset(env)\n"
        "for _ in range(3):\n"
        "    obs, _, _, _, infos = env.step(policy.compute_actions(obs, infos))\n"
        "env.close()\n"
        "print(early, 'torch' in sys.modules, 'ray' in sys.modules)\n"
    )
    assert fresh_python(code, timeout=180) == "[] True False"


# ---------------------------------------------------------------------- lights that differ
def _city_scenario(out: Path) -> Scenario:
    """SUMO's OSM city net (``tools/game/DRT``) with one minute of random trips."""
    net = sumo_home() / "tools/game/DRT/osm.net.xml"
    routes = out / "city.rou.xml"
    cmd = tool_command(
        "randomTrips.py", f"--net-file={net}", f"--output-trip-file={out / 'city.trips.xml'}",
        f"--route-file={routes}", "--seed=2", "--begin=0", "--end=60", "--period=1",
        "--fringe-factor=10", "--min-distance=200", "--validate",
    )  # fmt: skip
    subprocess.run(cmd, env=child_env(), cwd=out, check=True, capture_output=True, timeout=120)
    return Scenario(net_file=net, route_files=(routes,), end=60.0)


@pytest.mark.slow
def test_city_net_needs_one_padded_space(tmp_path: Path) -> None:
    """15 lights that differ: refused unpadded (no single batch); padded to the scenario, one
    pass per step over all of them picks only actions their masks allow."""
    sc = _city_scenario(tmp_path)
    env = TrafficSignalCore(EnvConfig(pad_to_scenario=True, metrics=False), scenario=sc)
    plain = TrafficSignalCore(EnvConfig(metrics=False), scenario=sc)
    try:
        obs_space, act_space = _spaces_of(env)
        cfg = _base_config(_movements(obs_space), int(act_space.n))
        base = _save_base(tmp_path / "p1", cfg)
        module = _trained((obs_space, act_space), base)
        policy = AgentPolicy(export_agent(module, base, tmp_path / "p2"))
        with pytest.raises(ValueError, match=r"different observation spaces.*pad_to_scenario"):
            policy.reset(plain)
        obs, infos = env.reset(seed=0)
        policy.reset(env)
        for _ in range(5):
            actions = policy.compute_actions(obs, infos)
            assert all(obs[a]["action_mask"][act] == 1 for a, act in actions.items())
            obs, _, _, _, infos = env.step(actions)
            assert not any(i["vetoed"] for i in infos.values())
    finally:
        env.close()
        plain.close()


# ---------------------------------------------------------------------- from RLlib
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ppo_checkpoint_to_agent(local_ray, tmp_path: Path) -> None:
    """The README's route: one PPO iteration from a phase-1 agent, an RLlib checkpoint, the
    learner's module restored from it, exported; the agent holds the learner's weights."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_LEARNER_GROUP, COMPONENT_RL_MODULE
    from ray.rllib.core.rl_module import RLModule

    from tj_rl.rllib import TrafficSignalEnv
    from tj_rl.rllib.module import SHARED_POLICY, shared_module_spec, shared_policy_mapping

    env_config = {"scenario": default_scenario().replace(end=100.0), "metrics": False}
    probe = TrafficSignalCore(env_config)
    obs_space, act_space = _spaces_of(probe)
    base = _save_base(tmp_path / "phase1", _base_config(_movements(obs_space), int(act_space.n)))
    config = (
        PPOConfig()
        .environment(TrafficSignalEnv, env_config=env_config)
        .env_runners(num_env_runners=1, num_envs_per_env_runner=1, num_cpus_per_env_runner=0)
        .multi_agent(policies={SHARED_POLICY}, policy_mapping_fn=shared_policy_mapping)
        .rl_module(rl_module_spec=shared_module_spec(GraphModuleConfig(agent_dir=str(base))))
        .training(train_batch_size_per_learner=20, minibatch_size=10, num_epochs=1, lr=1e-3)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        algo.train()
        checkpoint = Path(algo.save_to_path(tmp_path / "rllib"))
        learner = algo.learner_group.get_weights([SHARED_POLICY])[SHARED_POLICY]
    finally:
        algo.stop()
    module = RLModule.from_checkpoint(
        checkpoint / COMPONENT_LEARNER_GROUP / COMPONENT_LEARNER / COMPONENT_RL_MODULE
        / SHARED_POLICY
    )  # fmt: skip
    agent = TrafficAgent.load(export_agent(module, base, tmp_path / "phase2"))
    state = agent.state_dict()
    for k, v in learner.items():
        name = ENCODER_PREFIX + k[4:] if k.startswith("gnn.") else k
        assert np.array_equal(state[name].numpy(), v), k
    base_state = TrafficAgent.load(base).state_dict()
    kept = [k for k in state if k.startswith(("world_model.", "shield."))]
    kept = [k for k in kept if not k.startswith(ENCODER_PREFIX)]
    assert kept and len(kept) + len(learner) == len(state)
    assert all(torch.equal(state[k], base_state[k]) for k in kept)
