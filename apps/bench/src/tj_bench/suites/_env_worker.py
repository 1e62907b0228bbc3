"""One measured env episode in a fresh process: tj-rl's ``TrafficSignalCore`` or sumo-rl's
``SumoEnvironment``, with random feasible actions, on one scenario, backend and output setting.

Run as a script (``python _env_worker.py '<json settings>'``), by the bench interpreter for
tj-rl and by the interpreter of ``--set env.sumo_rl_python`` for sumo-rl: libsumo allows one
simulation per process, and the script imports nothing of tj-bench, so the env's PSS holds what
the env needs and no more. Top-level imports are the standard library and psutil only (all that
sumo-rl's environment must have besides sumo-rl and SUMO).

Timed: the step loop over the whole episode, closing the simulation included (tj-rl closes SUMO
in its last step, sumo-rl in ``close``), by wall clock and by CPU seconds of the process tree
(SUMO's child included for traci); start-up and reset separately. Near the end of the episode
the worker asks the driver (a ``PROBE`` line on stdout, an answer line on stdin) to read the
process tree's PSS with tj-monitor; the probe's own wall and CPU time are taken out of the loop's.
On libsumo it also times the CPU spent inside ``simulationStep`` (SUMO's own work).

The free-reads ablation (variant ``numba-free-reads``): tj-rl with vehicle reads that cost
nothing, the measured ceiling of any faster reader. A first, untimed episode with the real reader
records every ``SumoSession.read_lights`` result with the simulation time and the vehicles SUMO
still expects; the timed episode (same seed, same actions: the shields decide the action masks,
not the vehicles) runs with no context subscription in SUMO and gets each read back from the
record, checked against both numbers. It patches tj-rl's session class for the whole process:
a measurement, not an env configuration.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Imported before anything is timed: a lazy import inside the first CPU reading once put psutil's
# ~25 ms import into the timed window of the side that had not imported it yet (sumo-rl's).
import psutil

__all__ = ["FREE_READS", "PROBE", "RESULT", "SumoClock", "record_reads", "replay_reads",
           "tj_env_config"]  # fmt: skip

PROBE = "tj-bench-env:probe"  # worker -> driver: read my tree's PSS now, then answer a line
RESULT = "tj-bench-env:result "  # worker -> driver: the episode's JSON follows on this line
FREE_READS = "numba-free-reads"  # the variant of the free-reads ablation


def cpu_seconds() -> float:
    """CPU seconds of this process and its children, live or reaped (SUMO, for traci). The own
    process through ``time.process_time`` (ns clock: a one-light episode is ~0.1 s, and
    ``os.times`` counts in 10 ms ticks); children only have tick counts."""
    t = os.times()
    live = 0.0
    for c in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            ct = c.cpu_times()
            live += ct.user + ct.system
    return time.process_time() + t.children_user + t.children_system + live


class SumoClock:
    """CPU seconds spent inside ``libsumo.simulationStep`` (SUMO's simulation and subscription
    work, in-process backend only; both sides call it through a module attribute: tj-rl's
    ``libsumo``, sumo-rl's ``traci``, which re-exports libsumo's functions)."""

    def __init__(self, backend: str) -> None:
        self.seconds: float | None = None
        if backend != "libsumo":
            return
        import libsumo

        self.seconds = 0.0
        step = libsumo.simulationStep

        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.process_time()
            try:
                return step(*args, **kwargs)
            finally:
                self.seconds += time.process_time() - t  # type: ignore[operator]

        libsumo.simulationStep = timed
        traci = sys.modules.get("traci")  # LIBSUMO_AS_TRACI: sumo-rl's traci re-exports libsumo's
        if traci is not None and getattr(traci, "simulationStep", None) is step:
            traci.simulationStep = timed

    def reset(self) -> None:
        if self.seconds is not None:
            self.seconds = 0.0


def tj_env_config(s: dict[str, Any]) -> Any:
    """tj-rl's ``EnvConfig`` for a variant: a kernel, ``+native`` for the compiled reader;
    the free-reads ablation runs the numba kernel."""
    from tj_rl.env import EnvConfig

    variant = s["variant"]
    return EnvConfig(
        backend=s["backend"],
        delta_time=s["delta"],
        yellow_time=s["yellow"],
        all_red_time=s["all_red"],
        min_green=10.0,
        max_green=60.0,
        metrics=s["outputs"] == "on",
        kernel="numba" if variant == FREE_READS else variant.partition("+")[0],
        reader="native" if variant.endswith("+native") else "subscription",
    )


def _probe() -> tuple[float, float]:
    """Have the driver read the tree's PSS; return the probe's (wall, CPU) seconds."""
    tp, cp = time.perf_counter(), time.process_time()
    print(f"\n{PROBE}", flush=True)
    answer = sys.stdin.readline()
    if not answer:
        raise RuntimeError("the driver closed stdin during the PSS probe")
    return time.perf_counter() - tp, time.process_time() - cp


def _timed(s: dict[str, Any], t0: float, clock: SumoClock, step: Callable[[], bool],
           sim_time: Callable[[], float], close: Callable[[], None]) -> dict[str, Any]:  # fmt: skip
    """The timed loop of both sides: ``step()`` until it says the episode ended, the PSS probe
    two decisions before the end (SUMO still running), then ``close()``; ``t0``: the start-up's."""
    clock.reset()
    c1 = cpu_seconds()  # read outside the wall-time window
    t1 = time.perf_counter()
    steps, probe = 0, None
    while True:
        done = step()
        steps += 1
        if probe is None and sim_time() + 2 * s["delta"] > s["seconds"]:
            probe = _probe()
        if done:
            break
    close()  # tj-rl already closed SUMO in its last step; sumo-rl closes it here
    t2, c2 = time.perf_counter(), cpu_seconds()
    probe = probe or (0.0, 0.0)
    return {"startup_s": t1 - t0, "wall_s": t2 - t1 - probe[0], "cpu_s": c2 - c1 - probe[1],
            "sim_s": s["seconds"], "steps": steps, "sumo_cpu_s": clock.seconds}  # fmt: skip


