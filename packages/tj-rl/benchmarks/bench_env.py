"""Environment speed and memory: tj-rl vs sumo-rl, same net, routes, signal timing and backend.

Measures simulated seconds per wall second of the step loop over a full episode with random feasible
actions, closing the simulation included (tj-rl closes SUMO in its last step, sumo-rl in ``close``:
both sides pay it; start-up and reset timed separately), and the CPU seconds of the env's process
tree over the same loop (SUMO child included for traci: less sensitive to other jobs on a shared
machine than wall time), on the embedded default scenario (1 light) and on a synthetic NxN grid
with light and heavy demand, with the libsumo and the traci backend, with SUMO's metric outputs off
(training) and on (tripinfo with unfinished trips + statistics, on both sides: the same work). Also
the PSS of the env's process tree near the end of the episode (SUMO child included for traci; the
probe's own wall and CPU time are taken out of the loop's), and in how many rounds tj-rl was faster
than sumo-rl on the same seed (per-round ratios scatter on a shared VM; the count says how
consistent a median is). On libsumo, also the CPU time spent inside ``simulationStep`` on each side
(SUMO's own work) against the rest.
tj-rl runs once per variant of ``--variants``: a feature kernel (``EnvConfig.kernel``: numpy,
numba), with ``+native`` for the compiled vehicle reader (``EnvConfig.reader="native"``, libsumo);
``numba-free-reads`` is the ablation of ``free_reads.py`` (vehicle reads that cost nothing: the
ceiling of any faster vehicle reader).

Both sides get the same signal protocol: decisions every ``--delta`` s, ``--yellow`` s of yellow,
min/max green 10/60 s; tj-rl's all-red defaults to 0 here because sumo-rl has none (``--all-red 2``
measures tj-rl's own default). Round i uses SUMO and action seed ``--seed + i`` on both sides, so the
medians are over as many traffic realisations as runs (random control changes SUMO's own work by
+-20 % between realisations). sumo-rl runs as it is normally used: its default observation,
``diff-waiting-time`` reward and per-step info; ``LIBSUMO_AS_TRACI=1`` selects its libsumo mode.

Every measurement runs in a fresh process (libsumo allows one simulation per process); runs are
interleaved (every cell once per round) and the median of ``--runs`` is reported. sumo-rl is not a
dependency: install it in a scratch environment outside the repo and pass its interpreter with
``--sumo-rl-python`` (this script then runs its sumo-rl side there).

    uv run python packages/tj-rl/benchmarks/bench_env.py --runs 5 --sumo-rl-python PATH --out bench.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Imported here, before anything is timed: a lazy import inside the first CPU reading put psutil's
# ~25 ms import inside the timed window of whichever side had not imported it yet (sumo-rl's; tj-rl
# imports psutil through tj-data), which inflated tj-rl's wall-time ratios before tj-rl 0.3.1.
import psutil

# --variants value of the ablation in free_reads.py (this script's folder): the numba env with
# vehicle reads that cost nothing
FREE_READS = "numba-free-reads"
VARIANTS = ("numpy", "numba", "numpy+native", "numba+native", FREE_READS)

HERE = Path(__file__).resolve()
SCENARIOS = ("default", "grid", "grid-heavy")


# ---------------------------------------------------------------- workers (one per process)
def _pss_tree() -> float:
    me = psutil.Process()
    total = 0
    for p in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += p.memory_full_info().pss
    return total / 2**20


def _cpu() -> float:
    """CPU seconds of this process and its children, live or reaped (SUMO, for traci). The own
    process through ``time.process_time`` (ns clock: an episode on one light is ~0.1 s, and
    ``os.times`` counts in 10 ms ticks); children only have tick counts."""
    t = os.times()
    live = 0.0
    for c in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            ct = c.cpu_times()
            live += ct.user + ct.system
    return time.process_time() + t.children_user + t.children_system + live


class SumoClock:
    """CPU seconds spent inside ``libsumo.simulationStep`` (SUMO's own simulation and subscription
    work, for the in-process backend; both sides call it through a module attribute: tj-rl's
    ``libsumo``, sumo-rl's ``traci``, which re-exports libsumo's functions)."""

    def __init__(self, backend: str) -> None:
        self.seconds: float | None = None
        if backend != "libsumo":
            return
        import libsumo

        self.seconds = 0.0
        step = libsumo.simulationStep

        def timed(*args, **kwargs):
            t = time.process_time()
            try:
                return step(*args, **kwargs)
            finally:
                self.seconds += time.process_time() - t

        libsumo.simulationStep = timed
        traci = sys.modules.get("traci")  # LIBSUMO_AS_TRACI: sumo-rl's traci re-exports libsumo's
        if traci is not None and getattr(traci, "simulationStep", None) is step:
            traci.simulationStep = timed

    def reset(self) -> None:
        if self.seconds is not None:
            self.seconds = 0.0


def random_feasible(obs: dict, rng) -> dict[str, int]:
    """tj-rl's side: a uniformly random feasible green per agent (what ``rng.choice`` draws)."""
    acts = {}
    for agent, o in obs.items():
        feasible = o["action_mask"].nonzero()[0]
        acts[agent] = int(feasible[rng.integers(len(feasible))])
    return acts


