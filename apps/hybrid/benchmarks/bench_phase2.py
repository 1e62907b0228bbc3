"""Phase 2's quality benchmark: held-out average delay of the trained policy against max-pressure,
greedy and fixed-time, over several training seeds, for the policy variants users ask about.

Phase 1 runs once per scenario (its agent is the frozen GNN every graph variant starts from);
then each variant x seed runs ``apps/hybrid --phase 2`` on a copy of that run directory, so all
variants share the same phase-1 encoder, demand pool, held-out traffic and SUMO seeds. Variants:

- ``graph``: the product (phase-1 GNN frozen, phase-competition controller);
- ``gnn-random``: the same GNN from random initialisation, frozen; ``gnn-finetune``: phase 1's GNN
  trained with the controller (the ablation);
- ``lane-mlp``: an MLP on the ``lanes`` and ``phase`` features, no graph (the baseline the graph
  must match).

Prints a markdown table (median and range over seeds) and writes JSON with --out.

    uv run python apps/hybrid/benchmarks/bench_phase2.py --seeds 0 1 2 --out phase2.json
    uv run python apps/hybrid/benchmarks/bench_phase2.py --scenario grid --variants graph lane-mlp
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

APP = Path(__file__).resolve().parents[1]
VARIANTS = {
    "graph": [],
    "gnn-random": ["--set", "phase2.gnn=random"],
    "gnn-finetune": ["--set", "phase2.gnn=finetune"],
    "lane-mlp": ["--set", "phase2.policy=lane-mlp"],
}
BASELINES = ("fixed-time", "max-pressure", "greedy")


def _app(args: list[str], log: Path) -> float:
    t0 = time.perf_counter()
    with log.open("w") as fh:
        out = subprocess.run([sys.executable, str(APP), *args], stdout=fh, stderr=subprocess.STDOUT,
                             check=False)  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"apps/hybrid {' '.join(args)} failed ({out.returncode}); log: {log}")
    return time.perf_counter() - t0


def grid_scenario(folder: Path) -> Path:
    """A generated 2x2 grid of lights with tj-rl's builder (its .sumocfg)."""
    from tj_rl import SyntheticSpec, build_scenario

    spec = SyntheticSpec(kind="grid", rows=2, cols=2, duration=900.0, rates=(900.0,), seed=7,
                         name="grid2x2")  # fmt: skip
    scenario = build_scenario(spec, folder)
    assert scenario.sumocfg is not None
    return scenario.sumocfg


def run_variant(common: list[str], base: Path, root: Path, variant: str, seed: int) -> dict:
    name = f"{variant}-s{seed}"
    shutil.copytree(base, root / name)
    wall = _app([*common, "--set", f"run.root={root}", "--set", f"run.name={name}",
                 "--set", f"run.seed={seed}", *VARIANTS[variant], "--phase", "2", "--resume"],
                root / f"{name}.log")  # fmt: skip
    pdir = root / name / "phase2"
    evaluation = json.loads((pdir / "eval.json").read_text())
    result = json.loads((pdir / "result.json").read_text())
    m = result["metrics"]
    row = {"variant": variant, "seed": seed, "wall_s": wall, "train_wall_s": m["train_wall_s"],
           "peak_tree_pss_mib": m["peak_tree_pss"] / 2**20,
           "uss_left_mib": (m["tree_uss_after"] - m["tree_uss_before"]) / 2**20}  # fmt: skip
    for label in ("held_out", "held_out_heavy"):
        for policy, summary in evaluation[label]["summary"].items():
            key = "policy" if policy == "phase2" else policy
            row[f"{label}/{key}"] = summary["avg_delay"]["mean"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--variants", nargs="+", default=["graph", "lane-mlp"], choices=VARIANTS)
    ap.add_argument("--scenario", default="default", help="default, grid or a .sumocfg path")
    ap.add_argument("--parallel", type=int, default=1, help="phase-2 runs at a time")
    ap.add_argument("--root", type=Path, help="keep the runs here (default: a temp folder)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--set", dest="sets", action="append", default=[], help="passed to the app")
    args = ap.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="tj-bench-phase2-"))
    root.mkdir(parents=True, exist_ok=True)
    common = [a for s in args.sets for a in ("--set", s)]
    if args.scenario != "default":
        sumocfg = grid_scenario(root / "grid") if args.scenario == "grid" else Path(args.scenario)
        common += ["--set", f"scenario.path={sumocfg}",
                   "--set", f"phase1.data.path={root / 'data' / 'phase1'}"]  # fmt: skip
    base = root / "base"
    if not (base / "phase1" / "result.json").is_file():
        _app([*common, "--set", f"run.root={root}", "--set", "run.name=base", "--phase", "1"],
             root / "base.log")  # fmt: skip
    jobs = [(v, s) for v in args.variants for s in args.seeds]
    with ThreadPoolExecutor(args.parallel) as pool:
        rows = list(pool.map(lambda job: run_variant(common, base, root, *job), jobs))
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
               f"{args.parallel} run(s) at a time")  # fmt: skip
    print(f"Machine: {machine}; scenario {args.scenario}; seeds {args.seeds}; runs in {root}\n")
    keys = [k for k in rows[0] if k not in ("variant", "seed")]
    print("| variant | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    summary: dict[str, dict[str, float]] = {}
    for v in args.variants:
        mine = [r for r in rows if r["variant"] == v]
        summary[v] = {k: statistics.median(r[k] for r in mine) for k in keys}
        cells = [f"{summary[v][k]:.2f} [{min(r[k] for r in mine):.2f}, "
                 f"{max(r[k] for r in mine):.2f}]" for k in keys]  # fmt: skip
        print(f"| {v} | " + " | ".join(cells) + " |")
    if args.out:
        args.out.write_text(json.dumps({"machine": machine, "scenario": args.scenario,
                                        "rows": rows, "median": summary}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
