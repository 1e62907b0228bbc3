"""The seeds' DataLoader table made real, and budget adherence over epochs (issue 4 benchmark).

One command, prints markdown tables and writes JSON (--out):

    uv run python packages/tj-data/benchmarks/bench_loader.py --size-gb 4 --budget-gb 1 --out bench_loader.json

1. Seed table: the hand configurations 4x2, 8x3, 12x4, 16x4 (workers x prefetch, capped to this
   machine's cores) run two ways: "seed style" (a plain DataLoader(shuffle=True) over
   MmapGraphDataset: nothing bounds the mapped pages) and "tj-data" (build_loader: chunk sampler,
   bounded open shards); then plan_loader's plan and autotune_loader's pick. Samples/s and the
   peak PSS of the whole process tree, per configuration interleaved, median of --repeats runs.
   --step-ms adds that much CPU work per batch in the main process (a training step stand-in),
   for autotune and every row: with a busy main process, workers pay off.
2. Budget adherence: plan_loader's plan with persistent workers for --epochs full epochs over the
   store (--size-gb, several times --budget-gb): peak tree PSS and samples/s per epoch.
The store is generated in --dir (default: a temp dir) by a child process and deleted at the end.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).parent))
from _bench_common import SCHEMA, machine, make_block

from tj_data import (
    GraphStoreWriter,
    MmapGraphDataset,
    autotune_loader,
    build_loader,
    plan_loader,
)
from tj_data.autotune import SEED_TABLE
from tj_data.progress import progress_iter
from tj_monitor import PeakPssSampler, tree_memory

GiB, MiB = 1 << 30, 1 << 20


def generate(path: Path, size_gb: float, shard_size: int) -> None:
    rng = np.random.default_rng(0)
    with GraphStoreWriter(path, SCHEMA, shard_size=shard_size, overwrite=True) as w:
        block = 20_000
        first = make_block(rng, block, 0)
        per = sum(v.nbytes for v in first[0].values()) - first[0]["edge_index"].nbytes // 2
        n = max(1, int(np.ceil(size_gb * 1e9 / per)))
        for b in progress_iter(range(n), f"generate {size_gb} GB"):
            w.append_block(*(first if b == 0 else make_block(rng, block, b * block)))


def children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def wait_children(before: set[int]) -> None:
    deadline = time.monotonic() + 30
    while children() - before and time.monotonic() < deadline:
        time.sleep(0.05)


def busy(ms: float) -> Any:
    """A stand-in for the training step: `ms` of CPU work in the main process per batch."""
    if ms <= 0:
        return None

    def step(_batch: Any) -> None:
        end = time.perf_counter() + ms / 1000
        while time.perf_counter() < end:
            pass

    return step


def measure(
    make: Any, seconds: float, warmup: int, interval: float, step: Any = None
) -> dict[str, float]:
    before = children()
    gc.collect()
    loader = make()
    n = 0
    with PeakPssSampler(interval=interval) as peak:
        it = iter(loader)
        for _ in range(warmup):
            next(it)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            try:
                b = next(it)
            except StopIteration:
                it = iter(loader)
                continue
            if step is not None:
                step(b)
            n += b.num_graphs
        dt = time.perf_counter() - t0
        del it
    del loader
    gc.collect()
    wait_children(before)
    return {"samples_per_s": n / dt, "peak_pss": peak.peak_pss}


def seed_table(args: argparse.Namespace, store: Path, budget: int) -> dict[str, Any]:
    cores = len(psutil.Process().cpu_affinity() or []) or 1
    bs = args.batch_size
    configs: dict[str, Any] = {}
    planned = plan_loader(MmapGraphDataset(store), budget_bytes=budget, batch_size=bs)
    seen = set()
    for name, (w, pf) in SEED_TABLE.items():
        wc = min(w, cores)
        if (wc, pf) in seen:
            continue
        seen.add((wc, pf))
        label = f"{name} {w}x{pf}" + (f" -> {wc}x{pf}" if wc != w else "")

        def seed_style(wc: int = wc, pf: int = pf) -> DataLoader:
            ds = MmapGraphDataset(store)
            return DataLoader(ds, batch_size=bs, shuffle=True, num_workers=wc, prefetch_factor=pf,
                              persistent_workers=True, collate_fn=ds.collate_fn)  # fmt: skip

        def tj(wc: int = wc, pf: int = pf) -> DataLoader:
            plan = replace(planned, num_workers=wc, prefetch_factor=pf, persistent_workers=True)
            return build_loader(MmapGraphDataset(store), plan)

        configs[f"{label}, seed style"] = (seed_style, (wc, pf))
        configs[f"{label}, tj-data"] = (tj, (wc, pf))
    configs["plan_loader"] = (
        lambda: build_loader(MmapGraphDataset(store), planned),
        (planned.num_workers, planned.prefetch_factor),
    )
    t0 = time.perf_counter()
    step = busy(args.step_ms)
    tuned = autotune_loader(
        MmapGraphDataset(store), budget, batch_size=bs, seconds_per_candidate=args.tune_seconds,
        rounds=args.tune_rounds,
        step_fn=step,
    )  # fmt: skip
    tune_s = time.perf_counter() - t0
    best = tuned.best
    configs["autotune_loader"] = (
        lambda: build_loader(MmapGraphDataset(store), best),
        (best.num_workers, best.prefetch_factor),
    )
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in configs}
    for r in range(args.repeats):
        for name, (make, _) in configs.items():  # interleaved: contention hits every row alike
            runs[name].append(measure(make, args.seconds, 3, args.pss_interval, step))
            print(f"run {r} {name}: {runs[name][-1]['samples_per_s']:.0f} samples/s", flush=True)
    rows = {}
    for name, (_, (w, pf)) in configs.items():
        sps = float(np.median([m["samples_per_s"] for m in runs[name]]))
        peak = max(m["peak_pss"] for m in runs[name])
        rows[name] = {"workers": w, "prefetch": pf, "samples_per_s": sps, "peak_pss": peak,
                      "fits": peak <= budget, "runs": runs[name]}  # fmt: skip
    hand_fit = [
        v["samples_per_s"]
        for k, v in rows.items()
        if ("seed style" in k or "tj-data" in k) and v["fits"]
    ]
    fastest = max(hand_fit) if hand_fit else float("nan")
    return {
        "rows": rows,
        "fastest_fitting_hand": fastest,
        "autotune_vs_fastest": rows["autotune_loader"]["samples_per_s"] / fastest
        if hand_fit
        else None,
        "autotune_table": tuned.markdown(),
        "autotune_pick": tuned.best_name,
        "autotune_seconds": tune_s,
        "plan": planned.describe(),
        "plan_estimate": planned.estimate.table(),
    }


def budget_epochs(args: argparse.Namespace, store: Path, budget: int) -> dict[str, Any]:
    ds = MmapGraphDataset(store)
    plan = plan_loader(ds, budget_bytes=budget, batch_size=args.batch_size)
    loader = build_loader(ds, plan)
    before = tree_memory().pss
    epochs = []
    for e in range(args.epochs):
        n = 0
        t0 = time.perf_counter()
        with PeakPssSampler(interval=args.pss_interval) as peak:
            for i, b in enumerate(loader):
                n += b.num_graphs
                if args.epoch_batches and i + 1 >= args.epoch_batches:
                    break
        dt = time.perf_counter() - t0
        epochs.append(
            {"epoch": e, "samples": n, "samples_per_s": n / dt, "peak_pss": peak.peak_pss}
        )
        print(
            f"epoch {e}: {n} samples, {n / dt:.0f}/s, peak {peak.peak_pss / MiB:.0f} MiB",
            flush=True,
        )
    del loader
    return {"plan": plan.describe(), "estimate": plan.estimate.table(), "main_before": before,
            "epochs": epochs}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-gb", type=float, default=4.0)
    ap.add_argument("--budget-gb", type=float, default=1.0)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--shard-size", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0, help="measured seconds per run")
    ap.add_argument("--tune-seconds", type=float, default=3.0)
    ap.add_argument("--tune-rounds", type=int, default=3, help="autotune's interleaved rounds")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--epoch-batches", type=int, default=0, help="cap per epoch (0: full)")
    ap.add_argument("--pss-interval", type=float, default=0.25)
    ap.add_argument(
        "--step-ms",
        type=float,
        default=0.0,
        help="CPU work per batch in the main process (a training step stand-in)",
    )
    ap.add_argument("--skip", choices=["table", "epochs"], action="append", default=[])
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=Path("bench_loader.json"))
    ap.add_argument("--generate-only", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.generate_only is not None:
        generate(args.generate_only, args.size_gb, args.shard_size)
        return
    root = Path(tempfile.mkdtemp(prefix="tjdata-bench-", dir=args.dir))
    store = root / "store"
    try:
        subprocess.run(  # a child generates: this process's memory stays what a trainer's is
            [sys.executable, __file__, "--generate-only", str(store), "--size-gb", str(args.size_gb),
             "--shard-size", str(args.shard_size)], check=True,
        )  # fmt: skip
        ds = MmapGraphDataset(store)
        budget = int(args.budget_gb * GiB)
        result: dict[str, Any] = {
            "machine": machine(), "store_bytes": ds.store.manifest.nbytes, "samples": len(ds),
            "budget": budget, "main_pss": tree_memory().pss, "args": {k: str(v) for k, v in vars(args).items()},
        }  # fmt: skip
        del ds
        if "table" not in args.skip:
            result["seed_table"] = seed_table(args, store, budget)
        if "epochs" not in args.skip:
            result["budget_epochs"] = budget_epochs(args, store, budget)
        args.out.write_text(json.dumps(result, indent=1, default=str))
        report(result)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def report(r: dict[str, Any]) -> None:
    print(f"\nMachine: {r['machine']}; step {r['args']['step_ms']} ms per batch; store {r['store_bytes'] / 1e9:.2f} GB ({r['samples']:,} samples), "
          f"budget {r['budget'] / GiB:.2f} GiB, main process before loaders {r['main_pss'] / MiB:,.0f} MiB PSS\n")  # fmt: skip
    if "seed_table" in r:
        t = r["seed_table"]
        print(
            "| configuration | workers x prefetch | samples/s (median) | peak tree PSS MiB | within budget |"
        )
        print("|---|---|---:|---:|---|")
        for name, v in t["rows"].items():
            print(f"| {name} | {v['workers']}x{v['prefetch']} | {v['samples_per_s']:,.0f} | "
                  f"{v['peak_pss'] / MiB:,.0f} | {'yes' if v['fits'] else '**no**'} |")  # fmt: skip
        ratio = t["autotune_vs_fastest"]
        print(f"\nautotune pick: {t['autotune_pick']} (search {t['autotune_seconds']:.0f} s); "
              f"autotuned / fastest hand configuration within budget: "
              f"{ratio:.2f}" if ratio is not None else "no hand configuration within budget")  # fmt: skip
        print(
            f"\nplan_loader: {t['plan']}\n\n{t['plan_estimate']}\n\nautotune measurements:\n{t['autotune_table']}"
        )
    if "budget_epochs" in r:
        b = r["budget_epochs"]
        print(f"\nbudget adherence: {b['plan']}\n")
        print(
            "| epoch | samples | samples/s | peak tree PSS MiB | budget MiB |\n|---:|---:|---:|---:|---:|"
        )
        for e in b["epochs"]:
            print(f"| {e['epoch']} | {e['samples']:,} | {e['samples_per_s']:,.0f} | "
                  f"{e['peak_pss'] / MiB:,.0f} | {r['budget'] / MiB:,.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
