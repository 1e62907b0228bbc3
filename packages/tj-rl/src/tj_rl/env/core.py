"""``TrafficSignalCore``: the traffic-signal environment, one agent per controlled traffic light.

It has the multi-agent API of RLlib's ``MultiAgentEnv`` (dicts keyed by agent id, ``__all__`` in the
done dicts, ``observation_spaces`` / ``action_spaces``) without importing Ray: evaluation and
recording processes use it directly and save Ray's ~160 MB and seconds of import per process.
``tj_rl.TrafficSignalEnv`` is the same class with RLlib's ``MultiAgentEnv`` base.

Each ``step`` is one decision interval (``delta_time`` s of simulated time). Every agent picks a green
phase; the shield applies it or vetoes it, then the env advances SUMO straight to each time at which
some light must change (yellow, all-red, green) and on to the next decision time, so vehicle states
are read only at decision steps (where drivers may run red, the session steps SUMO one step at a
time to count red entries: ``red_light.py``). Observations follow DESIGN "RL observation" (``observation.py``).

Episodes end by truncation at the scenario's ``end`` (with ``Scenario.windows``: each episode runs
one window, drawn like the route files, and ``info["window"]`` names it), or when SUMO dies: then
the step returns truncated for every agent with ``info["truncated_reason"]``, and the next
``reset`` starts a fresh SUMO. With ``EnvConfig.gridlock`` a gridlocked episode instead terminates
as a penalised failure (``info["failure"]``: ``gridlock.py``). ``close`` is idempotent.

``reset(options={"signals": "program"})`` runs an episode in which SUMO runs the lights' own
programs (the scenario's, or an actuated net's): actions are checked but not applied, the shield
decides nothing (``applied_action`` -1, no vetoes); observations, rewards, costs and metrics are
as usual, so a baseline that is a SUMO program is measured like every policy.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from tj_rl.env.actions import check_actions
from tj_rl.env.backends import make_backend
from tj_rl.env.config import COST_NAMES, EnvConfig, split_env_config
from tj_rl.env.costs import cost_matrix
from tj_rl.env.dilemma import DilemmaZone
from tj_rl.env.errors import ScenarioError, SumoDiedError
from tj_rl.env.features import VehicleFrame, VehicleGraph
from tj_rl.env.graphs import split_graphs
from tj_rl.env.gridlock import GRIDLOCK, GridlockDetector
from tj_rl.env.kernels import step_kernels, warm_up
from tj_rl.env.metrics import EpisodeMetrics
from tj_rl.env.native_reader import reader_for
from tj_rl.env.observation import LaneLayout, assemble_observations, lane_capacity, phase_values
from tj_rl.env.padding import ObservationLayout, decide
from tj_rl.env.rewards import RewardInput, make_reward
from tj_rl.env.scenario import Scenario
from tj_rl.env.session import LightReads, SumoSession
from tj_rl.env.shield import Decision, RuleShield
from tj_rl.env.step_info import decision_info, died_infos, died_step, system_info
from tj_rl.env.topology import read_topology
from tj_rl.traffic.routes import pick_index, pick_route

__all__ = ["TrafficSignalCore"]

log = logging.getLogger(__name__)
_EPS = 1e-6
_SIGNALS = ("agent", "program")  # who sets the lights: the actions (through the shield) or SUMO
_PROGRAM = Decision(requested=-1, applied=-1, vetoed=False, reason="program")


class TrafficSignalCore:
    """Multi-agent traffic-signal control on a SUMO ``Scenario`` (one agent per controlled light)."""

    metadata = {"render_modes": []}  # noqa: RUF012 - gymnasium convention

    def __init__(
        self,
        config: EnvConfig | Mapping[str, Any] | None = None,
        *,
        scenario: Scenario | str | Path | None = None,
    ) -> None:
        if isinstance(config, Mapping):
            from_cfg, config = split_env_config(config)
            scenario = scenario if scenario is not None else from_cfg
        self.config = config if config is not None else EnvConfig()
        if scenario is None:
            from tj_rl.env.builder import default_scenario

            scenario = default_scenario()
        elif not isinstance(scenario, Scenario):
            scenario = Scenario.from_sumocfg(scenario)
        self.scenario = scenario
        cfg = self.config
        cfg.check_step_length(scenario.step_length)
        self.topology = read_topology(
            scenario,
            yellow_time=cfg.yellow_time,
            all_red_time=cfg.all_red_time,
            reach=cfg.obs_radius + 50.0,
            crossing_speed=cfg.crossing_speed,
        )
        self.lights = {lt.tls_id: lt for lt in self.topology.lights}
        self.possible_agents = list(self.lights)
        self.agents = list(self.possible_agents)
        layout = self._layout = ObservationLayout.of(self.topology.lights, cfg)
        self.observation_spaces = {
            a: layout.space(i, lt, cfg.max_nodes, cfg.max_edges)
            for i, (a, lt) in enumerate(self.lights.items())
        }
        self.action_spaces = {
            a: spaces.Discrete(p) for a, p in zip(self.lights, layout.phases, strict=True)
        }
        self._overflow_lanes = dict(zip(self.lights, layout.overflow_lanes, strict=True))
        self.shields = {
            a: RuleShield(lt.program, min_green=cfg.min_green, max_green=cfg.max_green)
            for a, lt in self.lights.items()
        }
        self.lane_capacity = {a: lane_capacity(lt, cfg.obs_radius) for a, lt in self.lights.items()}
        self._lanes = LaneLayout.of(self.topology.lights, cfg.obs_radius)
        self._graph_batch, self._lane_batch, self._safety_counts = step_kernels(cfg.kernel)
        warm_up((self._graph_batch, self._lane_batch, self._safety_counts), cfg,
                self._lanes, len(self.topology.lights))  # fmt: skip
        self._reader = (reader_for(self.topology.lights, cfg.obs_radius)
                        if cfg.reader == "native" else None)  # fmt: skip
        self.dilemma = DilemmaZone(
            self.topology.lights, zone=cfg.dilemma_zone, min_speed=cfg.dilemma_min_speed
        )
        self._cost_w = np.array([cfg.cost_weights[c] for c in COST_NAMES], dtype=np.float32)
        self._session: SumoSession | None = None
        gui = cfg.gui_delay_ms if cfg.gui else None
        self._backend = make_backend(cfg.backend, gui_delay_ms=gui)
        self._episode = -1
        self._t = scenario.begin
        self._end = scenario.end
        self._program = False  # this episode: SUMO runs the lights' programs
        self._last_obs: dict[str, dict[str, np.ndarray]] = {}
        self._rewards = {a: make_reward(cfg.reward) for a in self.lights}
        self._gridlock = GridlockDetector(cfg.gridlock, delta_time=cfg.delta_time)
        self._counters: dict[str, float] = {}
        self._queue_sum, self._queue_n = 0.0, 0
        self._rng = np.random.default_rng(scenario.seed)
        self.last_episode_metrics: EpisodeMetrics | None = None
        self._reads: LightReads | None = None

    # ------------------------------------------------------------------ lifecycle
    def get_observation_space(self, agent_id: str) -> spaces.Space:
        return self.observation_spaces[agent_id]

    def get_action_space(self, agent_id: str) -> spaces.Space:
        return self.action_spaces[agent_id]

    def render(self) -> None:
        """No rendering here: ``EnvConfig(backend="traci", gui=True)`` runs SUMO in sumo-gui."""

    @property
    def sim_time(self) -> float:
        return self._t

    @property
    def episode_end(self) -> float:
        """The simulated time the current episode ends at (its window's end)."""
        return self._end

    @property
    def backend(self):
        return self._backend

    @property
    def last_frames(self) -> dict[str, VehicleFrame]:
        """Raw vehicle states of the last decision step per light (all observed vehicles, before
        the node cap; recording builds uncapped graphs from them). Built on demand."""
        reads = self._reads
        if reads is None:
            return {}
        return {agent: reads.frame(i) for i, agent in enumerate(self.possible_agents)}

    def _reset_options(self, options: Mapping[str, Any] | None) -> bool:
        """True when ``options`` ask SUMO to run the lights' own programs this episode (other
        keys are ignored, as the Gymnasium and PettingZoo APIs expect)."""
        signals = (options or {}).get("signals", "agent")
        if signals not in _SIGNALS:
            raise ValueError(f"reset option signals={signals!r}: one of {_SIGNALS}")
        return signals == "program"

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None):
        program = self._reset_options(options)
        self._close_session()
        if seed is not None:
            self._rng = np.random.default_rng(seed)
            sumo_seed = int(seed)
        elif self._episode < 0:
            sumo_seed = self.scenario.seed
        else:
            sumo_seed = int(self._rng.integers(0, 2**31 - 1))
        self._episode += 1
        self.agents = list(self.possible_agents)
        scenario, routes = self.scenario, None
        if self.config.route_files:  # this episode's traffic from the demand pool
            routes = pick_route(self.config.route_files, self._episode, self.config.route_stream)
            if not routes.is_file():
                raise ScenarioError(f"EnvConfig.route_files: {routes} does not exist")
            scenario = scenario.with_routes(routes)
        if scenario.windows:  # this episode's time window, drawn apart from the route files
            w = scenario.windows[
                pick_index(len(scenario.windows), self._episode, (self.config.route_stream, 1))
            ]
            scenario = scenario.window(w.start, w.seconds)
        self._end, self._program = scenario.end, program
        self._session = SumoSession(
            self._backend,
            scenario,
            self.topology,
            obs_radius=self.config.obs_radius,
            metrics=bool(self.config.metrics),
            extra_args=self.config.sumo_args,
            temp_dir=self.config.temp_dir,
            vehicle_reader=self._reader,
        )
        try:
            t0 = self._session.start(sumo_seed)
        except BaseException:
            self._session = None
            raise
        self._t = t0
        for shield in self.shields.values():
            shield.reset(t0)
        self._advance(t0 + self.config.warmup)
        self._counters = self._session.counters()
        self._gridlock.reset(self._t, self._counters)
        self._session.red_light()  # red entries of the warmup are nobody's cost
        self._queue_sum, self._queue_n = 0.0, 0
        obs, infos = {}, {}
        for agent, (_graph, inp, o) in self._observe_all()[0].items():
            self._rewards[agent].reset(inp)
            obs[agent] = o
            infos[agent] = {"sim_time": self._t, "episode_id": self._episode, "seed": sumo_seed}
            if routes is not None:
                infos[agent]["routes"] = routes.name
            if self.scenario.windows:
                infos[agent]["window"] = (scenario.begin, scenario.end)
        self._last_obs = obs
        return obs, infos

    def close(self) -> None:
        """Stop SUMO and remove temp files; safe to call any number of times."""
        self._close_session()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown
            self.close()

    def _close_session(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    # ------------------------------------------------------------------ stepping
    def _advance(self, t_end: float) -> None:
        """Push the shields' new timed states into SUMO, then step once to ``t_end``."""
        session = self._session
        assert session is not None
        now = self._t
        for agent, shield in self.shields.items():
            events = shield.pop_events(math.inf)
            if events and not self._program:
                session.apply_events(agent, events, now)
        if t_end > now + _EPS:
            session.step_to(t_end)
        self._t = session.time

    def step(self, action_dict: Mapping[str, Any]):
        if self._session is None:
            raise RuntimeError(
                f"{type(self).__name__}.step() before reset() or after the episode ended"
            )
        actions = check_actions(action_dict, self.action_spaces)
        t = self._t
        before = [shield.current for shield in self.shields.values()]
        if self._program:  # SUMO runs the programs: no decision, no veto
            decisions = [_PROGRAM] * len(self.shields)
        else:
            decisions = [
                decide(shield, t, actions.get(agent, shield.current))
                for agent, shield in self.shields.items()
            ]
        # the vehicles at this decision time (the yellow onset of every green ending now)
        dilemma = self.dilemma.green_ends(self._batch, before, [d.applied for d in decisions])
        try:
            self._advance(t + self.config.delta_time)
            counters = self._session.counters()
            obs, rewards, infos = {}, {}, {}
            observed, queue = self._observe_all()
            costs = cost_matrix(
                self._batch,
                [d.vetoed for d in decisions],
                counters,
                self._counters,
                dilemma=dilemma,
                red_light=self._session.red_light(),
                ttc_threshold=self.config.ttc_threshold,
                hard_brake_decel=self.config.hard_brake_decel,
                counts=self._safety_counts,
            )
            for i, (agent, (graph, inp, obs[agent])) in enumerate(observed.items()):
                rewards[agent] = float(self._rewards[agent](inp)) * self.config.reward_scale
                infos[agent] = decision_info(
                    decisions[i], graph, costs[i], sim_time=self._t, weights=self._cost_w,
                    vetoes_total=self.shields[agent].vetoes,
                    overflow_lanes=self._overflow_lanes[agent],
                )  # fmt: skip
        except SumoDiedError as exc:
            return self._died(exc, dict(zip(self.shields, decisions, strict=True)))
        self._queue_sum += queue
        self._queue_n += 1
        system = system_info(counters, self._counters, queue)
        for info in infos.values():
            info["system"] = system
        self._counters = counters
        self._last_obs = obs
        done = self._t >= self._end - _EPS
        failed = not done and self._gridlock.update(self._t, queue, counters, rewards)
        if failed:  # a gridlock: a terminal failure, penalised (gridlock.py)
            rewards = self._gridlock.penalise(rewards, seconds_left=self._end - self._t,
                                              reward_scale=self.config.reward_scale)  # fmt: skip
        if done or failed:
            self._end_episode(infos, failure=self._gridlock.detail if failed else None)
        terminateds = dict.fromkeys(self.lights, failed) | {"__all__": failed}
        truncateds = dict.fromkeys(self.lights, done) | {"__all__": done}
        return obs, rewards, terminateds, truncateds, infos

    # ------------------------------------------------------------------ pieces
    def _observe_all(
        self,
    ) -> tuple[dict[str, tuple[VehicleGraph, RewardInput, dict[str, np.ndarray]]], float]:
        """Graph, reward input and padded observation of every light at the current step, from
        one batched feature computation for all lights (``graphs.graph_batch``), and the halting
        vehicles on all controlled approaches (the system queue)."""
        assert self._session is not None
        cfg, t = self.config, self._t
        reads = self._reads = self._session.read_lights()
        batch = self._batch = self._graph_batch(
            reads.data, reads.counts, cfg.graph, max_nodes=cfg.max_nodes, max_edges=cfg.max_edges
        )
        lane_stats, lane_feats, queue = self._lane_batch(reads.data, reads.counts, self._lanes)
        graphs = split_graphs(batch, reads.ids)
        layout = self._layout
        phases: list[float] = []
        masks: list[int] = []
        tips: list[float] = []
        # all lights' small arrays in one conversion each; widths are the lights' own or padded
        for shield, width in zip(self.shields.values(), layout.phases, strict=True):
            in_clearance = t < shield.green_since
            tip = shield.time_in_green(t)
            phases += phase_values(
                width, shield.current, in_clearance, tip, cfg.min_green, cfg.max_green
            )
            masks += shield.feasible(t)
            if width > shield.program.n_greens:
                masks += [0] * (width - shield.program.n_greens)
            tips.append(tip)
        obs = assemble_observations(
            batch,
            layout.movement(batch.movement),
            layout.lane_rows(lane_feats),
            layout.lane_mask.copy(),
            np.array(phases, np.float32),
            np.array(tips, np.float32).reshape(-1, 1),
            np.array(masks, np.int8),
            layout.slices,
            layout.phase_lanes,
        )
        out = {}
        for (agent, light), o, graph, lanes in zip(
            self.lights.items(), obs, graphs, lane_stats, strict=True
        ):
            out[agent] = (graph, RewardInput(light=light, lanes=lanes, graph=graph), o)
        return out, queue

    def _end_episode(self, infos: dict[str, dict[str, Any]], failure: dict | None) -> None:
        """Close the session, its metrics into every info; how it ended (a time limit, or the
        ``failure`` that terminated it: ``info["failure"]`` and its detail)."""
        assert self._session is not None
        mean_queue = self._queue_sum / max(self._queue_n, 1)
        vetoes = sum(s.vetoes for s in self.shields.values())
        try:
            metrics = self._session.finish(mean_queue=mean_queue, vetoes=vetoes)
        finally:
            self._session = None
        self.last_episode_metrics = metrics
        for info in infos.values():
            if failure is None:
                info["truncated_reason"] = "time_limit"
            else:
                info["failure"], info[GRIDLOCK] = GRIDLOCK, failure
            if metrics is not None:
                info["episode"] = metrics.as_dict()

    def _died(self, exc: SumoDiedError, decisions: Mapping[str, Decision]):
        log.warning("SUMO died mid-episode %d at t=%.1f: %s", self._episode, self._t, exc)
        self._close_session()
        infos = died_infos(decisions, sim_time=self._t, reason=f"sumo_died: {exc}")
        return died_step(self._last_obs, infos)
