"""One SUMO episode: start, subscriptions, timed light states, reads, SUMO counters, metrics, cleanup.

All per-vehicle reads go through a context subscription around each controlled light (vehicle
variables within the observation radius) and all lane reads through variable subscriptions, so one
``simulationStep`` call returns everything the env needs: no per-vehicle getter loops. Any backend
failure surfaces as ``SumoDiedError``; ``close`` (idempotent) always removes the episode's temp dir.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import traci.constants as tc

from tj_rl.backends import SumoBackend
from tj_rl.errors import ScenarioError, SumoDiedError, SumoStartError
from tj_rl.features import VEHICLE_VARS, VehicleFrame, frame_from_subscription
from tj_rl.metrics import EpisodeMetrics, metrics_args, parse_episode_metrics
from tj_rl.rewards import LaneStats
from tj_rl.scenario import Scenario
from tj_rl.shield import derive_program
from tj_rl.topology import LightTopology, NetTopology

__all__ = ["COUNTERS", "SumoSession", "lane_stats"]


def lane_stats(frame: VehicleFrame, n_lanes: int) -> LaneStats:
    """Per-movement aggregates of the observed vehicles (within the observation radius): vehicles,
    halting vehicles (speed < 0.1 m/s, SUMO's definition) and summed waiting time (s)."""
    d = frame.data
    move = d[:, 8].astype(np.int64)
    count = np.bincount(move, minlength=n_lanes).astype(np.float32)
    halting = np.bincount(move, weights=d[:, 2] < 0.1, minlength=n_lanes).astype(np.float32)
    waiting = np.bincount(move, weights=d[:, 6], minlength=n_lanes).astype(np.float32)
    return LaneStats(count=count, halting=halting, waiting=waiting)


# SUMO's cumulative counters (simulation.getParameter("", "stats.<key>")), read once per decision:
# exact counts over the whole interval, which per-step simulation variables would miss.
COUNTERS: dict[str, str] = {
    "teleports": "teleports.total",
    "collisions": "safety.collisions",
    "emergency_braking": "safety.emergencyBraking",
}
SIM_VARS = (tc.VAR_TIME, tc.VAR_MIN_EXPECTED_VEHICLES)


class SumoSession:
    """A started simulation of ``scenario`` controlled through ``backend``."""

    def __init__(
        self,
        backend: SumoBackend,
        scenario: Scenario,
        topology: NetTopology,
        *,
        obs_radius: float,
        metrics: bool,
        extra_args: tuple[str, ...] = (),
        temp_dir: str | None = None,
    ) -> None:
        self.backend = backend
        self.scenario = scenario
        self.topology = topology
        self.obs_radius = obs_radius
        self.metrics = metrics
        self.extra_args = extra_args
        self.temp_dir = temp_dir
        self.workdir: Path | None = None

    @contextlib.contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        if not self.backend.running:
            raise SumoDiedError(f"{what}: no running simulation")
        try:
            yield
        except SumoDiedError:
            raise
        except self.backend.fatal_errors as exc:
            stderr = self.backend.stderr_tail()
            raise SumoDiedError(
                f"{self.backend.name}: {what} failed: {type(exc).__name__}: {exc}"
                + (f"\nSUMO stderr:\n{stderr}" if stderr else "")
            ) from exc

    def start(self, seed: int) -> float:
        """Start SUMO, subscribe, check the live programs; return the start time."""
        self.workdir = Path(tempfile.mkdtemp(prefix="tj-rl-episode-", dir=self.temp_dir))
        args = self.scenario.sumo_args(seed=seed) + list(self.extra_args)
        if self.metrics:
            args += metrics_args(self.workdir)
        try:
            self.backend.start(args, workdir=self.workdir)
            with self._guard("subscribe"):
                conn = self.backend.conn
                for light in self.topology.lights:
                    conn.junction.subscribeContext(
                        light.junction_id,
                        tc.CMD_GET_VEHICLE_VARIABLE,
                        self.obs_radius + light.radius_pad,
                        VEHICLE_VARS,
                    )
                    self._check_program(light)
                conn.simulation.subscribe(SIM_VARS)
                self._programs = 0
                self._logic_cache: dict[tuple, Any] = {}
                # libsumo keeps the previous simulation's subscription results until the first
                # step; at the start time no vehicle has been inserted yet anyway
                self._stepped = False
                return float(conn.simulation.getTime())
        except SumoDiedError as exc:  # died while loading: SUMO refused the scenario
            stderr = self.backend.stderr_tail()
            self.close()
            raise SumoStartError(
                f"SUMO failed while loading the scenario: {exc}\nSUMO stderr:\n{stderr}"
            ) from exc
        except BaseException:
            self.close()
            raise

    def _check_program(self, light: LightTopology) -> None:
        """The program SUMO runs must have the green phases read from the files."""
        conn = self.backend.conn
        program_id = conn.trafficlight.getProgram(light.tls_id)
        logic = next(
            (
                lg
                for lg in conn.trafficlight.getAllProgramLogics(light.tls_id)
                if lg.programID == program_id
            ),
            None,
        )
        if logic is None:
            return
        live = derive_program(
            light.tls_id,
            [(p.state, p.duration) for p in logic.phases],
            yellow_time=0,
            all_red_time=0,
        )
        if live.greens != light.program.greens:
            raise ScenarioError(
                f"traffic light {light.tls_id!r}: SUMO runs program {program_id!r} with greens "
                f"{live.greens}, but the scenario files give {light.program.greens}"
            )

    @property
    def time(self) -> float:
        """Simulation time after the last step (from the simulation subscription: no round trip)."""
        with self._guard("simulation time"):
            return float(self._sim_results()[tc.VAR_TIME])

    def _sim_results(self) -> dict[int, float]:
        sim = self.backend.conn.simulation
        if self._stepped:
            return sim.getSubscriptionResults()
        return {
            tc.VAR_TIME: sim.getTime(),
            tc.VAR_MIN_EXPECTED_VEHICLES: sim.getMinExpectedNumber(),
        }

    def apply_events(self, tls_id: str, events: list[tuple[float, str]], now: float) -> None:
        """Show the timed states ``events`` (absolute times, the first one ``now``) on a light.

        One state: ``setRedYellowGreenState``. A transition (yellow, all-red, green): one SUMO
        program whose phases have exactly those durations, so SUMO switches at the right times
        within a single ``simulationStep`` to the next decision. Each gets a new program id:
        SUMO does not restart the phase timer of a program id it already knows.
        """
        if abs(events[0][0] - now) > 1e-6:
            raise ValueError(f"light {tls_id}: first event at {events[0][0]}, expected now ({now})")
        tl = self.backend.conn.trafficlight
        if len(events) == 1:
            with self._guard(f"setRedYellowGreenState({tls_id})"):
                tl.setRedYellowGreenState(tls_id, events[0][1])
            return
        times = [t for t, _ in events]
        durations = (*(b - a for a, b in itertools.pairwise(times)), 1e9)
        key = (durations, tuple(st for _, st in events))
        logic = self._logic_cache.get(key)
        if logic is None:  # a light has few distinct transitions: build each once
            phases = [tl.Phase(d, st) for d, st in zip(*key, strict=True)]
            logic = self._logic_cache[key] = tl.Logic("tj-rl", 0, 0, phases)
        self._programs += 1
        logic.programID = f"tj-rl-{self._programs}"
        with self._guard(f"setProgramLogic({tls_id})"):
            tl.setProgramLogic(tls_id, logic)

    def step_to(self, t: float) -> None:
        with self._guard(f"simulationStep({t:g})"):
            self.backend.conn.simulationStep(t)
        self._stepped = True

    def read_lights(self) -> dict[str, tuple[VehicleFrame, LaneStats]]:
        """Vehicles of every light from the last step's context subscriptions (delivered with the
        step: no round trip), and per-movement lane aggregates computed from them."""
        with self._guard("subscription results"):
            conn = self.backend.conn
            vehicles = {
                lt.tls_id: (conn.junction.getContextSubscriptionResults(lt.junction_id) or {})
                if self._stepped
                else {}
                for lt in self.topology.lights
            }
        out = {}
        for light in self.topology.lights:
            frame = frame_from_subscription(vehicles[light.tls_id], light.lane_table)
            out[light.tls_id] = (frame, lane_stats(frame, light.n_in + light.n_out))
        return out

    def counters(self) -> dict[str, float]:
        """SUMO's cumulative counters (teleports, collisions, emergency braking) and the number
        of vehicles still expected (running + to be inserted)."""
        with self._guard("statistics counters"):
            sim = self.backend.conn.simulation
            out = {
                name: float(sim.getParameter("", f"stats.{key}")) for name, key in COUNTERS.items()
            }
            out["min_expected"] = float(self._sim_results()[tc.VAR_MIN_EXPECTED_VEHICLES])
            return out

    def finish(self, *, mean_queue: float, vetoes: int) -> EpisodeMetrics | None:
        """Close SUMO (flushing its outputs), parse the metrics, remove the temp dir."""
        try:
            self.backend.close()
            if self.metrics and self.workdir is not None:
                return parse_episode_metrics(self.workdir, mean_queue=mean_queue, vetoes=vetoes)
            return None
        finally:
            self.close()

    def close(self) -> None:
        """Stop SUMO if running and delete the episode directory. Safe to call again."""
        self.backend.close()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
