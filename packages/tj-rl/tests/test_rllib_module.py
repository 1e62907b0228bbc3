"""The RLlib graph module (``tj_rl.rllib.module``): unpadding into one graph batch, exact action
masking that never touches the input batch, one module for lights that differ (SUMO's OSM city
net), the frozen phase-1 GNN (loaded checksum-verified from an agent directory) and one real PPO
iteration on RLlib's new API stack with a Ray instance started and stopped by the test."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchCategorical

from tj_models import CheckpointError, ControllerConfig, TrafficAgent, TrafficAgentConfig
from tj_rl.control.unpad import unpad_observations
from tj_rl.env import EnvConfig, Scenario, TrafficSignalCore, default_scenario
from tj_rl.env.runtime import child_env, sumo_home, tool_command
from tj_rl.rllib.module import (
    MODEL_CONFIG_KEY,
    SHARED_POLICY,
    GraphModuleConfig,
    TrafficRLModule,
    graph_module_spec,
    shared_module_spec,
    shared_policy_mapping,
)

_FAST = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def spaces(default_sc: Scenario):
    """Observation and action space of the default light with two padded actions (6 of them)."""
    env = TrafficSignalCore(EnvConfig(max_phases=6, metrics=False), scenario=default_sc)
    return env.observation_spaces["A0"], env.action_spaces["A0"]


def _build(spaces, config: GraphModuleConfig | None = None, seed: int = 0) -> TrafficRLModule:
    torch.manual_seed(seed)
    obs_space, act_space = spaces
    spec = graph_module_spec(config, observation_space=obs_space, action_space=act_space)
    return spec.build()


@pytest.fixture(scope="module")
def module(spaces) -> TrafficRLModule:
    return _build(spaces)


def _sample_obs(space, rng: np.random.Generator, n: int) -> list[dict[str, np.ndarray]]:
    space.seed(int(rng.integers(2**31)))
    return [space.sample() for _ in range(n)]


# ---------------------------------------------------------------------- unpadding (more: test_unpad.py)
def _unpad_reference(obs: list[dict[str, np.ndarray]]):
    """The same graph batch built sample by sample (a loop: the definition, not the fast path)."""
    xs, edges, attrs, offset = [], [], [], 0
    for o in obs:
        real = np.flatnonzero(o["node_mask"])
        new = {int(s): offset + i for i, s in enumerate(real)}
        xs.append(o["nodes"][real])
        for k in np.flatnonzero(o["edge_mask"]):
            s, d = (int(v) for v in o["edge_index"][:, k])
            if s in new and d in new:
                edges.append((new[s], new[d]))
                attrs.append(o["edge_attr"][k])
        offset += len(real)
    return np.concatenate(xs), np.array(edges, np.int64).reshape(-1, 2).T, attrs


@_FAST
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 5))
def test_unpad_equals_a_per_sample_loop(spaces, to_batch, seed: int, n: int) -> None:
    obs = _sample_obs(spaces[0], np.random.default_rng(seed), n)  # random masks, any slots
    g = unpad_observations(to_batch(obs))
    x, edge_index, attrs = _unpad_reference(obs)
    np.testing.assert_array_equal(g.x.numpy(), x)
    np.testing.assert_array_equal(g.edge_index.numpy(), edge_index)
    np.testing.assert_array_equal(g.edge_attr.numpy(), np.array(attrs).reshape(-1, 4))
    assert g.ptr.tolist() == [0, *np.cumsum([o["node_mask"].sum() for o in obs]).tolist()]


# ---------------------------------------------------------------------- masking
@_FAST
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 4), data=st.data())
def test_actions_always_in_the_mask_and_input_unchanged(
    module, spaces, to_batch, seed, n, data
) -> None:
    n_actions = int(spaces[1].n)
    obs = _sample_obs(spaces[0], np.random.default_rng(seed), n)
    for o in obs:
        bits = data.draw(st.lists(st.booleans(), min_size=n_actions, max_size=n_actions))
        o["action_mask"] = np.array(bits if any(bits) else [1, *bits[1:]], np.int8)
    batch = to_batch(obs)
    before = {k: v.clone() for k, v in batch.items()}
    allowed = batch["action_mask"].bool()
    for forward in (module.forward_exploration, module.forward_inference, module.forward_train):
        out = forward({Columns.OBS: batch})
        dist = module.get_exploration_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
        assert dist.to_deterministic().sample().shape == (n,)
        picks = torch.stack([dist.sample() for _ in range(32)] + [dist.to_deterministic().sample()])
        assert allowed.gather(1, picks.T).all()
        probs = torch.softmax(out[Columns.ACTION_DIST_INPUTS], -1)
        assert torch.all(probs[~allowed] == 0.0)
    assert batch.keys() == before.keys()
    for k, v in batch.items():
        assert torch.equal(v, before[k]) and v.dtype == before[k].dtype, k


def test_forward_train_outputs_values(module, spaces, to_batch) -> None:
    obs = _sample_obs(spaces[0], np.random.default_rng(0), 3)
    batch = {Columns.OBS: to_batch(obs)}
    out = module.forward_train(batch)
    assert out[Columns.EMBEDDINGS].shape == (3,)
    values = module.compute_values(batch)  # a fresh pass gives the same values
    torch.testing.assert_close(values, out[Columns.EMBEDDINGS])
    assert (
        module.compute_values(batch, embeddings=out[Columns.EMBEDDINGS]) is out[Columns.EMBEDDINGS]
    )


def test_sampling_forwards_skip_the_mode_flip_only_without_mode_layers(spaces, to_batch) -> None:
    """Without dropout the sampling forwards leave the module's mode alone and equal RLlib's own
    (eval-mode) forward; with dropout RLlib's flip to eval mode still happens."""
    from ray.rllib.core.rl_module.torch import TorchRLModule

    obs = _sample_obs(spaces[0], np.random.default_rng(3), 4)
    batch = {Columns.OBS: to_batch(obs)}
    plain = _build(spaces)
    plain.train()
    calls: list[bool] = []
    plain.controller.register_forward_hook(lambda m, i, o: calls.append(m.training))
    for fwd in ("forward_exploration", "forward_inference"):
        ours = getattr(plain, fwd)(batch)[Columns.ACTION_DIST_INPUTS]
        rllib = getattr(TorchRLModule, fwd)(plain, batch)[Columns.ACTION_DIST_INPUTS]
        torch.testing.assert_close(ours, rllib)
        assert plain.training
    assert calls == [True, False, True, False]  # ours ran in train mode, RLlib's in eval mode

    base = TrafficAgentConfig.preset("tiny").controller
    dropout = GraphModuleConfig(controller=replace(base, dropout=0.5))
    noisy = _build(spaces, dropout)
    noisy.train()
    modes: list[bool] = []
    noisy.controller.register_forward_hook(lambda m, i, o: modes.append(m.training))
    a = noisy.forward_exploration(batch)[Columns.ACTION_DIST_INPUTS]
    b = noisy.forward_exploration(batch)[Columns.ACTION_DIST_INPUTS]
    torch.testing.assert_close(a, b)  # eval mode: dropout off, deterministic
    assert modes == [False, False] and noisy.training


