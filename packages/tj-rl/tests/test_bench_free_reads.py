"""The benchmark's free-reads ablation (benchmarks/free_reads.py) replays exactly the episode it
recorded, and refuses an episode that diverged from the record (the bound it reports would not
measure the same work). Each case runs in a fresh interpreter: the ablation patches the session
class for its whole process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
BENCH = REPO / "packages/tj-rl/benchmarks"

_SCRIPT = """
import json, sys
sys.path.insert(0, {bench!r})
import numpy as np
from bench_env import random_feasible
from free_reads import record_reads, replay_reads
from tj_rl import EnvConfig, Scenario, TrafficSignalCore

sc = Scenario.from_sumocfg({cfg!r}, end=120.0)
cfg = EnvConfig(kernel="numpy", all_red_time=0.0)
make = lambda: TrafficSignalCore(cfg, scenario=sc)
reads = record_reads(make, 3, random_feasible)
replay_reads(reads)
env = make()
obs, _ = env.reset(seed={seed})
rng = np.random.default_rng({seed})
seen = []
while True:
    obs, _, _, trunc, info = env.step(random_feasible(obs, rng))
    seen.append(next(iter(info.values()))["num_vehicles"])
    if trunc["__all__"]:
        break
print("RESULT", json.dumps({{"recorded": [r.counts[0] for _, r in reads], "seen": seen}}))
"""


def _run(seed: int) -> subprocess.CompletedProcess[str]:
    code = _SCRIPT.format(
        bench=str(BENCH), cfg=str(REPO / "configs/scenarios/default/default.sumocfg"), seed=seed
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )


def test_replay_of_the_recorded_episode_runs_to_the_end() -> None:
    proc = _run(seed=3)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT"))
    res = json.loads(line.split(" ", 1)[1])
    assert len(res["recorded"]) == 13  # the reset's read and one per 10 s decision over 120 s
    assert sum(res["recorded"]) > 0  # real vehicles were recorded, not empty reads
    assert res["seen"] == res["recorded"][1:]  # each step's graph was built from its recorded read


def test_replay_refuses_an_episode_that_diverged() -> None:
    proc = _run(seed=4)  # other traffic than the recorded seed 3
    assert proc.returncode != 0
    assert "diverged from the recorded one" in proc.stderr


def test_bench_env_runs_the_ablation_and_the_native_reader_next_to_the_subscription_reader(
    tmp_path,
) -> None:
    out = tmp_path / "bench.json"
    cmd = [sys.executable, str(BENCH / "bench_env.py"), "--runs", "3", "--seconds", "60",
           "--scenarios", "default", "--backends", "libsumo", "--outputs-list", "off",
           "--variants", "numpy", "numba-free-reads", "numpy+native", "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    med = json.loads(out.read_text())["median"]
    free = med["default (1 light)|libsumo|off|tj-rl numba-free-reads"]
    real = med["default (1 light)|libsumo|off|tj-rl"]
    assert free["sim_per_wall"] > 0 and real["sim_per_wall"] > 0
    assert "sumo_cpu_s" in free  # the CPU split is measured for the ablation too
    assert med["default (1 light)|libsumo|off|tj-rl numpy+native"]["sim_per_wall"] > 0
