"""Rollout samples (``tj_rl.rollout.samples``, ``tj_rl.rollout.batch``): a padded observation cut to its
real nodes and edges (masks with holes, edges into padding dropped, ids renumbered, inputs
untouched); the graph policy on collated compact samples equals the policy on the padded batch
(real observations of a net whose lights differ, with and without phase competition); fragment
samples in step-major, light-minor order with reward and cost GAE that stops at an episode's end."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest
import torch

from tj_data import SchemaMismatchError, collate_graphs
from tj_models import TrafficAgent, TrafficAgentConfig
from tj_rl.control import FixedTimePolicy
from tj_rl.control.actor import Actor, fields_of
from tj_rl.control.unpad import unpad_observations
from tj_rl.env import EnvConfig, Scenario, TrafficSignalCore
from tj_rl.env.runtime import sumo_home
from tj_rl.rollout import gae
from tj_rl.rollout.batch import rollout_graph
from tj_rl.rollout.samples import (
    ROLLOUT_FIELDS,
    Transition,
    fragment_samples,
    graph_sample,
    rollout_schema,
)


# ---------------------------------------------------------------------- helpers
def _padded(real_nodes, edges, *, n_nodes: int = 6, n_edges: int = 5, n_phases: int = 3,
            n_lanes: int = 4) -> dict[str, np.ndarray]:  # fmt: skip
    """One padded observation: ``real_nodes`` slots are real (features 10 * slot + column,
    movement slot + 1), ``edges`` [(src, dst, real)] local slots (features 100 + 10 * k + column);
    padding slots hold junk that must not leak into the sample."""
    nodes = np.full((n_nodes, 9), -7.0, np.float32)
    mask = np.zeros(n_nodes, np.int8)
    for s in real_nodes:
        nodes[s] = 10 * s + np.arange(9)
        mask[s] = 1
    ei = np.zeros((2, n_edges), np.int64)
    ea = np.full((n_edges, 4), -9.0, np.float32)
    em = np.zeros(n_edges, np.int8)
    for k, (a, b, real) in enumerate(edges):
        ei[:, k] = (a, b)
        ea[k] = 100 + 10 * k + np.arange(4)
        em[k] = real
    phase = np.zeros(n_phases + 3, np.float32)
    phase[1] = 1.0
    return {
        "nodes": nodes, "node_mask": mask, "movement": np.arange(n_nodes, dtype=np.int64) + 1,
        "edge_index": ei, "edge_attr": ea, "edge_mask": em, "phase": phase,
        "time_in_phase": np.array([12.5], np.float32),
        "action_mask": np.array([1, 0, 1][:n_phases], np.int8),
        "lanes": np.arange(n_lanes * 3, dtype=np.float32).reshape(n_lanes, 3),
        "lane_mask": np.array([1, 1, 1, 0][:n_lanes], np.int8),
        "phase_lanes": np.ones((n_phases, n_lanes), np.int8),
    }  # fmt: skip


def _square(end: float = 60.0) -> Scenario:
    """SUMO's ``tools/game/square`` net: 12 lights, four with 2 greens and 8 lane rows, eight
    with 1 green and 2 lane rows (lights that differ: padding to the scenario is exercised)."""
    root = sumo_home() / "tools/game/square"
    return Scenario(net_file=root / "square.net.xml", route_files=(root / "square.rou.xml",),
                    end=end)  # fmt: skip


def _agent(movements: int, max_actions: int, movement_stats: int, seed: int) -> TrafficAgent:
    """A tiny agent with random weights and GNN input statistics that are not the defaults."""
    base = TrafficAgentConfig.preset("tiny", max_actions=max_actions)
    cfg = replace(base, gnn=replace(base.gnn, num_movements=max(movements, 16)),
                  controller=replace(base.controller, movement_stats=movement_stats))  # fmt: skip
    torch.manual_seed(seed)
    agent = TrafficAgent(cfg)
    with torch.no_grad():
        agent.gnn.node_scaler.mean.normal_()
    return agent.eval()


def _to_batch(observations: list[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(np.stack([o[k] for o in observations])) for k in observations[0]}


# ---------------------------------------------------------------------- graph_sample
def test_graph_sample_keeps_real_nodes_and_edges_only() -> None:
    """Real nodes in slots 1, 3, 4 (holes, not a prefix); edges: two real ones, one into a
    padding slot (mask 1, dropped), one masked (dropped), one whose source is padding."""
    obs = _padded([1, 3, 4], [(3, 1, 1), (1, 2, 1), (4, 3, 1), (1, 4, 0), (0, 4, 1)])
    before = copy.deepcopy(obs)
    s = graph_sample(obs)
    np.testing.assert_array_equal(s["x"], obs["nodes"][[1, 3, 4]])
    assert s["movement"].tolist() == [2, 4, 5]
    # slot 1 -> 0, slot 3 -> 1, slot 4 -> 2; edges 0 and 2 survive, in slot order
    assert s["edge_index"].tolist() == [[1, 2], [0, 1]]
    np.testing.assert_array_equal(s["edge_attr"], obs["edge_attr"][[0, 2]])
    assert s["edge_index"].dtype == np.int32 and s["x"].dtype == np.float32
    assert s["movement"].dtype == np.int64 and s["edge_attr"].dtype == np.float32
    assert s["time_in_phase"] == np.float32(12.5) and np.ndim(s["time_in_phase"]) == 0
    for k in ("phase", "action_mask", "lanes", "lane_mask", "phase_lanes"):
        np.testing.assert_array_equal(s[k], obs[k])
    assert s["action_mask"].dtype == np.int8 and s["lane_mask"].dtype == np.int8
    for k, v in obs.items():  # the input is untouched
        assert v.dtype == before[k].dtype and np.array_equal(v, before[k]), k
    # a sample without vehicles: empty node and edge arrays with the right trailing shapes
    empty = graph_sample(_padded([], [(0, 1, 1)]))
    assert empty["x"].shape == (0, 9) and empty["movement"].shape == (0,)
    assert empty["edge_index"].shape == (2, 0) and empty["edge_attr"].shape == (0, 4)


def test_graph_samples_validate_against_the_rollout_schema() -> None:
    obs = _padded([0, 2], [(0, 2, 1), (2, 5, 1)])
    schema = rollout_schema(obs)  # arrays shaped like the space's entries do
    sample = graph_sample(obs) | {
        name: np.zeros((), dtype=np.int64 if name in ("action", "version") else np.float32)
        for name in ROLLOUT_FIELDS
    }
    sample["light"] = np.int16(3)
    arrays, n, e = schema.validate_sample(sample)
    assert (n, e) == (2, 1) and arrays["light"].dtype == np.int16
    assert set(schema.names) == set(sample) - {"edge_index"}
    with pytest.raises(SchemaMismatchError, match=r"missing \['logp'\]"):
        schema.validate_sample({k: v for k, v in sample.items() if k != "logp"})


# ---------------------------------------------------------------------- unpadding equivalence
@pytest.fixture(scope="module")
def square_steps():
    """(observation space, padded observations of all 12 lights over 6 decisions)."""
    env = TrafficSignalCore(EnvConfig(pad_to_scenario=True, metrics=False), scenario=_square())
    try:
        space = env.observation_spaces[env.possible_agents[0]]
        obs, infos = env.reset(seed=0)
        policy = FixedTimePolicy()
        policy.reset(env)
        out = []
        for _ in range(6):
            obs, _, _, _, infos = env.step(policy.compute_actions(obs, infos))
            out += list(obs.values())
    finally:
        env.close()
    return space, out


@pytest.mark.parametrize("movement_stats", [0, 3])
def test_policy_on_rollout_samples_equals_the_padded_policy(square_steps, movement_stats) -> None:
    space, observations = square_steps
    n_actions = space["action_mask"].shape[0]
    movements = int(space["movement"].high.max()) + 1
    # padding is exercised: lights with fewer greens and lane rows, nodes not filling the slots
    assert any(o["action_mask"].sum() < n_actions for o in observations)
    assert any(not o["lane_mask"].all() for o in observations)
    nodes = [int(o["node_mask"].sum()) for o in observations]
    assert sum(nodes) > 50 and max(nodes) < space["nodes"].shape[0]
    assert sum(int(o["edge_mask"].sum()) for o in observations) > 20
    agent = _agent(movements, n_actions, movement_stats, seed=4)
    padded = _to_batch(observations)
    samples = [graph_sample(o) for o in observations]
    with torch.no_grad():
        actor = Actor.from_agent(agent)
        want = actor.forward(padded)
        batch = collate_graphs(samples, schema=rollout_schema(space))
        got = actor.heads(agent.gnn(rollout_graph(batch)), fields_of(batch))
    torch.testing.assert_close(got.logits, want.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.value, want.value, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.cost_value, want.cost_value, atol=1e-5, rtol=1e-5)
    assert torch.equal(got.mask, want.mask)
    assert got.logits.shape == (len(observations), n_actions)
    # the logits depend on the observation (a constant policy would pass the equality above)
    assert not torch.allclose(want.logits[0], want.logits[-1])


def test_rollout_graph_fields(square_steps) -> None:
    space, observations = square_steps
    picked = observations[:5]
    batch = collate_graphs([graph_sample(o) for o in picked], schema=rollout_schema(space))
    g = rollout_graph(batch)
    counts = [int(o["node_mask"].sum()) for o in picked]
    assert g.ptr.tolist() == np.concatenate([[0], np.cumsum(counts)]).tolist()
    assert g.x.dtype == torch.float32 and g.edge_index.dtype == torch.int64
    assert g.movement.dtype == torch.int64 and g.batch.dtype == torch.int64
    width = space["action_mask"].shape[0]
    want_phase = [int(np.argmax(o["phase"][:width])) if o["phase"][:width].any() else -1
                  for o in picked]  # fmt: skip
    assert g.phase.tolist() == want_phase
    assert g.time_in_phase.tolist() == [float(o["time_in_phase"][0]) for o in picked]
    # each light's own green count, as the padded path reads it (program order wraps there)
    greens = g.phase_count.tolist()
    assert greens == unpad_observations(_to_batch(picked)).phase_count.tolist()
    assert all(1 <= c <= width for c in greens)


# ---------------------------------------------------------------------- fragment_samples
def _fragment(T: int, L: int, *, ends: dict[int, bool], seed: int = 0) -> list[Transition]:
    """``T`` steps of ``L`` lights with random values; ``ends``: step -> terminated (else
    truncated) for the steps after which an episode ended."""
    rng = np.random.default_rng(seed)
    steps = []
    for t in range(T):
        obs = [_padded([0, 1 + (i + t) % 4], [(0, 1 + (i + t) % 4, 1)]) for i in range(L)]
        for i, o in enumerate(obs):
            o["nodes"][0, 0] = 1000 * t + i  # tags the sample's (step, light)
        steps.append(Transition(
            observations=obs, action=rng.integers(0, 3, L), logp=-rng.random(L),
            value=rng.normal(size=L), cost_value=rng.normal(size=L), reward=rng.normal(size=L),
            cost=rng.random(L), next_value=rng.normal(size=L), next_cost_value=rng.normal(size=L),
            terminated=ends.get(t, False), episode_end=t in ends,
        ))  # fmt: skip
    return steps


def _col(steps: list[Transition], name: str) -> np.ndarray:
    return np.stack([np.asarray(getattr(s, name), np.float64) for s in steps])


def test_fragment_samples_order_fields_and_gae() -> None:
    T, L = 5, 3
    steps = _fragment(T, L, ends={1: False, 3: True})  # truncated after 1, terminated after 3
    out = fragment_samples(steps, version=7, gamma=0.9, lam=0.8, cost_gamma=0.5, cost_lam=0.6)
    assert len(out) == T * L
    term = np.zeros((T, L), bool)
    term[3] = True
    end = term.copy()
    end[1] = True
    adv, ret = gae(_col(steps, "reward"), _col(steps, "value"), _col(steps, "next_value"),
                   terminated=term, episode_end=end, gamma=0.9, lam=0.8)  # fmt: skip
    cadv, cret = gae(_col(steps, "cost"), _col(steps, "cost_value"),
                     _col(steps, "next_cost_value"), terminated=term, episode_end=end,
                     gamma=0.5, lam=0.6)  # fmt: skip
    for k, s in enumerate(out):
        t, i = divmod(k, L)  # step-major, light-minor
        assert s["x"][0, 0] == 1000 * t + i
        assert s["light"] == i and s["light"].dtype == np.int16
        assert s["version"] == 7 and s["version"].dtype == np.int64
        assert s["action"] == steps[t].action[i] and s["action"].dtype == np.int64
        for name in ("logp", "value", "cost_value", "reward", "cost"):
            assert s[name].dtype == np.float32
            assert s[name] == np.float32(getattr(steps[t], name)[i]), name
        np.testing.assert_allclose(s["advantage"], adv[t, i], rtol=1e-6)
        np.testing.assert_allclose(s["returns"], ret[t, i], rtol=1e-6)
        np.testing.assert_allclose(s["cost_advantage"], cadv[t, i], rtol=1e-6)
        np.testing.assert_allclose(s["cost_returns"], cret[t, i], rtol=1e-6)
        assert s["edge_index"].tolist() == [[0], [1]]  # compact graphs, not padded ones


def test_an_episode_end_inside_a_fragment_stops_the_carry() -> None:
    """Steps 0-1 (truncated after 1) and 2-3 (terminated after 3): each part's advantages are
    those of the part alone; the truncated step bootstraps from its next value, the terminated
    one does not; the default cost discounting is the reward's."""
    T, L = 4, 2
    steps = _fragment(T, L, ends={1: False, 3: True}, seed=1)
    whole = fragment_samples(steps, version=0, gamma=0.9, lam=0.8)
    first = fragment_samples(steps[:2], version=0, gamma=0.9, lam=0.8)
    second = fragment_samples(steps[2:], version=0, gamma=0.9, lam=0.8)
    for a, b in zip(whole, first + second, strict=True):
        for name in ("advantage", "returns", "cost_advantage", "cost_returns"):
            np.testing.assert_allclose(a[name], b[name], rtol=1e-6, atol=1e-7)
    r, v, nv = _col(steps, "reward"), _col(steps, "value"), _col(steps, "next_value")
    for i in range(L):
        truncated = r[1, i] + 0.9 * nv[1, i] - v[1, i]  # bootstraps, no carry
        np.testing.assert_allclose(whole[1 * L + i]["advantage"], truncated, rtol=1e-5)
        terminated = r[3, i] - v[3, i]  # no bootstrap, no carry
        np.testing.assert_allclose(whole[3 * L + i]["advantage"], terminated, rtol=1e-5)
    # without the end the first part carries the second's advantages back (a test that can fail)
    joined = [replace(s, terminated=False, episode_end=False) if k == 1 else s
              for k, s in enumerate(steps)]  # fmt: skip
    carried = fragment_samples(joined, version=0, gamma=0.9, lam=0.8)
    assert not np.isclose(carried[0]["advantage"], whole[0]["advantage"])
    assert fragment_samples([], version=0, gamma=0.9, lam=0.8) == []


def test_fragment_samples_validate_against_the_schema() -> None:
    steps = _fragment(2, 2, ends={})
    schema = rollout_schema(steps[0].observations[0])
    for s in fragment_samples(steps, version=1, gamma=0.99, lam=0.95):
        arrays, _, _ = schema.validate_sample(s, where="rollout sample")
        assert set(arrays) == set(s)


def test_square_lights_differ() -> None:
    """The net really has lights that differ without padding (else the equivalence above would
    not exercise padded actions and lanes)."""
    env = TrafficSignalCore(EnvConfig(metrics=False), scenario=_square())
    try:
        widths = {s["action_mask"].shape[0] for s in env.observation_spaces.values()}
        lanes = {s["lanes"].shape[0] for s in env.observation_spaces.values()}
    finally:
        env.close()
    assert len(widths) > 1 and len(lanes) > 1
