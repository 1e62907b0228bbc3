"""Quantisation: bytes on disk and error per feature, and bytes per batch with host- vs
device-side dequantisation (issue 4 benchmark).

    uv run python packages/tj-data/benchmarks/bench_quant.py --samples 200000 --out bench_quant.json

A traffic-like float store (snapshot column names, realistic ranges and outliers) is summarised
exactly (`compute_statistics(method="exact")`) and quantised with `quantize_store`: x and y_next
int8 on min/max and on the 0.1/99.9 percentiles, edge_attr float16. Then batches of 32 and 256
samples are collated from the quantised store with dequantize="host" (float32 crosses the bus)
and "device" (int8/float16 cross, decoded by `batch.dequantize()` after `.to(device)`): bytes per
batch and collate time, interleaved, median of --repeats runs. Stores are deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _bench_common import machine

from tj_data import (
    FieldSpec,
    GraphStore,
    GraphStoreWriter,
    MmapGraphDataset,
    Schema,
    compute_statistics,
    quantize_store,
)

NODE = ("rel_x", "rel_y", "speed", "accel", "heading_sin", "heading_cos", "dist_to_stop_line",
        "waiting_time", "length")  # fmt: skip
EDGE = ("dx", "dy", "closing_speed", "inv_ttc")
SCHEMA = Schema(
    fields=(
        FieldSpec(name="x", level="node", dtype="float32", shape=(9,), columns=NODE),
        FieldSpec(name="vehicle_id", level="node", dtype="int64"),
        FieldSpec(name="y_next", level="node", dtype="float32", shape=(9,), columns=NODE),
        FieldSpec(name="edge_attr", level="edge", dtype="float32", shape=(4,), columns=EDGE),
        FieldSpec(name="intersection", level="sample", dtype="int64"),
        FieldSpec(name="sim_time", level="sample", dtype="float32"),
    )
)
RANGES = {"x": {"length": (0.0, 20.0)}, "y_next": {"length": (0.0, 20.0)}}


def node_features(rng: np.random.Generator, n: int) -> np.ndarray:
    ang = rng.uniform(0, 2 * np.pi, n)
    speed = np.clip(rng.gamma(2.0, 3.0, n), 0, 30)
    return np.column_stack([
        rng.normal(0, 60, n), rng.normal(0, 60, n), speed, rng.normal(0, 1.2, n) - 4.5 * (rng.random(n) < 0.01),
        np.sin(ang), np.cos(ang), rng.uniform(-10, 150, n),
        np.where(speed < 0.5, rng.exponential(20, n), 0.0), rng.choice([4.5, 5.0, 12.0], n, p=[0.6, 0.3, 0.1]),
    ]).astype(np.float32)  # fmt: skip


def generate(path: Path, samples: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    block = 10_000
    with GraphStoreWriter(path, SCHEMA, shard_size=8192) as w:
        for start in range(0, samples, block):
            b = min(block, samples - start)
            nn = np.minimum(np.round(rng.lognormal(np.log(10.0), 0.8, b)), 200).astype(np.int64)
            ne = np.minimum(4 * nn, nn * np.maximum(nn - 1, 0))
            n_tot, e_tot = int(nn.sum()), int(ne.sum())
            x = node_features(rng, n_tot)
            ea = np.column_stack([rng.normal(0, 15, (e_tot, 2)), rng.normal(0, 3, e_tot),
                                  np.clip(rng.exponential(0.05, e_tot), 0, 5)]).astype(np.float32)  # fmt: skip
            w.append_block(
                {"x": x, "vehicle_id": rng.integers(0, 1 << 30, n_tot),
                 "y_next": x + rng.normal(0, 0.3, x.shape).astype(np.float32),
                 "edge_index": (rng.random((2, e_tot)) * np.repeat(nn, ne)).astype(np.int64),
                 "edge_attr": ea, "intersection": np.arange(start, start + b) % 16,
                 "sim_time": np.arange(start, start + b, dtype=np.float32)},
                nn, ne,
            )  # fmt: skip


def field_bytes(store: GraphStore, name: str) -> int:
    return sum(int(s.files[f"{name}.npy"]["nbytes"]) for s in store.manifest.shards)


def batches_bench(q: Path, bs: int, n: int, repeats: int) -> dict[str, Any]:
    rng = np.random.default_rng(1)
    modes = {"host": MmapGraphDataset(q), "device": MmapGraphDataset(q, dequantize="device")}
    idx = [rng.integers(0, len(modes["host"]), bs).tolist() for _ in range(n)]
    times: dict[str, list[float]] = {m: [] for m in modes}
    nbytes: dict[str, list[int]] = {m: [] for m in modes}
    for _ in range(repeats):
        for m, ds in modes.items():  # interleaved
            t0 = time.perf_counter()
            for i in idx:
                b = ds.collate_fn(ds.__getitems__(i))
                nbytes[m].append(b.nbytes)
            times[m].append((time.perf_counter() - t0) / n)
    out = {m: {"bytes_per_batch": float(np.median(nbytes[m])), "collate_us": 1e6 * float(np.median(times[m]))}
           for m in modes}  # fmt: skip
    if torch.cuda.is_available():  # the transfer itself, where a GPU exists
        for m, ds in modes.items():
            bl = [ds.collate_fn(ds.__getitems__(i)).pin_memory() for i in idx[:50]]
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for b in bl:
                b.to("cuda", non_blocking=True).dequantize()
            torch.cuda.synchronize()
            out[m]["to_device_dequantize_us"] = 1e6 * (time.perf_counter() - t0) / len(bl)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=Path("bench_quant.json"))
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tjdata-quant-", dir=args.dir))
    try:
        src = root / "float"
        generate(src, args.samples)
        t0 = time.perf_counter()
        compute_statistics(src, fields=["x", "y_next", "edge_attr"], method="exact")
        stats_s = time.perf_counter() - t0
        fields = {"x": "int8", "y_next": "int8", "edge_attr": "float16"}
        variants = {
            "minmax": quantize_store(src, root / "q-minmax", fields, ranges=RANGES),
            "p0.1-p99.9": quantize_store(src, root / "q-pct", fields, ranges=RANGES, percentiles=(0.1, 99.9)),
        }  # fmt: skip
        a = GraphStore.open(src)
        result: dict[str, Any] = {"machine": machine(), "samples": len(a), "stats_exact_s": stats_s,
                                  "store_bytes": a.manifest.nbytes}  # fmt: skip
        for name, rep in variants.items():
            b = GraphStore.open(rep.path)
            result[name] = {
                "store_bytes": b.manifest.nbytes,
                "fields": {
                    f: {"kind": r.kind, "float32_bytes": field_bytes(a, f), "stored_bytes": field_bytes(b, f),
                        "ratio": field_bytes(b, f) / field_bytes(a, f),
                        "columns": {c: {"max_abs": float(r.max_abs_error[j]), "mean_abs": float(r.mean_abs_error[j]),
                                        "clipped": int(r.clipped[j])} for j, c in enumerate(r.columns)}}
                    for f, r in rep.fields.items()
                },
            }  # fmt: skip
        result["batches"] = {
            bs: batches_bench(root / "q-minmax", bs, args.batches, args.repeats) for bs in (32, 256)
        }
        args.out.write_text(json.dumps(result, indent=1))
        report(result)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def report(r: dict[str, Any]) -> None:
    print(f"\nMachine: {r['machine']}; {r['samples']:,} samples, float store {r['store_bytes'] / 1e6:.1f} MB; "
          f"exact statistics of 3 fields in {r['stats_exact_s']:.1f} s\n")  # fmt: skip
    print("| fields | kind | float32 bytes | stored bytes | ratio |\n|---|---|---:|---:|---:|")
    for f, v in r["minmax"]["fields"].items():
        print(
            f"| {f} | {v['kind']} | {v['float32_bytes']:,} | {v['stored_bytes']:,} | {v['ratio']:.3f} |"
        )
    print(
        f"\nwhole store: {r['store_bytes'] / 1e6:.1f} MB -> {r['minmax']['store_bytes'] / 1e6:.1f} MB\n"
    )
    print(
        "| field | column | kind | max abs error (min/max) | mean abs error (min/max) | max abs error (p0.1-p99.9) | mean abs error (p0.1-p99.9) | clipped (p0.1-p99.9) |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for f, v in r["minmax"]["fields"].items():
        for c, e in v["columns"].items():
            p = r["p0.1-p99.9"]["fields"][f]["columns"][c]
            print(f"| {f} | {c} | {v['kind']} | {e['max_abs']:.4g} | {e['mean_abs']:.4g} | {p['max_abs']:.4g} | "
                  f"{p['mean_abs']:.4g} | {p['clipped']:,} |")  # fmt: skip
    print(
        "\n| batch | dequantize | bytes per batch (crosses the bus) | collate us (CPU) |\n|---:|---|---:|---:|"
    )
    for bs, modes in r["batches"].items():
        for m, v in modes.items():
            extra = (
                f" ({v['to_device_dequantize_us']:.0f} us to device + decode)"
                if "to_device_dequantize_us" in v
                else ""
            )
            print(f"| {bs} | {m} | {v['bytes_per_batch']:,.0f} | {v['collate_us']:,.0f}{extra} |")


if __name__ == "__main__":
    main()