# ---------------------------------------------------------------------- lights that differ
def _city_scenario(out: Path) -> Scenario:
    """SUMO's OSM city net (``tools/game/DRT``) with 2 minutes of random trips (its own demand
    is a few taxis that hardly pass a light)."""
    net = sumo_home() / "tools/game/DRT/osm.net.xml"
    routes = out / "city.rou.xml"
    cmd = tool_command(
        "randomTrips.py", f"--net-file={net}", f"--output-trip-file={out / 'city.trips.xml'}",
        f"--route-file={routes}", "--seed=1", "--begin=0", "--end=120", "--period=1",
        "--fringe-factor=10", "--min-distance=200", "--validate",
    )  # fmt: skip
    subprocess.run(cmd, env=child_env(), cwd=out, check=True, capture_output=True, timeout=120)
    return Scenario(net_file=net, route_files=(routes,), end=120.0)


@pytest.mark.slow
def test_city_net_lights_share_one_space_and_module(tmp_path: Path, to_batch) -> None:
    """SUMO's OSM city net: 15 lights with 2..10 greens and 4..49 lane rows. Padded to the
    scenario, all share one space; one module runs on all their observations at once and only
    ever picks actions their shields accept."""
    sc = _city_scenario(tmp_path)
    plain = TrafficSignalCore(EnvConfig(metrics=False), scenario=sc)
    assert len({str(s) for s in plain.observation_spaces.values()}) > 1
    greens = {a: lt.program.n_greens for a, lt in plain.lights.items()}
    assert len(set(greens.values())) >= 4
    env = TrafficSignalCore(EnvConfig(pad_to_scenario=True, metrics=False), scenario=sc)
    try:
        spaces_ = list(env.observation_spaces.values())
        assert all(s == spaces_[0] for s in spaces_)
        assert {a.n for a in env.action_spaces.values()} == {max(greens.values())}
        module = _build((spaces_[0], env.action_spaces[env.possible_agents[0]]))
        obs, _ = env.reset(seed=0)
        seen_nodes = 0
        for _ in range(10):
            agents = list(obs)
            assert all(spaces_[0].contains(obs[a]) for a in agents)
            batch = to_batch([obs[a] for a in agents])
            seen_nodes += int(batch["node_mask"].sum())
            out = module.forward_exploration({Columns.OBS: batch})
            actions = TorchCategorical.from_logits(out[Columns.ACTION_DIST_INPUTS]).sample()
            for a, act in zip(agents, actions.tolist(), strict=True):
                assert act < greens[a] and obs[a]["action_mask"][act] == 1
            obs, _, _, _, infos = env.step(dict(zip(agents, actions.tolist(), strict=True)))
            assert not any(i["vetoed"] for i in infos.values())
        assert seen_nodes > 100
    finally:
        env.close()