def run_tj(s: dict[str, Any]) -> dict[str, Any]:
    """tj-rl's side: tj-rl's ``RandomPolicy`` (a uniformly random feasible green per light)."""
    from tj_rl.control import RandomPolicy
    from tj_rl.env import Scenario, TrafficSignalCore

    sc = Scenario.from_sumocfg(s["sumocfg"]).windowed(s["seconds"])  # from the scenario's begin
    cfg = tj_env_config(s)
    if s["variant"] == FREE_READS:  # the ablation: record this episode's reads, then replay them
        make = functools.partial(TrafficSignalCore, cfg, scenario=sc)
        replay_reads(record_reads(make, s["seed"], RandomPolicy(s["seed"])))
    clock = SumoClock(s["backend"])
    t0 = time.perf_counter()
    env = TrafficSignalCore(cfg, scenario=sc)
    state = list(env.reset(seed=s["seed"]))  # observations, infos
    policy = RandomPolicy(s["seed"])

    def step() -> bool:
        obs, _, _, trunc, infos = env.step(policy.compute_actions(*state))
        state[:] = obs, infos
        return trunc["__all__"]

    out = _timed(s, t0, clock, step, lambda: env.sim_time, env.close)
    return out | {"lights": len(env.possible_agents)}


def _when(session: Any) -> tuple[float, float]:
    """Simulation time and vehicles still expected (running + to insert): both come with the step's
    simulation subscription, which the session fetches once per step anyway (its private cache:
    ``counters()`` would also poll SUMO's statistics, work the real step does not do here)."""
    import traci.constants as tc

    sim = session._sim_results()
    return float(sim[tc.VAR_TIME]), float(sim[tc.VAR_MIN_EXPECTED_VEHICLES])


def record_reads(make_env: Callable[[], Any], seed: int, policy: Any) -> list[tuple[Any, Any]]:
    """Run one full episode of ``policy`` with the real reader (``tj_rl.eval.run_episode``);
    return every read with its ``_when``."""
    from tj_rl.env.session import SumoSession
    from tj_rl.eval import run_episode

    reads: list[tuple[Any, Any]] = []
    original = SumoSession.read_lights

    def recording(self: SumoSession) -> Any:
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


