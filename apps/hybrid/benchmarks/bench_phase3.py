"""Phase 3's benchmark: held-out safety cost and delay of the phase-3 policy against the phase-2
policy it started from (and the baselines), over several training seeds, plus the data path.

Each seed needs a finished phase-2 run (``bench_phase2.py --root R`` leaves ``R/graph-s<seed>``;
``--runs`` takes any run folders with phases 1 and 2 done). Phase 3 runs on a copy of each
(``apps/hybrid --phase 3 --resume``), one at a time. Per seed: held-out avg delay and episode cost
of both policies, the cost limit, the data-wait fraction, the GNN-embedding cache's speed-up per
epoch (epoch 1 computes the frozen GNN, later epochs read the cache: same work otherwise), peak
tree PSS. Prints a markdown table (median [min, max] over seeds), writes JSON with --out.

    uv run python apps/hybrid/benchmarks/bench_phase3.py --runs R/graph-s0 R/graph-s1 R/graph-s2
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
from pathlib import Path

APP = Path(__file__).resolve().parents[1]


def run_seed(src: Path, root: Path, seed: int, sets: list[str]) -> dict:
    name = f"{src.name}-p3"
    dst = root / name
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("phase3", "ray", "checkpoints",
                                                            "report.md"))  # fmt: skip
    log = root / f"{name}.log"
    t0 = time.perf_counter()
    with log.open("w") as fh:
        out = subprocess.run([sys.executable, str(APP), "--profile", "smoke", *sets,
                              "--set", f"run.root={root}", "--set", f"run.name={name}",
                              "--set", f"run.seed={seed}", "--phase", "3", "--resume"],
                             stdout=fh, stderr=subprocess.STDOUT, check=False)  # fmt: skip
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"phase 3 on {src} failed ({out.returncode}); log: {log}")
    m = json.loads((dst / "phase3" / "result.json").read_text())["metrics"]
    rows = [json.loads(x) for x in (dst / "phase3" / "logs" / "metrics.jsonl").read_text().splitlines()]
    first = statistics.median(r["time/epoch_first_s"] for r in rows)
    later = statistics.median(r["time/epoch_later_s"] for r in rows)
    heavy = json.loads((dst / "phase3" / "eval.json").read_text())["held_out_heavy"]["summary"]
    d, c = m["avg_delay"], m["cost"]
    return {
        "run": src.name, "seed": seed, "wall_s": wall, "train_wall_s": m["train_wall_s"],
        "delay/phase3": d["phase3"], "delay/phase2": d["phase2"],
        "delay/fixed-time": d.get("fixed-time", float("nan")),
        "delay/max-pressure": d.get("max-pressure", float("nan")),
        "cost/phase3": c["phase3"], "cost/phase2": c["phase2"], "cost_limit": m["cost_limit"],
        "cost_change": c["phase3"] / c["phase2"] - 1, "delay_change": d["phase3"] / d["phase2"] - 1,
        "heavy/delay/phase3": heavy["phase3"]["avg_delay"]["mean"],
        "heavy/delay/phase2": heavy["phase2"]["avg_delay"]["mean"],
        "heavy/cost/phase3": heavy["phase3"]["cost"]["mean"],
        "heavy/cost/phase2": heavy["phase2"]["cost"]["mean"],
        "lambda": m["lambda"], "data_wait": m["data_wait_fraction"],
        "cache_speedup": first / later if later > 0 else float("nan"),
        "peak_tree_pss_mib": m["peak_tree_pss"] / 2**20,
        "uss_left_mib": (m["tree_uss_after"] - m["tree_uss_before"]) / 2**20,
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, nargs="+", required=True,
                    help="run folders with phases 1 and 2 finished (one per training seed)")
    ap.add_argument("--root", type=Path, help="keep the phase-3 runs here (default: a temp dir)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--set", dest="sets", action="append", default=[], help="passed to the app")
    args = ap.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="tj-bench-phase3-"))
    root.mkdir(parents=True, exist_ok=True)
    sets = [a for s in args.sets for a in ("--set", s)]
    rows = [run_seed(src, root, seed, sets) for seed, src in enumerate(args.runs)]
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"
    print(f"Machine: {machine}; {len(rows)} seed(s); runs in {root}\n")
    keys = [k for k in rows[0] if k not in ("run", "seed")]
    print("| figure | median | min | max |\n|---|---:|---:|---:|")
    summary = {}
    for k in keys:
        vals = [r[k] for r in rows]
        summary[k] = statistics.median(vals)
        print(f"| {k} | {summary[k]:.3f} | {min(vals):.3f} | {max(vals):.3f} |")
    if args.out:
        args.out.write_text(json.dumps({"machine": machine, "rows": rows, "median": summary},
                                       indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