# ---------------------------------------------------------------------- frozen GNN, loading
def _loss(module: TrafficRLModule, batch: dict) -> torch.Tensor:
    out = module.forward_train(batch)
    dist = TorchCategorical.from_logits(out[Columns.ACTION_DIST_INPUTS])
    actions = batch[Columns.OBS]["action_mask"].float().argmax(-1)
    values = module.compute_values(batch, embeddings=out[Columns.EMBEDDINGS])
    cost_values = module.policy(batch[Columns.OBS]).cost_value  # every head gets a gradient
    return -dist.logp(actions).mean() + values.pow(2).mean() + cost_values.pow(2).mean()


@pytest.mark.parametrize("mode", ["frozen", "finetune"])
def test_frozen_gnn_is_unchanged_by_an_optimizer_step(spaces, to_batch, mode: str) -> None:
    """As RLlib's torch learner does: Adam over every module parameter, one step on a loss of the
    module's outputs. A frozen GNN gets no gradient and stays in eval mode; finetune trains it."""
    module = _build(spaces, GraphModuleConfig(gnn=mode))
    batch = {Columns.OBS: to_batch(_sample_obs(spaces[0], np.random.default_rng(4), 6))}
    gnn0 = {k: v.clone() for k, v in module.gnn.state_dict().items()}
    ctl0 = {k: v.clone() for k, v in module.controller.state_dict().items()}
    optimizer = torch.optim.Adam(module.parameters(), lr=1e-2)
    module.train()
    _loss(module, batch).backward()
    optimizer.step()
    gnn_same = all(torch.equal(v, gnn0[k]) for k, v in module.gnn.state_dict().items())
    ctl_same = all(torch.equal(v, ctl0[k]) for k, v in module.controller.state_dict().items())
    assert not ctl_same
    if mode == "frozen":
        assert gnn_same and not module.gnn.training and module.controller.training
        assert all(p.grad is None and not p.requires_grad for p in module.gnn.parameters())
    else:
        assert not gnn_same and module.gnn.training


