"""Phase 1 from a fresh clone, timed: the issue's "<= 10 minutes on a 2-core CPU-only machine,
world model >= 20% better than constant velocity" target, median of N runs.

Each run clones the repository into a temp folder (committed files only), so nothing is reused:
`uv run apps/hybrid --phase 1` creates the virtual environment (from uv's package cache),
records the dataset with SUMO, trains, evaluates and writes the report. Prints a markdown table
and writes JSON with --out.

    uv run python apps/hybrid/benchmarks/bench_phase1.py --runs 3 --out phase1.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def one_run(extra: list[str]) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="tj-bench-phase1-") as tmp:
        clone = Path(tmp) / "repo"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
        t0 = time.perf_counter()
        out = subprocess.run(
            ["uv", "run", "apps/hybrid", "--phase", "1", "--set", "run.name=bench", *extra],
            cwd=clone, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        wall = time.perf_counter() - t0
        if out.returncode != 0:
            raise SystemExit(f"run failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
        summary = json.loads((clone / "runs" / "bench" / "phase1" / "summary.json").read_text())
        shutil.rmtree(clone, ignore_errors=True)
    return {
        "wall_s": wall,
        "data_s": summary["wall_s"]["data"],
        "train_s": summary["wall_s"]["train"],
        "improvement": summary["eval"]["improvement"],
        "model_mae_m": summary["eval"]["model_mae"],
        "cv_mae_m": summary["eval"]["cv_mae"],
        "data_wait_fraction": summary["data_wait_fraction"],
        "peak_tree_pss_gib": summary["peak_tree_pss"] / 2**30,
        "budget_gib": summary["budget_bytes"] / 2**30,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--set", dest="sets", action="append", default=[], help="passed to the app")
    args = ap.parse_args()
    extra = [a for s in args.sets for a in ("--set", s)]
    runs = [one_run(extra) for _ in range(args.runs)]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
    print(f"Machine: {machine}; {args.runs} runs from a fresh clone; median (min-max)\n")
    print("| metric | median | min | max |\n|---|---:|---:|---:|")
    for k, v in med.items():
        vals = [r[k] for r in runs]
        print(f"| {k} | {v:.3f} | {min(vals):.3f} | {max(vals):.3f} |")
    if args.out:
        args.out.write_text(json.dumps({"machine": machine, "runs": runs, "median": med}, indent=2))


if __name__ == "__main__":
    main()