def import_sumo_rl(backend: str):
    """sumo-rl's ``SumoEnvironment`` class, imported for ``backend`` (its release reads
    ``SUMO_HOME`` and ``LIBSUMO_AS_TRACI`` at import time)."""
    import sumo

    os.environ["SUMO_HOME"] = sumo.SUMO_HOME
    if backend == "libsumo":
        os.environ["LIBSUMO_AS_TRACI"] = "1"
    from sumo_rl import SumoEnvironment

    return SumoEnvironment


def sumo_rl_env(env_cls, a: argparse.Namespace, extra: str | None = None):
    """sumo-rl's env on ``a.net`` / ``a.routes`` with the benchmark's signal protocol."""
    return env_cls(net_file=a.net, route_file=a.routes, num_seconds=int(a.seconds),
                   delta_time=int(a.delta), yellow_time=int(a.yellow), min_green=10,
                   max_green=60, sumo_seed=a.seed, sumo_warnings=False, single_agent=False,
                   additional_sumo_cmd=extra)  # fmt: skip


def sumo_rl_reset(env, seed: int) -> None:
    """Reset and seed every light's action space (sumo-rl's side draws uniform actions)."""
    env.reset(seed=seed)
    for i, ts in enumerate(env.ts_ids):
        env.action_spaces(ts).seed(seed + i)


def _worker_tj(a: argparse.Namespace) -> dict:
    import numpy as np

    from tj_rl import EnvConfig, Scenario, TrafficSignalCore

    sc = Scenario.from_sumocfg(a.sumocfg, end=a.seconds)
    cfg = EnvConfig(backend=a.backend, delta_time=a.delta, yellow_time=a.yellow,
                    all_red_time=a.all_red, min_green=10.0, max_green=60.0,
                    metrics=a.outputs == "on",
                    kernel="numba" if a.kernel == FREE_READS else a.kernel.partition("+")[0],
                    reader="native" if a.kernel.endswith("+native") else "subscription")  # fmt: skip
    if a.kernel == FREE_READS:  # the ablation: record this episode's reads, then replay them
        from free_reads import record_reads, replay_reads

        replay_reads(record_reads(lambda: TrafficSignalCore(cfg, scenario=sc), a.seed,
                                  random_feasible))  # fmt: skip
    clock = SumoClock(a.backend)
    t0 = time.perf_counter()
    env = TrafficSignalCore(cfg, scenario=sc)
    obs, _ = env.reset(seed=a.seed)
    rng = np.random.default_rng(a.seed)
    clock.reset()
    c1 = _cpu()  # read outside the wall-time window
    t1 = time.perf_counter()
    steps, pss, probe = 0, 0.0, (0.0, 0.0)
    while True:
        obs, _, _, trunc, _ = env.step(random_feasible(obs, rng))
        steps += 1
        if env.sim_time + 2 * a.delta > a.seconds and not pss:  # SUMO still running: measure once
            pss, probe = _probe()
        if trunc["__all__"]:
            break
    env.close()  # tj-rl already closed SUMO in its last step; sumo-rl closes it here
    t2, c2 = time.perf_counter(), _cpu()
    return _result(a, t0, t1, t2, probe, c2 - c1, steps, pss, len(env.possible_agents), clock)


