"""One actor: the same weights and observations through every caller that acts with the graph
policy give identical logits and actions (issue 26).

Callers: RLlib's ``TrafficRLModule`` (its ``action_dist_inputs``) and ``ModulePolicy`` over it,
``AgentPolicy`` on the exported agent (argmax and seeded draws), phase 3's ``RolloutCollector``
(its forward pass and its seeded draws) and phase 3's learner (the actor's heads on a collated
batch of the same observations as rollout samples, with the encoder's output computed apart as
phase 3 caches it). Observations: a real fixed-time episode on a generated 2x2 grid (four lights
whose greens serve different lanes, padded to one space), so masks and padding are exercised.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from tj_data import collate_graphs
from tj_hybrid.phase3.learner import Learner
from tj_models import MASK_FILL, ControllerConfig, TrafficAgent, TrafficAgentConfig
from tj_rl.control import AgentPolicy, FixedTimePolicy
from tj_rl.control.actor import Actor
from tj_rl.control.unpad import OBSERVATION_KEYS
from tj_rl.env import EnvConfig, SyntheticSpec, TrafficSignalCore, build_scenario
from tj_rl.rllib import GraphModuleConfig, ModulePolicy, export_agent, graph_module_spec
from tj_rl.rollout import RolloutCollector, graph_sample, rollout_graph, rollout_schema

pytestmark = pytest.mark.slow
ENV = {"metrics": False, "pad_to_scenario": True}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory):
    """(scenario, obs space, observations of all lights over an episode, trained module,
    exported agent dir)."""
    root = tmp_path_factory.mktemp("one_actor")
    spec = SyntheticSpec(kind="grid", rows=2, cols=2, rates=(1200.0,), seed=3, name="grid")
    scenario = build_scenario(spec, root / "grid").replace(end=120.0)
    env = TrafficSignalCore(EnvConfig(**ENV), scenario=scenario)
    try:
        obs, infos = env.reset(seed=0)
        policy = FixedTimePolicy()
        policy.reset(env)
        observations = []
        for _ in range(12):
            observations += list(obs.values())
            obs, _, _, trunc, infos = env.step(policy.compute_actions(obs, infos))
            if trunc["__all__"]:
                break
        space, action_space = env.observation_spaces[env.possible_agents[0]], env.action_spaces[
            env.possible_agents[0]]  # fmt: skip
    finally:
        env.close()
    movements = int(space["movement"].high.max()) + 1
    n_actions = int(action_space.n)
    base_cfg = TrafficAgentConfig.preset("tiny", max_actions=n_actions)
    base_cfg = replace(base_cfg, gnn=replace(base_cfg.gnn, num_movements=max(movements, 16)))
    torch.manual_seed(1)
    base = TrafficAgent(base_cfg).save(root / "phase1")
    torch.manual_seed(0)
    module = graph_module_spec(
        GraphModuleConfig(agent_dir=str(base), controller=ControllerConfig(hidden_dim=16, heads=2)),
        observation_space=space, action_space=action_space,
    ).build()  # fmt: skip
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():  # weights away from their init: an accidental equality is unlikely
        for p in module.controller.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    module.eval()
    agent_dir = export_agent(module, base, root / "phase2")
    return scenario, space, observations, module, agent_dir


def _batch(observations) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.stack([o[k] for o in observations])) for k in OBSERVATION_KEYS}


def test_every_caller_gives_the_same_logits_and_actions(setup) -> None:
    scenario, space, observations, module, agent_dir = setup
    batch = _batch(observations)
    assert len(observations) >= 40
    assert (batch["action_mask"].sum(-1) < batch["action_mask"].shape[-1]).any()  # masks bite

    with torch.no_grad():
        rllib = module.forward_inference({Columns.OBS: batch})[Columns.ACTION_DIST_INPUTS]
    policy = AgentPolicy(agent_dir)
    evaluation = policy.forward(policy.batch(observations)).logits
    collector = RolloutCollector({"scenario": scenario, **ENV}, agent_dir, seed=5)
    try:
        collected = collector.forward({str(i): o for i, o in enumerate(observations)})
    finally:
        collector.close()
    agent = TrafficAgent.load(agent_dir).eval()
    samples = [graph_sample(o) for o in observations]
    rollout = collate_graphs(samples, schema=rollout_schema(space))
    with torch.no_grad():
        learner_out, _ = Learner(agent.controller, agent.shield)(
            agent.gnn(rollout_graph(rollout)), rollout)

    for name, logits in (("AgentPolicy", evaluation), ("collector", collected.logits),
                         ("learner", learner_out.logits)):  # fmt: skip
        torch.testing.assert_close(logits, rllib, atol=1e-5, rtol=0, msg=name)
        assert torch.equal(logits.argmax(-1), rllib.argmax(-1)), name
    # one masking constant: every masked action holds MASK_FILL in every caller's logits
    masked = ~batch["action_mask"].bool()
    for logits in (rllib, evaluation, collected.logits, learner_out.logits):
        assert torch.all(logits[masked] == MASK_FILL)
    # the logits depend on the observation (a constant policy would pass the equalities above)
    assert not torch.allclose(rllib[0], rllib[-1])

    # deterministic actions: RLlib's module through ModulePolicy, the agent through AgentPolicy
    as_dict = {str(i): o for i, o in enumerate(observations)}
    assert ModulePolicy(module).compute_actions(as_dict, {}) == policy.compute_actions(as_dict, {})
    # sampled actions: the same seed draws the same actions in evaluation and in collection
    draws = AgentPolicy(agent_dir, sample=True, seed=11).actions(policy.batch(observations))
    chosen = Actor.chosen(collected, sample=True, generator=torch.Generator().manual_seed(11))
    assert torch.equal(draws, chosen.action)
    assert batch["action_mask"].gather(1, draws[:, None]).all()
    assert not torch.equal(draws, rllib.argmax(-1))  # really sampled


def test_the_learned_shield_gives_every_caller_the_same_final_mask(setup) -> None:
    """Behind the shield: ``AgentPolicy`` and the collector act under the same vetoes."""
    scenario, _, observations, _, agent_dir = setup
    policy = AgentPolicy(agent_dir, shield_threshold=-1e9)  # below every cost: the cheapest
    out = policy.forward(policy.batch(observations))
    collector = RolloutCollector({"scenario": scenario, **ENV}, agent_dir, seed=5,
                                 shield_threshold=-1e9)  # fmt: skip
    try:
        collected = collector.forward({str(i): o for i, o in enumerate(observations)})
    finally:
        collector.close()
    assert torch.equal(out.mask, collected.mask)
    torch.testing.assert_close(out.logits, collected.logits, atol=0, rtol=0)
    rule = _batch(observations)["action_mask"].bool()
    assert (out.mask <= rule).all() and (out.mask.sum(-1) < rule.sum(-1)).any()


def test_actor_refuses_a_threshold_without_a_shield_or_a_finite_value(setup) -> None:
    *_, agent_dir = setup
    agent = TrafficAgent.load(agent_dir)
    with pytest.raises(ValueError, match="needs the learned shield"):
        Actor(agent.gnn, agent.controller, shield_threshold=1.0)
    with pytest.raises(ValueError, match="finite"):
        Actor.from_agent(agent, shield_threshold=float("nan"))
    with pytest.raises(ValueError, match="needs the GNN"):
        Actor(None, agent.controller).encode(None)  # type: ignore[arg-type]


def test_no_other_masking_constant_in_the_rl_path() -> None:
    """Masks are applied with tj-models' ``MASK_FILL`` only: no ``-inf`` fills in tj-rl or the
    trainer (``ModulePolicy`` once used one and disagreed with the others)."""
    root = Path(__file__).resolve().parents[1]
    offenders = []
    for src in (root / "packages/tj-rl/src", root / "apps/hybrid/src"):
        for path in src.rglob("*.py"):
            text = path.read_text()
            if "masked_fill" in text and ("-inf" in text or "-math.inf" in text):
                offenders.append(str(path.relative_to(root)))
    assert offenders == []
