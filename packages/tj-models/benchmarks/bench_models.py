"""Forward+backward throughput and peak memory of each tj-models component.

    uv run python packages/tj-models/benchmarks/bench_models.py [--sizes tiny,normal] [--reps 3]
        [--iters 5] [--threads N] [--out results.json]

Batches: 32 graphs (intersections) of ~15 vehicles (Poisson), each vehicle linked to its 4 nearest
neighbours within 30 m (tj-rl's snapshot defaults, math heading); the world model reads windows of 4 input steps (+1 target step) of those 32 streams.
Every (size, component) measurement runs in a fresh child process, and the children are
interleaved rep by rep (A B C ... A B C ...), so the activation-checkpointing comparison is taken in
the same run under the same load. Reported: median over reps of samples/s (graphs/s for gnn,
controller, shield; windows/s for the world model) and of the peak memory delta.

Memory (CPU): USS of the child process (psutil ``memory_full_info().uss``, from smaps_rollup)
sampled every 2 ms by a thread; the delta is the peak during warm-up + timed steps minus the USS
after the model and the batch were built, i.e. activations + gradients of one fwd+bwd step (no
optimizer state). tracemalloc cannot see torch's allocations, hence USS. GPU columns (CUDA fp16
autocast, ``torch.cuda.max_memory_allocated``) are added only when a CUDA device is present.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

COMPONENTS = ("gnn", "world_model", "world_model+ckpt", "controller", "shield")
PHASE = {"gnn": 1, "world_model": 1, "world_model+ckpt": 1, "controller": 3, "shield": 3}


def _bench_window(graphs: int, vehicles: float, steps: int, seed: int):
    """``steps`` PyG batches of ``graphs`` streams; vehicles keep their ids and move between steps."""
    import torch
    from torch_geometric.data import Batch, Data

    from tj_models import FeatureLayout, edge_features, radius_edges

    g = torch.Generator().manual_seed(seed)
    layout = FeatureLayout()
    window: list[list[Data]] = [[] for _ in range(steps)]
    for b in range(graphs):
        n = int(torch.poisson(torch.tensor(float(vehicles)), generator=g))
        theta = torch.randint(0, 4, (n,), generator=g).float() * (torch.pi / 2)
        dist = torch.rand(n, generator=g) * 120
        speed = torch.rand(n, generator=g) * 14
        vid = torch.arange(n) + 1000 * b
        movement = torch.randint(0, 12, (n,), generator=g)
        for t in range(steps):
            d = dist - speed * 2.0 * t
            x = torch.stack(
                [
                    -torch.cos(theta) * d,
                    -torch.sin(theta) * d,
                    speed,
                    torch.zeros(n),
                    torch.sin(theta),
                    torch.cos(theta),
                    d,
                    torch.zeros(n),
                    torch.full((n,), 4.5),
                ],
                -1,
            )
            ei = radius_edges(
                x[:, :2], torch.tensor([0, n]), torch.zeros(n, dtype=torch.long), 30.0, 4
            )
            window[t].append(
                Data(
                    x=x,
                    edge_index=ei,
                    edge_attr=edge_features(x, ei, layout, "math"),
                    movement=movement,
                    vehicle_id=vid,
                    y_next=x,
                    y_mask=torch.ones(n, dtype=torch.bool),
                    risk=(torch.rand(n, generator=g) < 0.1).float(),
                    phase=torch.tensor([t % 2]),
                    time_in_phase=torch.tensor([2.0 * t]),
                    phase_count=torch.tensor([2]),
                    num_nodes=n,
                )
            )
    return [Batch.from_data_list(step) for step in window]


class _UssSampler(threading.Thread):
    def __init__(self) -> None:
        import psutil

        super().__init__(daemon=True)
        self.proc = psutil.Process()
        self.peak = 0
        self.stop = threading.Event()

    def uss(self) -> int:
        return self.proc.memory_full_info().uss

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, self.uss())
            time.sleep(0.002)


def _child(spec: dict) -> dict:
    """One measurement in this (fresh) process; returns a JSON-able result."""
    import torch
    import torch.nn.functional as F

    from tj_models import TrafficAgent, world_model_loss

    if spec["threads"]:
        torch.set_num_threads(spec["threads"])
    device = torch.device(spec["device"])
    torch.manual_seed(0)
    component, size = spec["component"], spec["size"]
    agent = TrafficAgent.preset(size).to(device)
    agent.freeze_for_phase(PHASE[component])
    agent.set_activation_checkpointing(component == "world_model+ckpt")
    t_in = spec["input_steps"]
    small = [s.to(device) for s in _bench_window(1, spec["vehicles"], t_in + 1, seed=2)]
    full = [s.to(device) for s in _bench_window(spec["graphs"], spec["vehicles"], t_in + 1, seed=1)]

    encoded = {}
    if component in ("controller", "shield"):
        with torch.no_grad():  # the encoder is frozen in phases 2 and 3: encode once, untimed
            encoded = {id(w): agent.encode(w[0]) for w in (small, full)}

    def step(window: list) -> None:
        enc = encoded.get(id(window))
        actions = torch.zeros(window[0].num_graphs, dtype=torch.long, device=device)
        if component == "gnn":
            out = agent.encode(window[0])
            loss = (
                F.binary_cross_entropy_with_logits(out.risk_logit, window[0].risk)
                + out.node.pow(2).mean()
            )
        elif component.startswith("world_model"):
            out = agent.predict(window, input_steps=t_in, horizon=1)
            loss = world_model_loss(agent.world_model, window, out).total
        elif component == "controller":
            out = agent.controller(enc)
            logp = torch.log_softmax(out.logits, -1).gather(1, actions[:, None])
            loss = -logp.mean() + out.value.pow(2).mean() + out.cost_value.pow(2).mean()
        else:
            loss = agent.shield(enc).pow(2).mean()
        loss.backward()
        for p in agent.parameters():
            p.grad = None

    cuda = device.type == "cuda"
    autocast = torch.autocast("cuda", dtype=torch.float16, enabled=cuda)
    with autocast:
        step(
            small
        )  # one-time runtime initialisation (kernels, thread pools) stays out of the delta
    gc.collect()
    sampler = _UssSampler()
    base = sampler.uss()
    sampler.peak = base
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        mem0 = torch.cuda.memory_allocated()
    sampler.start()
    with autocast:
        for _ in range(spec["warmup"]):
            step(full)
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(spec["iters"]):
            step(full)
        if cuda:
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
    sampler.stop.set()
    sampler.join()
    result = {
        **spec,
        "samples_per_s": spec["graphs"] * spec["iters"] / elapsed,
        "peak_uss_delta_mb": (sampler.peak - base) / 2**20,
        "vehicles_per_step": full[-1].num_nodes / spec["graphs"],
        "params": agent.parameter_counts()[
            "world_model" if component.startswith("world") else component
        ],
        "torch_threads": torch.get_num_threads(),
    }
    if cuda:
        result["cuda_peak_mb"] = (torch.cuda.max_memory_allocated() - mem0) / 2**20
    return result


def _run_child(spec: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"benchmark child {spec['size']}/{spec['component']} failed:\n{proc.stderr[-3000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="tiny,normal")
    ap.add_argument("--components", default=",".join(COMPONENTS))
    ap.add_argument("--graphs", type=int, default=32)
    ap.add_argument("--vehicles", type=float, default=15.0)
    ap.add_argument("--input-steps", type=int, default=4)
    ap.add_argument("--iters", type=int, default=5, help="timed fwd+bwd steps per measurement")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3, help="interleaved repetitions (median reported)")
    ap.add_argument(
        "--threads", type=int, default=0, help="torch intra-op threads (0: torch default)"
    )
    ap.add_argument("--out", type=Path, help="write all results as JSON here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(json.loads(args.child))))
        return

    import torch

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    sizes, comps = args.sizes.split(","), args.components.split(",")
    unknown = set(comps) - set(COMPONENTS)
    if unknown:
        ap.error(f"unknown components {sorted(unknown)}; choose from {COMPONENTS}")
    results: list[dict] = []
    for rep in range(args.reps):
        for device in devices:
            for size in sizes:
                for comp in comps:
                    spec = {
                        "device": device,
                        "size": size,
                        "component": comp,
                        "graphs": args.graphs,
                        "vehicles": args.vehicles,
                        "input_steps": args.input_steps,
                        "iters": args.iters,
                        "warmup": args.warmup,
                        "threads": args.threads,
                        "rep": rep,
                    }
                    r = _run_child(spec)
                    results.append(r)
                    print(
                        f"rep {rep} {device} {size:6s} {comp:17s} {r['samples_per_s']:9.1f}/s "
                        f"peak {r['peak_uss_delta_mb']:8.1f} MB",
                        file=sys.stderr,
                        flush=True,
                    )
    _report(results, devices, sizes, comps, args)
    if args.out:
        args.out.write_text(
            json.dumps(
                {"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=2
            )
        )


def _cpu_name() -> str:
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ckpt_ratio(results: list[dict], device: str, size: str, key: str, reps: int) -> float:
    """Median over reps of (with checkpointing) / (without), both measured in the same rep."""
    ratios = []
    for rep in range(reps):
        sel = {
            r["component"]: r[key]
            for r in results
            if (r["device"], r["size"], r["rep"]) == (device, size, rep)
        }
        ratios.append(
            sel["world_model+ckpt"] / sel["world_model"] if sel["world_model"] else float("nan")
        )
    return statistics.median(ratios)


def _report(
    results: list[dict], devices: list[str], sizes: list[str], comps: list[str], args
) -> None:
    import torch

    def med(device: str, size: str, comp: str, key: str) -> float:
        return statistics.median(
            r[key]
            for r in results
            if (r["device"], r["size"], r["component"]) == (device, size, comp)
        )

    threads = results[0]["torch_threads"]
    vehicles = statistics.mean(r["vehicles_per_step"] for r in results)
    print(
        f"\nmachine: {_cpu_name()}, {os.cpu_count()} logical CPUs, torch {torch.__version__}, "
        f"{threads} intra-op thread(s); median of {args.reps} interleaved reps, {args.iters} timed "
        f"fwd+bwd steps each; batch = {args.graphs} graphs of {vehicles:.1f} vehicles on average "
        f"(world model: windows of {args.input_steps} input steps + 1 target)\n"
    )
    head = "| size | component | params | CPU samples/s | CPU peak USS delta (MB) |"
    sep = "|---|---|---:|---:|---:|"
    if "cuda" in devices:
        head += " GPU fp16 samples/s | GPU peak alloc (MB) |"
        sep += "---:|---:|"
    print(head)
    print(sep)
    for size in sizes:
        for comp in comps:
            params = next(
                r["params"] for r in results if (r["size"], r["component"]) == (size, comp)
            )
            row = (
                f"| {size} | {comp} | {params / 1e6:.2f} M | {med('cpu', size, comp, 'samples_per_s'):.1f} | "
                f"{med('cpu', size, comp, 'peak_uss_delta_mb'):.1f} |"
            )
            if "cuda" in devices:
                row += f" {med('cuda', size, comp, 'samples_per_s'):.1f} | {med('cuda', size, comp, 'cuda_peak_mb'):.1f} |"
            print(row)
    if "world_model" in comps and "world_model+ckpt" in comps:
        print("\nactivation checkpointing (world model GNN layers), median of per-rep ratios:")
        for device in devices:
            for size in sizes:
                mem_key = "peak_uss_delta_mb" if device == "cpu" else "cuda_peak_mb"
                speed = _ckpt_ratio(results, device, size, "samples_per_s", args.reps)
                memory = _ckpt_ratio(results, device, size, mem_key, args.reps)
                print(f"- {device} {size}: throughput x{speed:.2f}, peak memory x{memory:.2f}")
    if "cuda" not in devices:
        print("\nno CUDA device on this machine: GPU columns omitted.")


if __name__ == "__main__":
    main()