def replay_reads(reads: list[tuple[Any, Any]]) -> None:
    """From now on, sessions in this process subscribe no vehicles in SUMO and return ``reads`` in
    order. A read at another simulation time or vehicle count than recorded is an error (the
    episode diverged from the recorded one, so the bound would not measure the same work)."""
    import traci.constants as tc

    from tj_rl.env.session import SumoSession

    start = SumoSession.start
    pending = iter(reads)

    def start_without_vehicles(self: SumoSession, seed: int) -> float:
        t = start(self, seed)
        for light in self.topology.lights:
            self.backend.conn.junction.unsubscribeContext(
                light.junction_id, tc.CMD_GET_VEHICLE_VARIABLE, self.obs_radius + light.radius_pad
            )
        return t

    def replayed(self: SumoSession) -> Any:
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


def import_sumo_rl(backend: str) -> Any:
    """sumo-rl's ``SumoEnvironment`` for ``backend`` (its release reads ``SUMO_HOME`` and
    ``LIBSUMO_AS_TRACI`` at import time: libsumo mode is selected by the environment)."""
    import sumo

    os.environ["SUMO_HOME"] = sumo.SUMO_HOME
    if backend == "libsumo":
        os.environ["LIBSUMO_AS_TRACI"] = "1"
    from sumo_rl import SumoEnvironment

    return SumoEnvironment


def run_sumo_rl(s: dict[str, Any]) -> dict[str, Any]:
    """sumo-rl as it is normally used (default observation, ``diff-waiting-time`` reward,
    per-step info) with the same signal protocol and, when on, the same SUMO outputs."""
    env_cls = import_sumo_rl(s["backend"])
    clock = SumoClock(s["backend"])
    with tempfile.TemporaryDirectory(prefix="bench-sumo-rl-") as tmp:
        extra = None
        if s["outputs"] == "on":  # the outputs tj-rl writes with metrics=True
            extra = (
                f"--tripinfo-output {Path(tmp) / 'tripinfo.xml'} --tripinfo-output."
                f"write-unfinished true --statistic-output {Path(tmp) / 'statistics.xml'}"
            )
        t0 = time.perf_counter()
        env = env_cls(
            net_file=s["net"],
            route_file=s["routes"],
            num_seconds=int(s["seconds"]),
            delta_time=int(s["delta"]),
            yellow_time=int(s["yellow"]),
            min_green=10,
            max_green=60,
            sumo_seed=s["seed"],
            sumo_warnings=False,
            single_agent=False,
            additional_sumo_cmd=extra,
        )
        env.reset(seed=s["seed"])
        for i, ts in enumerate(env.ts_ids):  # sumo-rl's side draws uniform actions, seeded
            env.action_spaces(ts).seed(s["seed"] + i)

        def step() -> bool:
            return env.step({ts: env.action_spaces(ts).sample() for ts in env.ts_ids})[2]["__all__"]

        out = _timed(s, t0, clock, step, lambda: env.sim_step, env.close)
    return out | {"lights": len(env.ts_ids)}


def check_sumo_rl() -> str:
    """sumo-rl's version, if this interpreter can run the sumo-rl side (raises otherwise)."""
    from importlib.metadata import version

    import_sumo_rl("traci")
    return version("sumo-rl")


def main(argv: list[str]) -> int:
    if argv == ["check-sumo-rl"]:
        print(f"{RESULT}{json.dumps({'version': check_sumo_rl()})}", flush=True)
        return 0
    settings = json.loads(argv[0])
    res = run_tj(settings) if settings["impl"] == "tj-rl" else run_sumo_rl(settings)
    print(f"\n{RESULT}{json.dumps(res)}", flush=True)
    return 0


if __name__ == "__main__":
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        sys.path.pop(0)  # the suites' folder: its modules (env, data...) must not shadow packages
    raise SystemExit(main(sys.argv[1:]))
