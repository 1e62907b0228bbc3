"""Phase 3's rollout collector (``tj_rl.rollout.collector``) on real SUMO, and acting behind the learned
shield (``AgentPolicy(shield_threshold=...)``): fragments of ``fragment_steps x lights`` samples
that fit the rollout schema, actions inside the mask, stored log-probabilities that the
collector's own forward pass reproduces from the stored observations, GAE that follows the stored
values, versioned weights files (a newer version is picked up between fragments; one that does
not fit is a clear error that leaves the agent as it was), episode summaries, the cost scale, and
the shield's veto (cheapest allowed action when everything is over the threshold; no effect when
nothing is)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from tj_models import TrafficAgent, TrafficAgentConfig
from tj_rl.control import DzGuard, DzGuardConfig, FixedTimePolicy
from tj_rl.control.agent_policy import AgentPolicy
from tj_rl.env import COST_NAMES, EnvConfig, Scenario, TrafficSignalCore
from tj_rl.env.runtime import sumo_home
from tj_rl.rollout.collector import RolloutCollector, publish_weights, read_weights
from tj_rl.rollout.samples import rollout_schema

GAMMA, LAM = 0.9, 0.8


# ---------------------------------------------------------------------- helpers
def _space(scenario: Scenario, **config):
    env = TrafficSignalCore(EnvConfig(metrics=False, **config), scenario=scenario)
    return env.observation_spaces[env.possible_agents[0]]


def _save_agent(directory: Path, space, *, seed: int = 1, hidden: int | None = None) -> Path:
    """A tiny agent that fits ``space`` (its actions, node features and movements), with random
    weights and GNN input statistics that are not the defaults."""
    n_actions = int(space["action_mask"].shape[0])
    movements = int(space["movement"].high.max()) + 1
    base = TrafficAgentConfig.preset("tiny", max_actions=n_actions)
    cfg = replace(base, gnn=replace(base.gnn, num_movements=max(movements, 16)))
    if hidden is not None:
        cfg = replace(cfg, controller=replace(cfg.controller, hidden_dim=hidden, heads=2))
    torch.manual_seed(seed)
    agent = TrafficAgent(cfg)
    with torch.no_grad():
        agent.gnn.node_scaler.mean.normal_()
    return agent.save(directory)


def _repad(sample: dict[str, np.ndarray], space) -> dict[str, np.ndarray]:
    """A compact rollout sample back into the env's padded layout (real nodes and edges first)."""
    n_max, e_max = space["nodes"].shape[0], space["edge_attr"].shape[0]
    n, e = len(sample["x"]), sample["edge_index"].shape[1]
    nodes = np.zeros((n_max, sample["x"].shape[1]), np.float32)
    nodes[:n] = sample["x"]
    movement = np.zeros(n_max, np.int64)
    movement[:n] = sample["movement"]
    edge_index = np.zeros((2, e_max), np.int64)
    edge_index[:, :e] = sample["edge_index"]
    edge_attr = np.zeros((e_max, sample["edge_attr"].shape[1]), np.float32)
    edge_attr[:e] = sample["edge_attr"]
    return {
        "nodes": nodes, "node_mask": (np.arange(n_max) < n).astype(np.int8), "movement": movement,
        "edge_index": edge_index, "edge_attr": edge_attr,
        "edge_mask": (np.arange(e_max) < e).astype(np.int8), "phase": sample["phase"],
        "time_in_phase": np.array([sample["time_in_phase"]], np.float32),
        "action_mask": sample["action_mask"], "lanes": sample["lanes"],
        "lane_mask": sample["lane_mask"], "phase_lanes": sample["phase_lanes"],
    }  # fmt: skip


def _forward_on_samples(collector: RolloutCollector, samples, space) -> dict[str, np.ndarray]:
    """The collector's forward pass on the stored observations (all in one batch)."""
    out = collector.forward({f"s{k}": _repad(s, space) for k, s in enumerate(samples)})
    return {"logits": out.logits, "value": out.value.numpy(), "cost_value": out.cost_value.numpy()}


def _log_probs(collector: RolloutCollector, samples, space) -> np.ndarray:
    logits = _forward_on_samples(collector, samples, space)["logits"]
    actions = torch.tensor([int(s["action"]) for s in samples])
    return torch.log_softmax(logits, -1).gather(1, actions[:, None]).squeeze(1).numpy()


def _collect(config: dict, agent_dir: Path, n: int, **kwargs):
    """(collector with its env closed, its first ``n`` fragments)."""
    collector = RolloutCollector(config, agent_dir, **kwargs)
    try:
        stream = collector.fragments()
        return collector, [next(stream) for _ in range(n)]
    finally:
        collector.close()