def _agent_dir(tmp_path: Path, movements: int, seed: int = 1, node_features: int = 9) -> Path:
    base = TrafficAgentConfig.preset("tiny", max_actions=4)
    cfg = replace(
        base,
        gnn=replace(base.gnn, num_movements=movements, node_features=node_features),
        controller=replace(base.controller, hidden_dim=16, heads=2),
    )
    torch.manual_seed(seed)
    agent = TrafficAgent(cfg)
    return agent.save(tmp_path / "agent")


def test_loads_the_phase1_gnn_from_an_agent_directory(spaces, to_batch, tmp_path: Path) -> None:
    movements = int(spaces[0]["movement"].high.max()) + 1
    directory = _agent_dir(tmp_path, movements=movements + 3)
    agent = TrafficAgent.load(directory)
    module = _build(spaces, GraphModuleConfig(agent_dir=str(directory)), seed=7)
    loaded = module.gnn.state_dict()
    assert loaded.keys() == agent.gnn.state_dict().keys()
    for k, v in agent.gnn.state_dict().items():
        assert torch.equal(loaded[k], v), k
    assert module.controller.config.hidden_dim == 16  # the agent's controller configuration
    assert module.controller.max_actions == 6  # ... sized for the env's (padded) actions
    fresh = _build(spaces, GraphModuleConfig(), seed=7).gnn.state_dict()  # random init differs
    assert not torch.equal(fresh["input.weight"], loaded["input.weight"])
    obs = to_batch(_sample_obs(spaces[0], np.random.default_rng(0), 2))
    out = module.forward_exploration({Columns.OBS: obs})
    assert out[Columns.ACTION_DIST_INPUTS].shape == (2, 6)


def test_agent_directory_errors(spaces, tmp_path: Path) -> None:
    movements = int(spaces[0]["movement"].high.max()) + 1
    small = _agent_dir(tmp_path / "small", movements=movements - 1)
    with pytest.raises(ValueError, match=r"EnvConfig\.max_lanes <= "):
        _build(spaces, GraphModuleConfig(agent_dir=str(small)))
    wide = _agent_dir(tmp_path / "wide", movements=movements, node_features=10)
    with pytest.raises(ValueError, match=r"reads 10 node and 4 edge features.*\(9, 4\)"):
        _build(spaces, GraphModuleConfig(agent_dir=str(wide)))
    corrupt = _agent_dir(tmp_path / "corrupt", movements=movements)
    weights = corrupt / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="sha256"):
        _build(spaces, GraphModuleConfig(agent_dir=str(corrupt)))
    with pytest.raises(CheckpointError, match="missing"):
        _build(spaces, GraphModuleConfig(agent_dir=str(tmp_path / "nothing")))


# ---------------------------------------------------------------------- config and specs
def test_config_round_trip_and_validation() -> None:
    cfg = GraphModuleConfig(
        preset="tiny",
        gnn="finetune",
        agent_dir=Path("runs/x/phase1/agent"),
        controller=ControllerConfig(hidden_dim=16, heads=2),
    )
    assert cfg.agent_dir == "runs/x/phase1/agent"
    assert GraphModuleConfig.from_dict(cfg.to_dict()) == cfg
    for kwargs, message in [
        ({"gnn": "train"}, r"GraphModuleConfig\.gnn: 'train'"),
        ({"preset": "huge"}, r"GraphModuleConfig\.preset: 'huge'"),
        ({"agent_dir": ""}, r"GraphModuleConfig\.agent_dir"),
        ({"validate": 1}, r"GraphModuleConfig\.validate"),
    ]:
        with pytest.raises(ValueError, match=message):
            GraphModuleConfig(**kwargs)
    with pytest.raises(ValueError, match=r"unknown config key\(s\): gnn_mode"):
        GraphModuleConfig.from_dict({"gnn_mode": "frozen"})


