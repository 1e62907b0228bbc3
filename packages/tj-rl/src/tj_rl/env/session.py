"""One SUMO episode: start, subscriptions, timed light states, reads, SUMO counters, metrics, cleanup.

All per-vehicle reads go through a context subscription around each controlled light (vehicle
variables within the observation radius), so one ``simulationStep`` call returns everything the env
needs: no per-vehicle getter loops. With a ``NativeVehicleReader`` (libsumo) there is no vehicle
subscription: the compiled reader gives the same rows straight from libsumo's C++ API. Where the
scenario's drivers may run red (``red_light.py``), the session places loops at the links and steps
SUMO one step at a time to count red entries; elsewhere one call steps to the next decision. Any backend
failure surfaces as ``SumoDiedError``; ``close`` (idempotent) always removes the episode's temp dir.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import traci.constants as tc

from tj_rl.env.backends import SumoBackend
from tj_rl.env.errors import ScenarioError, SumoDiedError, SumoStartError
from tj_rl.env.features import (
    FRAME_INDEX,
    PAD_BYTES,
    ROW_COLUMNS,
    VEHICLE_VARS,
    VehicleFrame,
    subscription_rows,
)
from tj_rl.env.metrics import EpisodeMetrics, metrics_args, parse_episode_metrics
from tj_rl.env.native_reader import NativeVehicleReader
from tj_rl.env.person_flows import warn_late_person_flows
from tj_rl.env.red_light import RedLightLoops, allows_red_running
from tj_rl.env.scenario import Scenario
from tj_rl.env.shield import derive_program
from tj_rl.env.topology import LightTopology, NetTopology

__all__ = ["COUNTERS", "LightReads", "SumoSession"]


# SUMO's cumulative counters (simulation.getParameter("", "stats.<key>")), read once per decision:
# exact counts over the whole interval, which per-step simulation variables would miss.
COUNTERS: dict[str, str] = {
    "teleports": "teleports.total",
    "collisions": "safety.collisions",
    "emergency_braking": "safety.emergencyBraking",
    "inserted": "vehicles.inserted",  # inserted minus running: arrivals (gridlock.py)
    "running": "vehicles.running",
}
SIM_VARS = (tc.VAR_TIME, tc.VAR_MIN_EXPECTED_VEHICLES)
# Counters delivered with the step by the simulation subscription (one socket round trip fewer per
# counter on traci). SUMO's TraCI server takes one keyed parameter per variable id, and both
# VAR_PARAMETER and VAR_PARAMETER_WITH_KEY carry a key; libsumo subscribes only the latter (through
# subscribeParameterWithKey). The rest is polled with getParameter (microseconds on libsumo).
_SUBSCRIBED_COUNTERS: dict[str, tuple[tuple[int, str], ...]] = {
    "libsumo": ((tc.VAR_PARAMETER_WITH_KEY, "collisions"),),
    "traci": (
        (tc.VAR_PARAMETER_WITH_KEY, "emergency_braking"),
        (tc.VAR_PARAMETER, "teleports"),
    ),
}


@dataclass(slots=True)
class LightReads:
    """The vehicles around every controlled light at one step: ``data`` float64 [L, m, 16]
    (``features.ROW_COLUMNS``; light l's ``counts[l]`` vehicles first, then ``PAD_ROW``; read-only),
    and each light's vehicle ids in row order."""

    data: np.ndarray
    counts: list[int]
    ids: list[list[str]]

    def frame(self, light: int) -> VehicleFrame:
        """The raw ``VehicleFrame`` of light number ``light`` (a copy of its real rows)."""
        n = self.counts[light]
        return VehicleFrame(tuple(self.ids[light]), self.data[light, :n][:, FRAME_INDEX])


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
        vehicle_reader: NativeVehicleReader | None = None,
    ) -> None:
        self.backend = backend
        self.reader = vehicle_reader
        self.scenario = scenario
        self.topology = topology
        self.obs_radius = obs_radius
        self.metrics = metrics
        self.extra_args = extra_args
        self.temp_dir = temp_dir
        self.workdir: Path | None = None
        self.red: RedLightLoops | None = None  # set at start where drivers may run red

    def _conn(self, what: str) -> Any:
        conn = self.backend.conn
        if conn is None:
            raise SumoDiedError(f"{what}: no running simulation")
        return conn

    def _died(self, what: str, exc: BaseException) -> SumoDiedError:
        stderr = self.backend.stderr_tail()
        return SumoDiedError(
            f"{self.backend.name}: {what} failed: {type(exc).__name__}: {exc}"
            + (f"\nSUMO stderr:\n{stderr}" if stderr else "")
        )

    @contextlib.contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        self._conn(what)
        try:
            yield
        except SumoDiedError:
            raise
        except self.backend.fatal_errors as exc:
            raise self._died(what, exc) from exc

    def start(self, seed: int) -> float:
        """Start SUMO, subscribe, check the live programs; return the start time."""
        self.workdir = Path(tempfile.mkdtemp(prefix="tj-rl-episode-", dir=self.temp_dir))
        args = self.scenario.sumo_args(seed=seed) + list(self.extra_args)
        if self.metrics:
            args += metrics_args(self.workdir)
        try:
            files = (*self.scenario.route_files, *self.scenario.additional_files)
            warn_late_person_flows(files, self.scenario.begin)
            self.red = RedLightLoops(self.topology.lights) if allows_red_running(files) else None
            if self.red is not None:
                _add_additional(args, self.red.write(self.workdir / "red-light.add.xml"))
            self.backend.start(args, workdir=self.workdir)
            with self._guard("subscribe"):
                conn = self.backend.conn
                for light in self.topology.lights:
                    if self.reader is None:
                        conn.junction.subscribeContext(
                            light.junction_id,
                            tc.CMD_GET_VEHICLE_VARIABLE,
                            self.obs_radius + light.radius_pad,
                            VEHICLE_VARS,
                        )
                    self._check_program(light)
                if self.red is not None:
                    self.red.subscribe(conn)
                subscribed = _SUBSCRIBED_COUNTERS[self.backend.name]
                params = {var: ("s", f"stats.{COUNTERS[c]}") for var, c in subscribed}
                if self.backend.name == "traci":
                    conn.simulation.subscribe(SIM_VARS + tuple(params), parameters=params)
                else:
                    conn.simulation.subscribe(SIM_VARS)
                    for _, key in params.values():
                        conn.simulation.subscribeParameterWithKey("", key)
                self._subscribed = subscribed
                self._polled = tuple(
                    (c, f"stats.{k}")
                    for c, k in COUNTERS.items()
                    if c not in dict(subscribed).values()
                )
                self._sim: dict[int, Any] | None = None
                self._program_ids: dict[tuple, str] = {}  # (light, durations, states) -> id
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
        return float(self._sim_results()[tc.VAR_TIME])

    def _sim_results(self) -> dict[int, Any]:
        """The simulation subscription's results of the last step (fetched once per step)."""
        if self._sim is None:  # once per step: plain try/except, no context manager (hot path)
            sim = self._conn("simulation subscription").simulation
            try:
                if self._stepped:
                    self._sim = sim.getSubscriptionResults()
                else:  # before the first step: plain reads (libsumo may hold stale results)
                    self._sim = {
                        tc.VAR_TIME: sim.getTime(),
                        tc.VAR_MIN_EXPECTED_VEHICLES: sim.getMinExpectedNumber(),
                    }
            except self.backend.fatal_errors as exc:
                raise self._died("simulation subscription", exc) from exc
        return self._sim

    def apply_events(self, tls_id: str, events: list[tuple[float, str]], now: float) -> None:
        """Show the timed states ``events`` (absolute times, the first one ``now``) on a light.

        One state: ``setRedYellowGreenState``. A transition (yellow, all-red, green): a SUMO
        program whose phases have exactly those durations, so SUMO switches at the right times
        within a single ``simulationStep`` to the next decision. Each distinct transition of a
        light is loaded once (``setProgramLogic``); later uses switch back to it with
        ``setProgram`` + ``setPhase(0)``, which restarts its first phase now (loading a new
        program costs SUMO more; same states and times, pinned by the golden-episode test).
        """
        if abs(events[0][0] - now) > 1e-6:
            raise ValueError(f"light {tls_id}: first event at {events[0][0]}, expected now ({now})")
        tl = self._conn(f"light {tls_id}").trafficlight
        if len(events) == 1:
            try:
                tl.setRedYellowGreenState(tls_id, events[0][1])
            except self.backend.fatal_errors as exc:
                raise self._died(f"setRedYellowGreenState({tls_id})", exc) from exc
            return
        times = [t for t, _ in events]
        durations = (*(b - a for a, b in itertools.pairwise(times)), 1e9)
        key = (tls_id, durations, tuple(st for _, st in events))
        program = self._program_ids.get(key)
        try:
            if program is None:  # a light has few distinct transitions: each becomes one program
                phases = [tl.Phase(d, st) for d, st in zip(key[1], key[2], strict=True)]
                program = f"tj-rl-{len(self._program_ids)}"
                tl.setProgramLogic(tls_id, tl.Logic(program, 0, 0, phases))
                self._program_ids[key] = program
            else:  # switch back to it and restart its first phase (cheaper for SUMO than a new one)
                tl.setProgram(tls_id, program)
                tl.setPhase(tls_id, 0)
        except self.backend.fatal_errors as exc:
            raise self._died(f"program {program} of light {tls_id}", exc) from exc

    def step_to(self, t: float) -> None:
        """Advance SUMO to time ``t``: one call, or step by step while counting red entries."""
        conn = self._conn(f"simulationStep({t:g})")
        try:
            if self.red is None:
                conn.simulationStep(t)
            else:
                start, dt = self.time, self.scenario.step_length
                n = max(round((t - start) / dt), 1)
                for j in range(1, n + 1):  # absolute targets: no drift over the interval
                    conn.simulationStep(t if j == n else start + j * dt)
                    self.red.after_step(conn)
        except self.backend.fatal_errors as exc:
            raise self._died(f"simulationStep({t:g})", exc) from exc
        self._stepped = True
        self._sim = None

    def read_lights(self) -> LightReads:
        """Vehicles of every light from the last step's context subscriptions (delivered with the
        step: no round trip), parsed in one pass and converted to numpy once for all lights; or,
        with a native reader, straight from libsumo into numpy."""
        lights = self.topology.lights
        if self.reader is not None and self._stepped:
            self._conn("native vehicle read")
            try:
                data, counts, native_ids = self.reader.read()
            except RuntimeError as exc:
                raise self._died("native vehicle read", exc) from exc
            return LightReads(data=data, counts=counts, ids=native_ids)
        get = self._conn("subscription results").junction.getContextSubscriptionResults
        try:  # libsumo keeps the previous simulation's results until the first step
            results = [get(lt.junction_id) or {} for lt in lights] if self._stepped else None
        except self.backend.fatal_errors as exc:
            raise self._died("subscription results", exc) from exc
        rows: list[bytes] = []
        ids: list[list[str]] = []
        counts: list[int] = []
        for i, light in enumerate(lights):
            ids.append([])
            if results is None:
                counts.append(0)
                continue
            counts.append(
                subscription_rows(results[i], light.lane_table, light.centre, rows, ids[i])
            )
        width = max(counts)
        if any(c != width for c in counts):  # pad every light to the widest: PAD_BYTES rows
            padded, start = [], 0
            for c in counts:
                padded += rows[start : start + c]
                padded.append(PAD_BYTES * (width - c))
                start += c
            rows = padded
        data = np.frombuffer(b"".join(rows), np.float64)
        data = data.reshape(len(lights), width, len(ROW_COLUMNS))
        return LightReads(data=data, counts=counts, ids=ids)

    def red_light(self) -> np.ndarray | None:
        """Per light, vehicles that entered on red since the last call (None: no driver may)."""
        return None if self.red is None else self.red.take()

    def counters(self) -> dict[str, float]:
        """SUMO's cumulative counters (teleports, collisions, emergency braking) and the number
        of vehicles still expected (running + to be inserted)."""
        res = self._sim_results()
        out = {"min_expected": float(res[tc.VAR_MIN_EXPECTED_VEHICLES])}
        polled = self._polled
        if self._stepped:
            for var, name in self._subscribed:
                value = res[var]
                out[name] = float(value[1] if var == tc.VAR_PARAMETER_WITH_KEY else value)
        else:
            polled = tuple((c, f"stats.{k}") for c, k in COUNTERS.items())
        sim = self._conn("statistics counters").simulation
        try:
            for name, key in polled:
                out[name] = float(sim.getParameter("", key))
        except self.backend.fatal_errors as exc:
            raise self._died("statistics counters", exc) from exc
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


def _add_additional(args: list[str], path: Path) -> None:
    """Append ``path`` to the additional files of SUMO's command line ``args`` (in place)."""
    flags = [i for i, a in enumerate(args) if a in ("-a", "--additional-files")]
    if flags:
        args[flags[-1] + 1] += f",{path}"
    else:
        args += ["-a", str(path)]
