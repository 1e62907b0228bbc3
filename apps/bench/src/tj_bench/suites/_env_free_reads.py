"""The free-reads ablation of the env suite (variant ``numba-free-reads``): tj-rl with vehicle
reads that cost nothing, the measured ceiling of any faster reader (a compiled one included).

A first, untimed episode with the real reader records every ``SumoSession.read_lights`` result
with the simulation time and the number of vehicles SUMO still expects at that read. The timed
episode (same seed, same actions: the shields decide the action masks, not the vehicles, so the
trajectory is the same) runs with no context subscription in SUMO and gets each read back from
the record, checked against both numbers. Everything else in the step (kernels, rewards, costs,
infos) does the same work as in the real run. This is a measurement, not an env configuration:
it patches tj-rl's session class for the whole process (the env worker's), and only the benchmark
imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import traci.constants as tc

from tj_rl.control import Policy
from tj_rl.env.session import LightReads, SumoSession

__all__ = ["record_reads", "replay_reads"]


Record = list[tuple[tuple[float, float], LightReads]]


def _when(session: SumoSession) -> tuple[float, float]:
    """Simulation time and vehicles still expected (running + to insert): both come with the step's
    simulation subscription, which the session fetches once per step anyway (its private cache:
    ``counters()`` would also poll SUMO's statistics, work the real step does not do here)."""
    sim = session._sim_results()
    return float(sim[tc.VAR_TIME]), float(sim[tc.VAR_MIN_EXPECTED_VEHICLES])


def record_reads(make_env: Callable[[], Any], seed: int, policy: Policy) -> Record:
    """Run one full episode of ``policy`` with the real reader (``tj_rl.eval.run_episode``);
    return every read with its ``_when``."""
    from tj_rl.eval import run_episode

    reads: Record = []
    original = SumoSession.read_lights

    def recording(self: SumoSession) -> LightReads:
        out = original(self)
        reads.append((_when(self), out))
        return out

    SumoSession.read_lights = recording  # type: ignore[method-assign]
    env = make_env()
    try:
        run_episode(env, policy, 0, seed)
    finally:
        env.close()
        SumoSession.read_lights = original  # type: ignore[method-assign]
    return reads


def replay_reads(reads: Record) -> None:
    """From now on, sessions in this process subscribe no vehicles in SUMO and return ``reads`` in
    order. A read at another simulation time or vehicle count than recorded is an error (the
    episode diverged from the recorded one, so the bound would not measure the same work)."""
    start = SumoSession.start
    pending = iter(reads)

    def start_without_vehicles(self: SumoSession, seed: int) -> float:
        t = start(self, seed)
        for light in self.topology.lights:
            self.backend.conn.junction.unsubscribeContext(
                light.junction_id, tc.CMD_GET_VEHICLE_VARIABLE, self.obs_radius + light.radius_pad
            )
        return t

    def replayed(self: SumoSession) -> LightReads:
        when, out = next(pending)
        now = _when(self)
        if abs(when[0] - now[0]) > 1e-6 or when[1] != now[1]:
            raise RuntimeError(
                f"free reads: the episode diverged from the recorded one: (time, vehicles "
                f"expected) {now} now, {when} recorded"
            )
        return out

    SumoSession.start = start_without_vehicles  # type: ignore[method-assign]
    SumoSession.read_lights = replayed  # type: ignore[method-assign]
