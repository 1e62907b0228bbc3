"""Upper bound on what a faster feature kernel could buy: the same episode with the vehicle-graph,
lane, cost and per-light-view computations replayed from a recording (as if they cost nothing).

One process, libsumo, the embedded default scenario (one light) unless ``--sumocfg`` is given. The
first episode records the outputs of ``graph_batch``, ``lane_batch``, ``cost_matrix`` and
``split_graphs``; then ``--runs`` rounds each run the episode normally and with those four replayed
(same seed and actions, so SUMO's states are identical). Reported: process CPU seconds of the step
loop, median of the rounds. With ``--sumo-rl-python`` every round also runs sumo-rl on the same
scenario and protocol (as in ``bench_env.py``) in a fresh process for two episodes and measures the
second, so both sides are compared warm and interleaved.

    uv run python packages/tj-rl/benchmarks/bench_feature_bound.py --runs 5 --sumo-rl-python PATH
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import bench_env  # the sibling script: same action choice and sumo-rl set-up
import numpy as np

REPLAYED = ("graph_batch", "lane_batch", "cost_matrix", "split_graphs")


class _Replay:
    """Wraps the env module's feature functions: record their results, or hand them back."""

    def __init__(self) -> None:
        import tj_rl.env as env_module

        self.mode = "normal"
        self.recorded: dict[str, list] = {n: [] for n in REPLAYED}
        self.cursor = dict.fromkeys(REPLAYED, 0)
        for name in REPLAYED:
            setattr(env_module, name, self._wrap(name, getattr(env_module, name)))

    def _wrap(self, name: str, fn: Callable) -> Callable:
        def call(*args, **kwargs):
            if self.mode == "replay":
                i = self.cursor[name]
                self.cursor[name] = i + 1
                return self.recorded[name][i]
            out = fn(*args, **kwargs)
            if self.mode == "record":
                self.recorded[name].append(out)
            return out

        return call

    def set(self, mode: str) -> None:
        self.mode = mode
        self.cursor = dict.fromkeys(REPLAYED, 0)


def _episode(env, seed: int) -> float:
    """CPU seconds of one episode's step loop with uniformly random feasible actions."""
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    t = time.process_time()
    while True:
        obs, _, _, trunc, _ = env.step(bench_env.random_feasible(obs, rng))
        if trunc["__all__"]:
            return time.process_time() - t


def _sumo_rl_worker(a: argparse.Namespace) -> None:
    """Runs under the scratch interpreter: two sumo-rl episodes, prints the second's CPU s."""
    env = bench_env.sumo_rl_env(bench_env.import_sumo_rl("libsumo"), a)
    cpu = []
    for _ in range(2):
        bench_env.sumo_rl_reset(env, a.seed)
        t = time.process_time()
        while True:
            done = env.step({ts: env.action_spaces(ts).sample() for ts in env.ts_ids})[2]
            if done["__all__"]:
                break
        cpu.append(time.process_time() - t)
    env.close()
    print(json.dumps(cpu[-1]))


def _sumo_rl(a: argparse.Namespace, sc) -> float:
    cmd = [a.sumo_rl_python, __file__, "--worker-sumo-rl", "--net", str(sc.net_file),
           "--routes", str(sc.route_files[0]), "--seconds", str(a.seconds), "--seed", str(a.seed)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1200)
    if proc.returncode != 0:
        raise RuntimeError(f"sumo-rl worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="rounds (median reported), >= 3")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=1800.0)
    ap.add_argument("--sumocfg", type=Path, help="scenario (default: the embedded one)")
    ap.add_argument("--sumo-rl-python", help="interpreter of a scratch env with sumo-rl installed")
    ap.add_argument("--worker-sumo-rl", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--delta", type=float, default=10.0, help=argparse.SUPPRESS)
    ap.add_argument("--yellow", type=float, default=3.0, help=argparse.SUPPRESS)
    ap.add_argument("--net", help=argparse.SUPPRESS)
    ap.add_argument("--routes", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.runs < 3:
        ap.error("--runs must be >= 3")
    if a.worker_sumo_rl:
        _sumo_rl_worker(a)
        return 0
    from tj_rl import EnvConfig, Scenario, TrafficSignalCore, default_scenario

    sc = Scenario.from_sumocfg(a.sumocfg or default_scenario().sumocfg, end=a.seconds)
    cfg = EnvConfig(backend="libsumo", delta_time=10.0, yellow_time=3.0, all_red_time=0.0,
                    min_green=10.0, max_green=60.0, metrics=False)  # fmt: skip
    env = TrafficSignalCore(cfg, scenario=sc)
    replay = _Replay()
    replay.set("record")
    _episode(env, a.seed)
    cpu: dict[str, list[float]] = {"normal": [], "features replayed": []}
    if a.sumo_rl_python:
        cpu["sumo-rl"] = []
    for _ in range(a.runs):  # interleaved rounds
        for mode, key in (("normal", "normal"), ("replay", "features replayed")):
            replay.set(mode)
            cpu[key].append(_episode(env, a.seed))
        if a.sumo_rl_python:
            cpu["sumo-rl"].append(_sumo_rl(a, sc))
    env.close()
    base = statistics.median(cpu["sumo-rl"]) if "sumo-rl" in cpu else None
    print(f"| {sc.sumocfg.name}, libsumo | CPU s per {a.seconds:g} s episode (median of "
          f"{a.runs}) | runs | vs sumo-rl |\n|---|---|---|---|")  # fmt: skip
    for key, values in cpu.items():
        med = statistics.median(values)
        ratio = f"{base / med:.2f}x" if base else "-"
        print(f"| {key} | {med:.3f} | {', '.join(f'{v:.3f}' for v in values)} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