def _probe() -> tuple[float, tuple[float, float]]:
    """PSS of the process tree, and the (wall, CPU) seconds the probe itself took: both are
    taken out of the measured loop (reading smaps costs more for a larger process)."""
    tp, cp = time.perf_counter(), time.process_time()
    pss = _pss_tree()
    return pss, (time.perf_counter() - tp, time.process_time() - cp)


def _result(a, t0, t1, t2, probe, cpu_s, steps, pss, lights, clock: SumoClock) -> dict:
    return {"startup_s": t1 - t0, "wall_s": t2 - t1 - probe[0], "cpu_s": cpu_s - probe[1],
            "sim_s": a.seconds, "steps": steps, "pss_mib": pss, "lights": lights,
            "sumo_cpu_s": clock.seconds}  # fmt: skip


def _worker_sumo_rl(a: argparse.Namespace) -> dict:
    env_cls = import_sumo_rl(a.backend)
    clock = SumoClock(a.backend)
    out = Path(tempfile.mkdtemp(prefix="bench-sumo-rl-"))
    extra = None
    if a.outputs == "on":  # the same outputs tj-rl writes with metrics=True
        extra = (f"--tripinfo-output {out / 'tripinfo.xml'} --tripinfo-output.write-unfinished "
                 f"true --statistic-output {out / 'statistics.xml'}")  # fmt: skip
    t0 = time.perf_counter()
    env = sumo_rl_env(env_cls, a, extra)
    sumo_rl_reset(env, a.seed)
    clock.reset()
    c1 = _cpu()  # read outside the wall-time window
    t1 = time.perf_counter()
    steps, pss, probe = 0, 0.0, (0.0, 0.0)
    while True:
        acts = {ts: env.action_spaces(ts).sample() for ts in env.ts_ids}
        res = env.step(acts)
        steps += 1
        if env.sim_step + 2 * a.delta > a.seconds and not pss:
            pss, probe = _probe()
        if res[2]["__all__"]:
            break
    env.close()  # closes SUMO (tj-rl's last step did the same work)
    t2, c2 = time.perf_counter(), _cpu()
    for f in out.iterdir():
        f.unlink()
    out.rmdir()
    return _result(a, t0, t1, t2, probe, c2 - c1, steps, pss, len(env.ts_ids), clock)


# ---------------------------------------------------------------- driver
def _scenarios(tmp: Path, a: argparse.Namespace) -> dict[str, dict]:
    from tj_rl import SyntheticSpec, build_scenario, default_scenario

    out = {}
    for name in a.scenarios:
        if name == "default":
            label, sc = "default (1 light)", default_scenario()
        else:
            rate = a.grid_rate if name == "grid" else a.grid_heavy_rate
            spec = SyntheticSpec(kind="grid", rows=a.grid, cols=a.grid, lanes=2, turn_lanes=0,
                                 duration=a.seconds, rates=(rate,), seed=1, name=name)  # fmt: skip
            sc = build_scenario(spec, tmp / name)
            label = f"grid {a.grid}x{a.grid} ({a.grid**2} lights), {rate:g} veh/h"
        out[label] = {
            "sumocfg": str(sc.sumocfg),
            "net": str(sc.net_file),
            "routes": str(sc.route_files[0]),
        }
    return out


def _runs_on(variant: str, backend: str) -> bool:
    """The native reader reads the in-process simulation: libsumo only."""
    return backend == "libsumo" or not variant.endswith("+native")


def _tj_label(kernel: str) -> str:
    return "tj-rl" if kernel == "numpy" else f"tj-rl {kernel}"


def _run(python, impl, backend, outputs, kernel, files: dict, seed: int, a) -> dict:
    cmd = [python, str(HERE), "--worker", impl, "--backend", backend, "--outputs", outputs,
           *(["--kernel", kernel] if kernel else []),
           "--sumocfg", files["sumocfg"], "--net", files["net"], "--routes", files["routes"],
           "--seconds", str(a.seconds), "--delta", str(a.delta), "--yellow", str(a.yellow),
           "--all-red", str(a.all_red), "--seed", str(seed)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=3600)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{impl}/{backend} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def _machine() -> str:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical CPUs, Python {platform.python_version()}"


