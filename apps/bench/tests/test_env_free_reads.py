"""The env suite's free-reads ablation (``suites/_env_worker.py``) replays exactly the episode
it recorded, and refuses an episode that diverged from the record (the bound it reports would not
measure the same work). Each case runs in a fresh interpreter: the ablation patches tj-rl's
session class for its whole process. The suite itself runs the ablation and the native reader
next to the subscription reader."""

from __future__ import annotations

import json
import subprocess
import sys

from tj_bench import Results

_SCRIPT = """
import json
from tj_bench.suites._env_worker import record_reads, replay_reads
from tj_rl.control import RandomPolicy
from tj_rl.env import EnvConfig, Scenario, TrafficSignalCore, default_scenario

sc = Scenario.from_sumocfg(default_scenario().sumocfg, end=120.0)  # as the env worker makes it
cfg = EnvConfig(kernel="numpy", all_red_time=0.0)
make = lambda: TrafficSignalCore(cfg, scenario=sc)
reads = record_reads(make, 3, RandomPolicy(3))
replay_reads(reads)
env = make()
obs, info = env.reset(seed={seed})
policy = RandomPolicy({seed})
seen = []
while True:
    obs, _, _, trunc, info = env.step(policy.compute_actions(obs, info))
    seen.append(next(iter(info.values()))["num_vehicles"])
    if trunc["__all__"]:
        break
print("RESULT", json.dumps({{"recorded": [r.counts[0] for _, r in reads], "seen": seen}}))
"""


def _run(seed: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _SCRIPT.format(seed=seed)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
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


def test_suite_runs_the_ablation_and_the_native_reader_next_to_the_subscription_reader(
    tmp_path, bench
) -> None:
    proc = bench(
        "env",
        "--quick",
        "--out",
        str(tmp_path),
        "--set",
        "env.seconds=60",
        "--set",
        "env.backends=libsumo",
        "--set",
        "env.variants=numpy,numba-free-reads,numpy+native",
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    r = Results.load(tmp_path / "results.json").suite("env")
    assert r.status == "ok", r.error
    cell = "default/libsumo/outputs-off"
    for variant in ("numpy", "numba-free-reads", "numpy+native"):
        assert r.figure(f"{cell}/{variant}/sim_s_per_s").median > 0
    assert r.figure(f"{cell}/numba-free-reads/sumo_cpu_s").median > 0  # split measured for it too