def test_spec_builds_with_rllibs_own_model_config_keys(spaces, to_batch) -> None:
    """RLlib merges its keys (PPO: vf_share_layers) into model_config: the module ignores them."""
    config = GraphModuleConfig(gnn="finetune", validate=True)
    spec = graph_module_spec(config, observation_space=spaces[0], action_space=spaces[1])
    spec.model_config = {**spec.model_config, "vf_share_layers": False}
    module = spec.build()
    assert isinstance(module, TrafficRLModule) and module.module_config == config
    obs = to_batch(_sample_obs(spaces[0], np.random.default_rng(1), 2))
    out = module.forward_exploration({Columns.OBS: obs})  # through tj-models' input checks
    assert torch.isfinite(out[Columns.ACTION_DIST_INPUTS]).all()
    multi = shared_module_spec(GraphModuleConfig())
    assert list(multi.rl_module_specs) == [SHARED_POLICY]
    assert multi.rl_module_specs[SHARED_POLICY].model_config == {
        MODEL_CONFIG_KEY: GraphModuleConfig().to_dict()
    }
    assert shared_policy_mapping("any light", None) == SHARED_POLICY


# ---------------------------------------------------------------------- PPO
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_one_ppo_iteration_with_the_graph_module(local_ray) -> None:
    """One PPO iteration (new API stack) with one env runner process holding a libsumo env of the
    embedded scenario cut to 200 s: the learner's GNN is unchanged, its controller trained, and the
    env runner's module has the learner's GNN (frozen weights are synced, not re-drawn)."""
    from ray.rllib.algorithms.ppo import PPOConfig

    from tj_rl.rllib import TrafficSignalEnv

    scenario = default_scenario().replace(end=200.0)
    env_config = {"scenario": scenario, "metrics": False, "pad_to_scenario": True}
    probe = TrafficSignalCore(env_config)
    spaces_ = (probe.observation_spaces["A0"], probe.action_spaces["A0"])
    n_gnn = sum(p.numel() for p in _build(spaces_).gnn.parameters())
    config = (
        PPOConfig()
        .environment(TrafficSignalEnv, env_config=env_config)
        .env_runners(num_env_runners=1, num_envs_per_env_runner=1, num_cpus_per_env_runner=0)
        .multi_agent(policies={SHARED_POLICY}, policy_mapping_fn=shared_policy_mapping)
        .rl_module(rl_module_spec=shared_module_spec(GraphModuleConfig()))
        .training(train_batch_size_per_learner=40, minibatch_size=20, num_epochs=2, lr=1e-3)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        before = algo.learner_group.get_weights([SHARED_POLICY])[SHARED_POLICY]
        result = algo.train()
        after = algo.learner_group.get_weights([SHARED_POLICY])[SHARED_POLICY]
        remote = algo.env_runner_group.foreach_env_runner(
            lambda runner: runner.module[SHARED_POLICY].get_state(), local_env_runner=False
        )[0]
    finally:
        algo.stop()
    gnn = [k for k in before if k.startswith("gnn.")]
    ctl = [k for k in before if k.startswith("controller.")]
    assert gnn and ctl
    assert all(np.array_equal(before[k], after[k]) for k in gnn)
    assert not all(np.array_equal(before[k], after[k]) for k in ctl)
    assert all(np.array_equal(remote[k], after[k]) for k in gnn)
    learner = result["learners"][SHARED_POLICY]
    assert learner["num_non_trainable_parameters"] == n_gnn
    assert np.isfinite(learner["total_loss"]) and learner["num_module_steps_trained"] >= 40
    assert result["env_runners"]["num_episodes"] >= 1


def test_module_names_are_lazy(fresh_python) -> None:
    """``import tj_rl.rllib`` (and a padded env) loads neither Ray nor torch; the module's names
    load them on first use."""
    code = (
        "import sys\n"
        "import tj_rl.env as E, tj_rl.rllib as R\n"
        "E.TrafficSignalCore(E.EnvConfig(pad_to_scenario=True))\n"
        "before = sorted(m for m in ('torch', 'ray', 'tj_models') if m in sys.modules)\n"
        "spec = R.graph_module_spec(R.GraphModuleConfig())\n"
        "from tj_rl.rllib.module import TrafficRLModule\n"
        "assert spec.module_class is TrafficRLModule is R.TrafficRLModule\n"
        "print(before, 'torch' in sys.modules and 'ray' in sys.modules)\n"
    )
    assert fresh_python(code, timeout=180) == "[] True"