def _load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def _table(a, scen: dict, med: dict, machine: str, loads: list[float]) -> str:
    lines = [
        f"Machine: {machine}; load average {min(loads):.1f} to {max(loads):.1f} during the runs. "
        f"Episode {a.seconds:g} s, decisions every {a.delta:g} s, yellow {a.yellow:g} s, tj-rl "
        f"all-red {a.all_red:g} s, min/max green 10/60 s, random feasible actions, median of "
        f"{a.runs} interleaved runs (seeds {a.seed} to {a.seed + a.runs - 1}). Outputs on = tripinfo "
        "(with unfinished) + statistics on both sides.",
        "",
        "| scenario | backend | SUMO outputs | tj-rl variant | tj-rl sim-s/wall-s | sumo-rl "
        "sim-s/wall-s | speed-up (wall) | speed-up (CPU) | rounds tj-rl faster | tj-rl PSS MiB | "
        "sumo-rl PSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for sname in scen:
        for backend in a.backends:
            for outputs in a.outputs_list:
                s = med.get(f"{sname}|{backend}|{outputs}|sumo-rl")
                for kernel in a.kernels:
                    if not _runs_on(kernel, backend):
                        continue
                    t = med[f"{sname}|{backend}|{outputs}|{_tj_label(kernel)}"]
                    row = (
                        f"| {sname} | {backend} | {outputs} | {kernel} | {t['sim_per_wall']:.0f} |"
                    )
                    if s is None:
                        lines.append(f"{row} - | - | - | - | {t['pss_mib']:.0f} | - |")
                        continue
                    wall = t["sim_per_wall"] / s["sim_per_wall"]
                    cpu = t["sim_per_cpu"] / s["sim_per_cpu"]
                    lines.append(
                        f"{row} {s['sim_per_wall']:.0f} | {wall:.2f}x | {cpu:.2f}x | "
                        f"{t['rounds_faster']}/{a.runs} | {t['pss_mib']:.0f} | {s['pss_mib']:.0f} |"
                    )
    return "\n".join(lines)


def _split_table(med: dict) -> str:
    """Where the CPU time of a libsumo episode goes, per side (medians over the rounds)."""
    lines = [
        "",
        "CPU seconds per episode on libsumo (median): inside `simulationStep` (SUMO's simulation "
        "and subscriptions) and the rest (the env's Python, SWIG conversions, the action choice).",
        "",
        "| cell | CPU s | in simulationStep | rest |",
        "|---|---|---|---|",
    ]
    for key, m in med.items():
        if "sumo_cpu_s" in m:
            cell = " / ".join(p for p in key.split("|") if p != "libsumo")
            lines.append(f"| {cell} | {m['cpu_s']:.3f} | {m['sumo_cpu_s']:.3f} | "
                         f"{m['rest_cpu_s']:.3f} |")  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--worker", choices=("tj", "sumo-rl"), help=argparse.SUPPRESS)
    ap.add_argument("--sumocfg", help=argparse.SUPPRESS)
    ap.add_argument("--net", help=argparse.SUPPRESS)
    ap.add_argument("--routes", help=argparse.SUPPRESS)
    ap.add_argument("--backend", default="libsumo", help=argparse.SUPPRESS)
    ap.add_argument("--outputs", default="off", help=argparse.SUPPRESS)
    ap.add_argument("--kernel", default="numpy", help=argparse.SUPPRESS)
    ap.add_argument("--variants", "--kernels", dest="kernels", nargs="+", choices=VARIANTS,
                    default=["numpy", "numba", "numba+native"],
                    help="tj-rl variants to measure: a feature kernel (EnvConfig.kernel), "
                    f"+native: reader='native' (libsumo cells only); {FREE_READS}: the numba env "
                    "with vehicle reads that cost nothing (free_reads.py: the ceiling of any "
                    "faster reader)")  # fmt: skip
    ap.add_argument("--runs", type=int, default=5, help="runs per cell (median reported), >= 3")
    ap.add_argument("--seconds", type=float, default=1800.0, help="episode length (simulated s)")
    ap.add_argument("--delta", type=float, default=10.0, help="decision interval (s)")
    ap.add_argument("--yellow", type=float, default=3.0, help="yellow time (s)")
    ap.add_argument(
        "--all-red", type=float, default=0.0, help="tj-rl all-red (s); sumo-rl has none"
    )
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    ap.add_argument("--grid", type=int, default=3, help="grid size N of the NxN scenarios")
    ap.add_argument("--grid-rate", type=float, default=1200.0, help="light grid demand (veh/h)")
    ap.add_argument("--grid-heavy-rate", type=float, default=4800.0, help="heavy demand (veh/h)")
    ap.add_argument("--backends", nargs="+", choices=("libsumo", "traci"),
                    default=["libsumo", "traci"])  # fmt: skip
    ap.add_argument("--outputs-list", nargs="+", choices=("off", "on"), default=["off", "on"],
                    help="SUMO metric outputs off (training) and/or on (evaluation)")  # fmt: skip
    ap.add_argument("--sumo-rl-python", help="interpreter of a scratch env with sumo-rl installed")
    ap.add_argument("--out", type=Path, help="write all runs and medians as JSON here")
    a = ap.parse_args()
    if a.worker:
        res = _worker_tj(a) if a.worker == "tj" else _worker_sumo_rl(a)
        print(json.dumps(res), flush=True)
        return 0
    if a.runs < 3:
        ap.error("--runs must be >= 3 (medians of at least 3 runs)")
    impls = [(_tj_label(k), sys.executable, "tj", k) for k in a.kernels]
    if a.sumo_rl_python:
        impls.append(("sumo-rl", a.sumo_rl_python, "sumo-rl", ""))
    machine, loads = _machine(), [_load()]
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="tj-rl-bench-") as tmp:
        scen = _scenarios(Path(tmp), a)
        for run in range(a.runs):  # interleaved: every cell once per round
            for sname, files in scen.items():
                for backend in a.backends:
                    for outputs in a.outputs_list:
                        for label, python, impl, kernel in impls:
                            if not _runs_on(kernel, backend):
                                continue
                            r = _run(python, impl, backend, outputs, kernel, files, a.seed + run, a)
                            r["load"] = _load()
                            loads.append(r["load"])
                            results.setdefault(f"{sname}|{backend}|{outputs}|{label}", []).append(r)
                            print(f"run {run + 1}/{a.runs} {sname} {backend} outputs {outputs} "
                                  f"{label}: {r['sim_s'] / r['wall_s']:.0f} sim-s/s, "
                                  f"{r['sim_s'] / r['cpu_s']:.0f} sim-s/cpu-s, "
                                  f"{r['pss_mib']:.0f} MiB", file=sys.stderr)  # fmt: skip
    med = {k: {"sim_per_wall": statistics.median(r["sim_s"] / r["wall_s"] for r in v),
               "sim_per_cpu": statistics.median(r["sim_s"] / r["cpu_s"] for r in v),
               "startup_s": statistics.median(r["startup_s"] for r in v),
               "pss_mib": statistics.median(r["pss_mib"] for r in v)} for k, v in results.items()}  # fmt: skip
    for k, v in results.items():  # paired by round (same seed on both sides): who was faster
        base = results.get(k.rsplit("|", 1)[0] + "|sumo-rl")
        if base is not None and base is not v:
            med[k]["rounds_faster"] = sum(
                t["sim_s"] / t["wall_s"] > b["sim_s"] / b["wall_s"]
                for t, b in zip(v, base, strict=True)
            )
    for k, v in results.items():  # libsumo: CPU in SUMO's step vs the rest (Python), per episode
        if v[0]["sumo_cpu_s"] is not None:
            med[k]["cpu_s"] = statistics.median(r["cpu_s"] for r in v)
            med[k]["sumo_cpu_s"] = statistics.median(r["sumo_cpu_s"] for r in v)
            med[k]["rest_cpu_s"] = statistics.median(r["cpu_s"] - r["sumo_cpu_s"] for r in v)
    print(_table(a, scen, med, machine, loads))
    print(_split_table(med))
    if a.out:
        a.out.write_text(json.dumps({"machine": machine, "loads": loads,
                                     "args": {k: str(v) for k, v in vars(a).items()},
                                     "runs": results, "median": med}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
