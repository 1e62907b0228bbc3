"""Learning from demonstrations (``tj_rl.imitation``, ``tj_rl.rllib.imitation``): returns are
discounted per light, the teacher labels every visited state (also when another policy drives:
DAgger), stored observations are copies, a clone fits the teacher's greens and drops masked
labels, a module starts from the clone's controller, and one PPO iteration runs with the fading
KL term to the clone (logged with its coefficient)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from tj_models import TrafficAgentConfig
from tj_rl.control import DilemmaProtectedPolicy, MaxOccupancyPolicy, RandomPolicy
from tj_rl.env import EnvConfig, Scenario, TrafficSignalCore, default_scenario
from tj_rl.imitation import (
    CloneConfig,
    Demonstrations,
    clone,
    discounted_returns,
    record_demonstrations,
    value_weight,
)
from tj_rl.rllib.export import export_agent
from tj_rl.rllib.imitation import imitation_coeff
from tj_rl.rllib.module import GraphModuleConfig, graph_module_spec

ENV = EnvConfig(metrics=False, pad_to_scenario=True, reward="queue", reward_scale=0.02)


def _spaces(scenario: Scenario):
    core = TrafficSignalCore(ENV, scenario=scenario)
    light = core.possible_agents[0]
    try:
        return core.observation_spaces[light], core.action_spaces[light]
    finally:
        core.close()


def _module(spaces, seed: int = 0, **kwargs):
    torch.manual_seed(seed)
    return graph_module_spec(GraphModuleConfig(**kwargs), observation_space=spaces[0],
                             action_space=spaces[1]).build()  # fmt: skip


def _export(module, out: Path) -> Path:
    """``module`` as an agent folder (a fresh world model and shield around its networks)."""
    base = TrafficAgentConfig.preset("tiny", max_actions=module.controller.max_actions)
    base = dataclasses.replace(base, gnn=module.gnn.config, controller=module.controller.config)
    return export_agent(module, base, out)


def _record(scenario: Scenario, seeds, acting=None,
            make=MaxOccupancyPolicy) -> tuple[Demonstrations, list]:  # fmt: skip
    env = TrafficSignalCore(ENV, scenario=scenario)
    try:
        demos = record_demonstrations(env, make(), seeds, acting=acting)
        teacher = make()
        teacher.reset(env)
        light = env.possible_agents[0]
        again = [teacher.compute_actions({light: {k: v[i] for k, v in demos.obs.items()}}, {})[light]
                 for i in range(len(demos))]  # fmt: skip
    finally:
        env.close()
    return demos, again


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny batches: with 2 intra-op threads on a loaded 2-core host every op waits for a
    descheduled spinning worker (tj-hybrid's ``torch_threads``)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def short() -> Scenario:
    return default_scenario().replace(end=300.0)


@pytest.fixture(scope="module")
def demos(short: Scenario) -> Demonstrations:
    return _record(short, [11, 12])[0]


def test_discounted_returns_per_light() -> None:
    rewards = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    got = discounted_returns(rewards, 0.5)
    want = np.array([[1 + 0 + 0.25, 0 + 1 + 0.25], [0 + 0.5, 2 + 0.5], [1.0, 1.0]])
    np.testing.assert_allclose(got, want)


def test_teacher_labels_every_step_it_drives(short: Scenario) -> None:
    demos, again = _record(short, [11])
    assert len(demos) == round(300 / ENV.delta_time) and demos.episodes == 1  # one light
    assert demos.agreement == 1.0
    assert demos.actions.tolist() == again  # the label is the teacher's choice on that state
    assert len(np.unique(demos.obs["time_in_phase"])) > 3  # copies, not one reused buffer
    assert np.isfinite(demos.returns).all() and demos.returns[0] != demos.returns[-1]


def test_the_dilemma_protected_baseline_is_a_teacher_too(short: Scenario) -> None:
    """``dz-protected`` picks greens through the env from the observation alone, so its labels
    are what it would do on the recorded state (tj-hybrid lets phase 2 clone it)."""
    demos, again = _record(short, [11], make=DilemmaProtectedPolicy)
    assert demos.actions.tolist() == again and demos.agreement == 1.0
    plain, _ = _record(short, [11])
    assert len(demos) == len(plain)


def test_dagger_labels_the_states_another_policy_visits(short: Scenario) -> None:
    demos, again = _record(short, [11], acting=RandomPolicy(seed=4))
    assert demos.actions.tolist() == again
    assert 0.0 < demos.agreement < 1.0
    rows = np.arange(len(demos))
    assert demos.obs["action_mask"][rows, demos.actions].all()  # labels respect the mask
    both = demos + demos
    assert len(both) == 2 * len(demos) and both.episodes == 2


def test_demonstrations_reject_mismatched_lengths(demos: Demonstrations) -> None:
    with pytest.raises(ValueError, match="differ"):
        Demonstrations(obs=demos.obs, actions=demos.actions[:-1], returns=demos.returns[:-1])


def test_clone_fits_the_teacher_and_drops_masked_labels(short: Scenario,
                                                        demos: Demonstrations) -> None:  # fmt: skip
    module = _module(_spaces(short))
    rows = np.arange(len(demos))
    before = (module.policy({k: torch.from_numpy(v) for k, v in demos.obs.items()}).logits
              .argmax(-1).numpy() == demos.actions).mean()  # fmt: skip
    bad = dataclasses.replace(demos, actions=demos.actions.copy())
    masked = np.flatnonzero(~demos.obs["action_mask"][0].astype(bool))
    bad.actions[0] = masked[0]  # an illegal label: dropped, counted
    result = clone(module.actor, [module.controller], bad,
                   CloneConfig(epochs=40, patience=40, lr=3e-3, validation_fraction=0.2))
    assert result.dropped == 1 and result.samples == len(demos) - 1
    assert result.train_accuracy >= 0.85 > before, (result, before)
    # forced decisions (one legal green) are always right: the choices alone score lower
    assert 0.0 <= result.validation_choice_accuracy <= result.validation_accuracy
    logits = module.policy({k: torch.from_numpy(v) for k, v in demos.obs.items()}).logits
    assert (logits.argmax(-1).numpy()[rows[1:]] == demos.actions[1:]).mean() >= 0.8


def test_returns_of_any_scale_leave_the_clone_its_greens(short: Scenario,
                                                        demos: Demonstrations) -> None:  # fmt: skip
    """The value head shares the controller's tokens: returns a thousand times larger (a city's
    queues: Braunschweig's were -86 +- 33) must not drown the cross-entropy, so the clone fits
    the same greens as on the recorded scale (the value loss is divided by their variance)."""
    assert value_weight(0.5, np.array([0.0, 1.0])) == 0.5  # variance 0.25: as it was
    assert value_weight(0.5, np.array([-10.0, 10.0])) == pytest.approx(0.005)  # variance 100
    loud = dataclasses.replace(demos, returns=demos.returns * 1000.0 - 5000.0)
    cfg = CloneConfig(epochs=40, patience=40, lr=3e-3, validation_fraction=0.2)
    fits = {}
    for name, d in (("recorded", demos), ("x1000", loud)):
        module = _module(_spaces(short))
        fits[name] = clone(module.actor, [module.controller], d, cfg).train_accuracy
    assert fits["x1000"] >= 0.85 and abs(fits["x1000"] - fits["recorded"]) <= 0.05, fits


def test_clone_config_is_checked() -> None:
    for bad in ({"epochs": 0}, {"lr": -1.0}, {"validation_fraction": 0.7}, {"batch": True}):
        with pytest.raises(ValueError, match="CloneConfig"):
            CloneConfig(**bad)


def test_a_module_starts_from_the_clones_controller(short: Scenario, demos: Demonstrations,
                                                    tmp_path: Path) -> None:  # fmt: skip
    spaces = _spaces(short)
    module = _module(spaces)
    clone(module.actor, [module.controller], demos, CloneConfig(epochs=2))
    agent = _export(module, tmp_path / "clone")
    started = _module(spaces, seed=5, agent_dir=str(agent), load_controller=True)
    fresh = _module(spaces, seed=5, agent_dir=str(agent))
    want = module.controller.state_dict()
    assert all(torch.equal(started.controller.state_dict()[k], v) for k, v in want.items())
    assert not all(torch.equal(fresh.controller.state_dict()[k], v) for k, v in want.items())
    with pytest.raises(ValueError, match="load_controller needs agent_dir"):
        GraphModuleConfig(load_controller=True)


def test_imitation_coefficient_fades_linearly() -> None:
    assert imitation_coeff(2.0, 100, 0) == 2.0
    assert imitation_coeff(2.0, 100, 50) == pytest.approx(1.0)
    assert imitation_coeff(2.0, 100, 150) == 0.0
    assert imitation_coeff(2.0, 0, 0) == 0.0


def test_one_ppo_iteration_with_the_imitation_term(local_ray, short: Scenario,
                                                   demos: Demonstrations, tmp_path: Path) -> None:  # fmt: skip
    """The learner starts from the clone and logs the KL to it with the full coefficient (no
    env step sampled before the first update); restored from its checkpoint, it goes on with the
    coefficient of the steps sampled so far, not the full one again."""
    from ray.rllib.algorithms.ppo import PPOConfig

    from tj_rl.rllib import TrafficSignalEnv, shared_module_spec, shared_policy_mapping
    from tj_rl.rllib.imitation import imitation_learner
    from tj_rl.rllib.module import SHARED_POLICY

    spaces = _spaces(short)
    module = _module(spaces)
    clone(module.actor, [module.controller], demos, CloneConfig(epochs=3))
    agent = _export(module, tmp_path / "clone")
    env_config = {"scenario": short.replace(end=200.0), "metrics": False, "pad_to_scenario": True,
                  "reward": "queue", "reward_scale": 0.02}  # fmt: skip
    config = (
        PPOConfig()
        .environment(TrafficSignalEnv, env_config=env_config)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
        .multi_agent(policies={SHARED_POLICY}, policy_mapping_fn=shared_policy_mapping)
        .rl_module(rl_module_spec=shared_module_spec(
            GraphModuleConfig(agent_dir=str(agent), load_controller=True)))
        .training(train_batch_size_per_learner=40, minibatch_size=20, num_epochs=2, lr=1e-3)
        .debugging(seed=0)
    )
    config = imitation_learner(config, agent_dir=str(agent), coeff=0.5, decay_env_steps=1000)
    algo = config.build_algo()
    try:
        start = algo.learner_group.get_weights([SHARED_POLICY])[SHARED_POLICY]
        result = algo.train()
        sampled = int(result["env_runners"]["num_env_steps_sampled_lifetime"])
        algo.save_to_path(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    want = module.controller.state_dict()
    assert all(np.allclose(start[f"controller.{k}"], v.numpy()) for k, v in want.items())
    learner = result["learners"][SHARED_POLICY]
    assert learner["imitation_coeff"] == pytest.approx(0.5)
    assert 0.0 <= learner["imitation_kl"] < 1.0  # the policy starts as the clone

    # resumed: the first update continues the fade where the checkpoint left it
    again = config.build_algo()
    try:
        again.restore_from_path(str(tmp_path / "ckpt"))
        resumed = again.train()["learners"][SHARED_POLICY]
    finally:
        again.stop()
    assert sampled > 0
    assert resumed["imitation_coeff"] == pytest.approx(0.5 * (1 - sampled / 1000))