# ---------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def short_sc(default_sc: Scenario) -> Scenario:
    """The embedded default scenario cut to 40 s: an episode is 4 decisions of 10 s."""
    return default_sc.replace(end=40.0)


@pytest.fixture(scope="module")
def space(short_sc: Scenario):
    return _space(short_sc)


@pytest.fixture(scope="module")
def agent_dir(space, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _save_agent(tmp_path_factory.mktemp("collector") / "agent", space)


@pytest.fixture(scope="module")
def runs(short_sc: Scenario, agent_dir: Path):
    """Two fragments of 3 decisions (an episode of 4 ends in the second) with the same seed, at
    cost scales 1 and 2.5: {scale: (collector, fragments)}. Braking above 1 m/s^2 counts as hard
    (a cost), so that these few decisions have costs."""
    config = {"scenario": short_sc, "metrics": False, "hard_brake_decel": 1.0}
    out = {}
    for scale in (1.0, 2.5):
        out[scale] = _collect(config, agent_dir, 2, seed=5, fragment_steps=3, gamma=GAMMA,
                              lam=LAM, cost_scale=scale)  # fmt: skip
    return out


# ---------------------------------------------------------------------- fragments
def test_fragments_fit_the_schema_and_the_mask(runs, space) -> None:
    _, fragments = runs[1.0]
    schema = rollout_schema(space)
    for fragment in fragments:
        assert fragment.steps == 3 and fragment.version == 0
        assert len(fragment.samples) == 3 * 1  # fragment_steps x lights (one light)
        for s in fragment.samples:
            arrays, n, _ = schema.validate_sample(s, where="rollout sample")
            assert set(arrays) == set(s) and n == len(s["x"])
            assert s["action_mask"][int(s["action"])] == 1
            assert s["light"] == 0 and s["version"] == 0
            assert np.isfinite([s[k] for k in ("advantage", "returns", "cost_advantage")]).all()
    samples = [s for f in fragments for s in f.samples]
    assert sum(len(s["x"]) for s in samples) > 0  # vehicles were seen
    assert len({int(s["action"]) for s in samples}) > 1  # actions are drawn, not constant


def test_logp_is_the_collectors_forward_on_the_stored_observations(runs, space) -> None:
    collector, fragments = runs[1.0]
    samples = [s for f in fragments for s in f.samples]
    np.testing.assert_allclose(_log_probs(collector, samples, space),
                               [s["logp"] for s in samples], atol=1e-5)  # fmt: skip
    out = _forward_on_samples(collector, samples, space)
    np.testing.assert_allclose(out["value"], [s["value"] for s in samples], atol=1e-5)
    np.testing.assert_allclose(out["cost_value"], [s["cost_value"] for s in samples], atol=1e-5)


def test_gae_follows_the_stored_values_and_stops_at_the_episode_end(runs) -> None:
    """Inside an episode the next step's stored value is the bootstrap: ``A_t = r_t + gamma *
    V_{t+1} - V_t + gamma * lam * A_{t+1}`` within a fragment (steps 0-1); a fragment's last step
    (2) bootstraps from the next value without a carry; step 3 ends the episode and step 4 starts
    the next one, so A_3 does not carry A_4 (that pair does not satisfy the recursion)."""
    _, fragments = runs[1.0]
    s = [x for f in fragments for x in f.samples]
    assert len(s) == 6

    def delta(t: int) -> float:
        return s[t]["reward"] + GAMMA * s[t + 1]["value"] - s[t]["value"]

    for t in (0, 1):
        carry = GAMMA * LAM * s[t + 1]["advantage"]
        np.testing.assert_allclose(s[t]["advantage"], delta(t) + carry, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(s[2]["advantage"], delta(2), rtol=1e-4, atol=1e-4)
    for t in range(6):
        np.testing.assert_allclose(s[t]["returns"], s[t]["advantage"] + s[t]["value"], atol=1e-5)
    carried = delta(3) + GAMMA * LAM * s[4]["advantage"]
    assert not np.isclose(s[3]["advantage"], carried, rtol=1e-3, atol=1e-3)


def test_episode_summary_when_an_episode_ends(runs) -> None:
    _, (first, second) = runs[1.0]
    assert first.episodes == []  # 3 of its 4 decisions
    (ep,) = second.episodes
    steps = first.samples + second.samples[:1]  # the episode's 4 decisions (one light)
    assert ep["length"] == 4 and ep["version"] == 0 and ep["sumo_died"] is False
    assert ep["return"] == pytest.approx(sum(float(s["reward"]) for s in steps), rel=1e-5)
    assert ep["cost"] == pytest.approx(sum(float(s["cost"]) for s in steps), rel=1e-5, abs=1e-6)
    assert set(ep["costs"]) == set(COST_NAMES)
    assert ep["cost"] == pytest.approx(sum(ep["costs"].values()))  # unit cost weights
    assert all(np.isfinite(v) and v >= 0 for v in ep["costs"].values())


def test_cost_scale_scales_the_samples_cost_not_the_episode_summary(runs) -> None:
    (_, plain), (_, scaled) = runs[1.0], runs[2.5]
    a = [s for f in plain for s in f.samples]
    b = [s for f in scaled for s in f.samples]
    assert [int(s["action"]) for s in a] == [int(s["action"]) for s in b]  # the same run
    np.testing.assert_array_equal([s["reward"] for s in a], [s["reward"] for s in b])
    np.testing.assert_allclose([s["cost"] for s in b], [2.5 * s["cost"] for s in a], rtol=1e-6)
    assert sum(float(s["cost"]) for s in a) > 0  # costs occurred: the scaling was exercised
    assert plain[1].episodes[0]["cost"] == scaled[1].episodes[0]["cost"]
    assert plain[1].episodes[0]["costs"] == scaled[1].episodes[0]["costs"]


# ---------------------------------------------------------------------- weights
def _perturbed(agent_dir: Path, scale: float = 0.5) -> TrafficAgent:
    agent = TrafficAgent.load(agent_dir)
    gen = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for name, p in agent.named_parameters():
            if name.startswith(("controller.", "shield.")):
                p.add_(scale * torch.randn(p.shape, generator=gen))
    return agent


def test_published_weights_are_picked_up_between_fragments(short_sc, agent_dir, space,
                                                           tmp_path: Path) -> None:  # fmt: skip
    weights = tmp_path / "policy.safetensors"
    collector = RolloutCollector({"scenario": short_sc, "metrics": False}, agent_dir,
                                 weights=weights, seed=2, fragment_steps=2)  # fmt: skip
    try:
        stream = collector.fragments()
        first = next(stream)  # no file yet: the agent's own weights, version 0
        assert first.version == 0 and {int(s["version"]) for s in first.samples} == {0}
        before = _forward_on_samples(collector, first.samples, space)["logits"]
        new = _perturbed(agent_dir)
        publish_weights(weights, new, version=3)
        state, version = read_weights(weights)
        assert version == 3 and state
        assert all(k.startswith(("controller.", "shield.")) for k in state)
        second = next(stream)
        assert second.version == 3 and collector.version == 3
        assert {int(s["version"]) for s in second.samples} == {3}
        for k, v in new.state_dict().items():
            assert torch.equal(collector.agent.state_dict()[k], v), k
        after = _forward_on_samples(collector, first.samples, space)["logits"]
        assert not torch.allclose(before, after)  # the new weights change the policy
        # the second fragment was drawn from the new weights
        np.testing.assert_allclose(_log_probs(collector, second.samples, space),
                                   [s["logp"] for s in second.samples], atol=1e-5)  # fmt: skip
        assert collector.refresh() is False  # unchanged file: nothing reloaded
    finally:
        collector.close()


def test_weights_that_do_not_fit_are_a_clear_error(short_sc, agent_dir, space,
                                                   tmp_path: Path) -> None:  # fmt: skip
    """Another controller size, an unknown tensor, a missing one: ``ValueError`` naming the file,
    and the collector keeps acting with the weights and version it had."""
    weights = tmp_path / "policy.safetensors"
    collector = RolloutCollector({"scenario": short_sc, "metrics": False}, agent_dir,
                                 weights=weights)  # fmt: skip
    before = {k: v.clone() for k, v in collector.agent.state_dict().items()}
    other = TrafficAgent.load(_save_agent(tmp_path / "other", space, hidden=16))
    good = {k: v for k, v in _perturbed(agent_dir).state_dict().items()
            if k.startswith(("controller.", "shield."))}  # fmt: skip
    extra = {**good, "controller.no_such_tensor": torch.zeros(2)}
    missing = {k: v for k, v in good.items() if not k.startswith("controller.value_head.")}
    cases = [("another controller size", None), ("an unknown tensor", extra),
             ("a missing tensor", missing)]  # fmt: skip
    try:
        for what, state in cases:
            if state is None:
                publish_weights(weights, other, version=5)
            else:
                weights.unlink(missing_ok=True)
                save_file(state, str(weights), metadata={"version": "5"})
            with pytest.raises(ValueError, match=re.escape(str(weights)) + ".*do not fit"):
                collector.refresh()
            assert collector.version == 0, what
            after = collector.agent.state_dict()
            for k, v in before.items():  # nothing half-loaded
                assert torch.equal(after[k], v), (what, k)
    finally:
        collector.close()


# ---------------------------------------------------------------------- lights that differ
def test_fragments_of_many_lights_are_light_minor(tmp_path: Path) -> None:
    """SUMO's ``tools/game/square`` (12 lights with 1 or 2 greens), padded to the scenario: a
    fragment of 2 decisions holds 2 x 12 samples, lights in order within each step."""
    root = sumo_home() / "tools/game/square"
    sc = Scenario(net_file=root / "square.net.xml", route_files=(root / "square.rou.xml",),
                  end=60.0)  # fmt: skip
    sp = _space(sc, pad_to_scenario=True)
    agent = _save_agent(tmp_path / "agent", sp)
    config = {"scenario": sc, "metrics": False, "pad_to_scenario": True}
    collector, (fragment,) = _collect(config, agent, 1, seed=1, fragment_steps=2)
    schema = rollout_schema(sp)
    assert fragment.steps == 2 and len(fragment.samples) == 2 * 12
    assert [int(s["light"]) for s in fragment.samples] == list(range(12)) * 2
    for s in fragment.samples:
        schema.validate_sample(s)
        assert s["action_mask"][int(s["action"])] == 1
    # lights with one green: their padded second action is never allowed
    assert any(s["action_mask"].tolist() == [1, 0] for s in fragment.samples)
    np.testing.assert_allclose(_log_probs(collector, fragment.samples, sp),
                               [s["logp"] for s in fragment.samples], atol=1e-5)  # fmt: skip


# ---------------------------------------------------------------------- the shield
@pytest.fixture(scope="module")
def env_obs(short_sc: Scenario) -> list[dict[str, np.ndarray]]:
    """The light's padded observations over a fixed-time episode (4 decisions) of two seeds."""
    env = TrafficSignalCore(EnvConfig(metrics=False), scenario=short_sc)
    out = []
    try:
        for seed in (0, 1):
            obs, infos = env.reset(seed=seed)
            policy = FixedTimePolicy()
            policy.reset(env)
            out.append(obs["A0"])
            for _ in range(3):
                obs, _, _, _, infos = env.step(policy.compute_actions(obs, infos))
                out.append(obs["A0"])
    finally:
        env.close()
    return out


def _shield_costs(policy: AgentPolicy, batch) -> torch.Tensor:
    with torch.no_grad():
        return policy.agent.shield(policy.actor.encode(policy.actor.graph(batch)))


def test_shield_below_every_cost_keeps_the_cheapest_allowed_action(agent_dir, env_obs) -> None:
    plain = AgentPolicy(agent_dir)
    shielded = AgentPolicy(agent_dir, shield_threshold=-1e9)
    batch = plain.batch(env_obs)
    rule = batch["action_mask"].bool()
    cost = _shield_costs(plain, batch)
    assert (cost > -1e9).all()
    cheapest = rule & (cost <= cost.masked_fill(~rule, torch.inf).amin(-1, keepdim=True))
    out = shielded.forward(batch)
    assert torch.equal(out.mask, cheapest)
    actions = shielded.actions(batch)
    assert cheapest.gather(1, actions[:, None]).all()
    # the fallback changes what is picked (else the test could not tell the shield was on)
    assert rule.sum() > cheapest.sum()
    assert not torch.equal(out.logits, plain.forward(batch).logits)
    sampler = AgentPolicy(agent_dir, shield_threshold=-1e9, sample=True, seed=3)
    for _ in range(5):
        assert cheapest.gather(1, sampler.actions(batch)[:, None]).all()


def test_shield_threshold_between_costs_vetoes_only_the_costly(agent_dir, env_obs) -> None:
    plain = AgentPolicy(agent_dir)
    batch = plain.batch(env_obs)
    rule = batch["action_mask"].bool()
    cost = _shield_costs(plain, batch)
    threshold = float(cost[rule].median())
    out = AgentPolicy(agent_dir, shield_threshold=threshold).forward(batch)
    under = rule & (cost <= threshold)
    keep = under.any(-1)
    assert keep.any() and (under != rule).any()
    assert torch.equal(out.mask[keep], under[keep])
    assert (out.mask <= rule).all()  # never allows what the rules forbid


def test_huge_threshold_acts_as_without_a_shield(agent_dir, env_obs) -> None:
    plain = AgentPolicy(agent_dir)
    loose = AgentPolicy(agent_dir, shield_threshold=1e12)
    batch = plain.batch(env_obs)
    torch.testing.assert_close(loose.forward(batch).logits, plain.forward(batch).logits)
    assert torch.equal(loose.forward(batch).mask, plain.forward(batch).mask)
    assert torch.equal(loose.actions(batch), plain.actions(batch))
    obs = {"A0": env_obs[2]}
    assert loose.compute_actions(obs, {}) == plain.compute_actions(obs, {})


@pytest.mark.parametrize("threshold", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_shield_threshold_is_rejected(agent_dir, threshold: float) -> None:
    with pytest.raises(ValueError, match="shield_threshold"):
        AgentPolicy(agent_dir, shield_threshold=threshold)


def test_collector_behind_the_shield_stores_the_final_mask(short_sc, agent_dir, space) -> None:
    """Threshold below every cost: each stored mask is the cheapest allowed action(s) of its
    step, so the log-probability of the drawn action is that of a (near) sure choice."""
    config = {"scenario": short_sc, "metrics": False}
    collector, (fragment,) = _collect(config, agent_dir, 1, seed=5, fragment_steps=3,
                                      shield_threshold=-1e9)  # fmt: skip
    _, (unshielded,) = _collect(config, agent_dir, 1, seed=5, fragment_steps=3)
    first, rule_first = fragment.samples[0], unshielded.samples[0]  # the same first observation
    np.testing.assert_array_equal(first["x"], rule_first["x"])
    policy = AgentPolicy(agent_dir)
    batch = policy.batch([_repad(rule_first, space)])
    rule = batch["action_mask"].bool()
    cost = _shield_costs(policy, batch)
    cheapest = rule & (cost <= cost.masked_fill(~rule, torch.inf).amin(-1, keepdim=True))
    assert first["action_mask"].tolist() == cheapest[0].to(torch.int8).tolist()
    for s in fragment.samples:
        assert s["action_mask"][int(s["action"])] == 1
    np.testing.assert_allclose(_log_probs(collector, fragment.samples, space),
                               [s["logp"] for s in fragment.samples], atol=1e-5)  # fmt: skip


@pytest.mark.parametrize(
    "kwargs",
    [{"shield_threshold": float("nan")}, {"shield_threshold": float("inf")},
     {"fragment_steps": 0}, {"cost_scale": 0.0}],
)  # fmt: skip
def test_collector_options_are_checked_before_sumo_starts(short_sc, agent_dir, kwargs) -> None:
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=name):
        RolloutCollector({"scenario": short_sc, "metrics": False}, agent_dir, **kwargs)


def test_an_agent_that_cannot_read_the_env_is_refused_before_sumo_starts(
    short_sc, space, tmp_path: Path
) -> None:
    """Too few movement groups (the default light has 20 lane rows) or too few actions: the
    ``AgentPolicy`` checks, named for the collector, not an index error in the first forward."""
    config = {"scenario": short_sc, "metrics": False}
    base = TrafficAgentConfig.preset("tiny", max_actions=4)
    narrow = TrafficAgent(replace(base, gnn=replace(base.gnn, num_movements=16)))
    with pytest.raises(ValueError, match=r"RolloutCollector\(.*EnvConfig\.max_lanes <= 16"):
        RolloutCollector(config, narrow.save(tmp_path / "narrow"))
    few = _save_agent(tmp_path / "few", space)
    with pytest.raises(ValueError, match=r"6 actions per light.*scores 4"):
        RolloutCollector({**config, "max_phases": 6}, few)


def test_collector_behind_the_guard_keeps_the_policys_actions(
    arterial_sc: Scenario, tmp_path: Path
) -> None:
    """On the arterial (busy 60-70 km/h approaches): the env steps with what the guard returns;
    each sample holds the action the policy drew, so a kept green shows as a step whose
    actions differ from what ran."""
    sc = arterial_sc.replace(end=600.0)
    agent = _save_agent(tmp_path / "agent", _space(sc))

    class _Recording(DzGuard):
        def apply(self, obs, actions):
            out = super().apply(obs, actions)
            self.calls.append((dict(actions), out))
            return out

    collector = RolloutCollector({"scenario": sc, "metrics": False}, agent, seed=3,
                                 fragment_steps=40, dz_guard=DzGuardConfig())  # fmt: skip
    guard = _Recording(collector.guard.config)
    guard.calls = []
    collector.guard = guard
    try:
        fragment = next(collector.fragments())
    finally:
        collector.close()
    drawn = [int(s["action"]) for s in fragment.samples]
    assert drawn == [a for asked, _ in guard.calls for a in asked.values()]
    assert any(asked != ran for asked, ran in guard.calls)
    assert guard.extensions == sum(asked[a] != ran[a] for asked, ran in guard.calls for a in ran)
