"""Environment speed and memory: tj-rl vs sumo-rl, same net, decision interval and backend.

Measures simulated seconds per wall second over a full episode with random feasible actions (the
step loop; start-up and reset are timed separately), on the embedded default scenario (1 light) and on a synthetic multi-light grid, with the
libsumo and the traci backend, and the PSS (proportional set size) of the env's process tree at the
end of the episode (the SUMO child included for traci). Every measurement runs in a fresh process
(libsumo allows one simulation per process); runs are interleaved and the median of ``--runs`` is
reported. sumo-rl is not a dependency: install it in a scratch environment outside the repo and pass
its interpreter with ``--sumo-rl-python`` (this script then runs its sumo-rl side there).

    uv run python packages/tj-rl/benchmarks/bench_env.py --runs 3 --sumo-rl-python PATH --out bench.json
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

HERE = Path(__file__).resolve()


# ---------------------------------------------------------------- workers (one per process)
def _pss_tree() -> float:
    import psutil

    me = psutil.Process()
    total = 0
    for p in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += p.memory_full_info().pss
    return total / 2**20


def _worker_tj(a: argparse.Namespace) -> dict:
    import numpy as np

    from tj_rl import EnvConfig, Scenario, TrafficSignalCore

    sc = Scenario.from_sumocfg(a.sumocfg, end=a.seconds)
    t0 = time.perf_counter()
    env = TrafficSignalCore(
        EnvConfig(backend=a.backend, delta_time=a.delta, yellow_time=a.yellow), scenario=sc
    )
    obs, _ = env.reset(seed=a.seed)
    rng = np.random.default_rng(a.seed)
    t1 = time.perf_counter()
    steps, pss, probe_s = 0, 0.0, 0.0
    while True:
        acts = {ag: int(rng.choice(np.flatnonzero(o["action_mask"]))) for ag, o in obs.items()}
        obs, _, _, trunc, _ = env.step(acts)
        steps += 1
        if env.sim_time + 2 * a.delta > a.seconds and not pss:  # SUMO still running: measure once
            tp = time.perf_counter()
            pss = _pss_tree()
            probe_s = time.perf_counter() - tp
        if trunc["__all__"]:
            break
    t2 = time.perf_counter()
    env.close()
    return _result(a, t0, t1, t2, probe_s, steps, pss, len(env.possible_agents))


def _result(a, t0, t1, t2, probe_s, steps, pss, lights) -> dict:
    return {"startup_s": t1 - t0, "wall_s": t2 - t1 - probe_s, "sim_s": a.seconds, "steps": steps,
            "pss_mib": pss, "lights": lights}  # fmt: skip


def _worker_sumo_rl(a: argparse.Namespace) -> dict:
    import sumo

    os.environ["SUMO_HOME"] = sumo.SUMO_HOME  # sumo-rl's release needs it before import
    if a.backend == "libsumo":
        os.environ["LIBSUMO_AS_TRACI"] = "1"
    from sumo_rl import SumoEnvironment

    t0 = time.perf_counter()
    env = SumoEnvironment(
        net_file=a.net,
        route_file=a.routes,
        num_seconds=int(a.seconds),
        delta_time=int(a.delta),
        yellow_time=int(a.yellow),
        min_green=10,
        max_green=60,
        sumo_seed=a.seed,
        sumo_warnings=False,
        single_agent=False,
    )
    env.reset(seed=a.seed)
    t1 = time.perf_counter()
    steps, pss, probe_s = 0, 0.0, 0.0
    while True:
        acts = {ts: env.action_spaces(ts).sample() for ts in env.ts_ids}
        out = env.step(acts)
        steps += 1
        if env.sim_step + 2 * a.delta > a.seconds and not pss:
            tp = time.perf_counter()
            pss = _pss_tree()
            probe_s = time.perf_counter() - tp
        if out[2]["__all__"]:
            break
    t2 = time.perf_counter()
    env.close()
    return _result(a, t0, t1, t2, probe_s, steps, pss, len(env.ts_ids))


# ---------------------------------------------------------------- driver
def _scenarios(tmp: Path, a: argparse.Namespace) -> dict[str, dict]:
    from tj_rl import SyntheticSpec, build_scenario, default_scenario

    default = default_scenario()
    grid = build_scenario(
        SyntheticSpec(kind="grid", rows=a.grid, cols=a.grid, lanes=2, turn_lanes=0, duration=a.seconds,
                      rates=(a.grid_rate,), seed=1, name=f"grid{a.grid}x{a.grid}"),
        tmp,
    )  # fmt: skip
    out = {}
    for name, sc in (
        ("default (1 light)", default),
        (f"grid {a.grid}x{a.grid} ({a.grid**2} lights)", grid),
    ):
        out[name] = {
            "sumocfg": str(sc.sumocfg),
            "net": str(sc.net_file),
            "routes": str(sc.route_files[0]),
        }
    return out


def _run(python: str, impl: str, backend: str, files: dict, a: argparse.Namespace) -> dict:
    cmd = [python, str(HERE), "--worker", impl, "--backend", backend, "--sumocfg", files["sumocfg"],
           "--net", files["net"], "--routes", files["routes"], "--seconds", str(a.seconds),
           "--delta", str(a.delta), "--yellow", str(a.yellow), "--seed", str(a.seed)]  # fmt: skip
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
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{cpu}, {os.cpu_count()} logical CPUs, Python {platform.python_version()}, load avg {load:.2f} at start"


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--worker", choices=("tj", "sumo-rl"), help=argparse.SUPPRESS)
    ap.add_argument("--sumocfg", help=argparse.SUPPRESS)
    ap.add_argument("--net", help=argparse.SUPPRESS)
    ap.add_argument("--routes", help=argparse.SUPPRESS)
    ap.add_argument("--backend", default="libsumo", help=argparse.SUPPRESS)
    ap.add_argument("--runs", type=int, default=3, help="runs per cell (median reported), >= 3")
    ap.add_argument("--seconds", type=float, default=1800.0, help="episode length (simulated s)")
    ap.add_argument("--delta", type=float, default=10.0, help="decision interval (s)")
    ap.add_argument("--yellow", type=float, default=3.0, help="yellow time (s)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--grid", type=int, default=3, help="grid size N for the NxN multi-light scenario"
    )
    ap.add_argument("--grid-rate", type=float, default=2400.0, help="grid demand (veh/h)")
    ap.add_argument("--backends", nargs="+", default=["libsumo", "traci"])
    ap.add_argument("--sumo-rl-python", help="interpreter of a scratch env with sumo-rl installed")
    ap.add_argument("--out", type=Path, help="write all runs and medians as JSON here")
    a = ap.parse_args()
    if a.worker:
        res = _worker_tj(a) if a.worker == "tj" else _worker_sumo_rl(a)
        print(json.dumps(res), flush=True)
        return 0
    if a.runs < 3:
        ap.error("--runs must be >= 3 (medians of at least 3 runs)")
    impls = [("tj-rl", sys.executable, "tj")]
    if a.sumo_rl_python:
        impls.append(("sumo-rl", a.sumo_rl_python, "sumo-rl"))
    machine = _machine()
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="tj-rl-bench-") as tmp:
        scen = _scenarios(Path(tmp), a)
        for run in range(a.runs):  # interleaved: every cell once per round
            for sname, files in scen.items():
                for backend in a.backends:
                    for label, python, impl in impls:
                        r = _run(python, impl, backend, files, a)
                        results.setdefault(f"{sname}|{backend}|{label}", []).append(r)
                        print(f"run {run + 1}/{a.runs} {sname} {backend} {label}: "
                              f"{r['sim_s'] / r['wall_s']:.0f} sim-s/s, {r['pss_mib']:.0f} MiB", file=sys.stderr)  # fmt: skip
    med = {k: {"sim_per_wall": statistics.median(r["sim_s"] / r["wall_s"] for r in v),
               "pss_mib": statistics.median(r["pss_mib"] for r in v)} for k, v in results.items()}  # fmt: skip
    lines = [
        f"Machine: {machine}. Episode {a.seconds:g} s, decisions every {a.delta:g} s, yellow {a.yellow:g} s, "
        f"random feasible actions, median of {a.runs} interleaved runs.",
        "",
        "| scenario | backend | tj-rl sim-s/wall-s | sumo-rl sim-s/wall-s | speed-up | tj-rl PSS MiB | sumo-rl PSS MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for sname in scen:
        for backend in a.backends:
            t = med[f"{sname}|{backend}|tj-rl"]
            s = med.get(f"{sname}|{backend}|sumo-rl")
            sp = f"{t['sim_per_wall'] / s['sim_per_wall']:.2f}x" if s else "-"
            lines.append(
                f"| {sname} | {backend} | {t['sim_per_wall']:.0f} | {s['sim_per_wall']:.0f} | {sp} | "
                f"{t['pss_mib']:.0f} | {s['pss_mib']:.0f} |" if s else
                f"| {sname} | {backend} | {t['sim_per_wall']:.0f} | - | - | {t['pss_mib']:.0f} | - |"
            )  # fmt: skip
    print("\n".join(lines))
    if a.out:
        a.out.write_text(json.dumps({"machine": machine, "args": {k: str(v) for k, v in vars(a).items()},
                                     "runs": results, "median": med}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
