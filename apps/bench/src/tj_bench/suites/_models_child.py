"""One tj-models forward+backward measurement in a fresh process.

    python -m tj_bench.suites._models_child '{"preset": "tiny", "component": "gnn", ...}'

A fresh process per (preset, component, device, precision) keeps one measurement's allocator
caches and thread pools out of the next one's memory delta. The result is one JSON line on stdout.

Memory: the child's USS and PSS (tj-monitor's ``PeakPssSampler``, smaps_rollup) polled every
2 ms by a thread; the delta is the peak during warm-up + timed steps minus the value after the model
and the batch were built and one small step ran, i.e. activations + gradients of one step (no
optimizer state). tracemalloc cannot see torch's allocations, hence USS/PSS. On CUDA also
``torch.cuda.max_memory_allocated`` above the allocation before the steps.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tj_monitor import PeakPssSampler, TreeMemory

__all__ = ["COMPONENTS", "PHASE", "PRECISIONS", "measure", "run_child", "save_windows"]

COMPONENTS = ("gnn", "world_model", "world_model+ckpt", "controller", "shield")
PHASE = {"gnn": 1, "world_model": 1, "world_model+ckpt": 1, "controller": 3, "shield": 3}
PRECISIONS = ("fp32", "fp16", "bf16")  # fp16/bf16: CUDA autocast
POLL_S = 0.002
MIB = 2**20


class _PeakTree(PeakPssSampler):
    """tj-monitor's ``PeakPssSampler`` (PSS read on every poll) that keeps the peak USS too;
    ``base_uss`` / ``base_pss``: the tree when it was made."""

    def __init__(self) -> None:
        super().__init__(POLL_S)
        self.peak_uss = 0
        first = self.sample()
        self.base_uss, self.base_pss = first.uss, first.pss

    def sample(self) -> TreeMemory:
        tree = super().sample()
        self.peak_uss = max(self.peak_uss, tree.uss)
        return tree


def save_windows(path: Path, graphs: int, vehicles: float, steps: int) -> Path:
    """Build the suite's two windows once, for the children to load: ``full`` (seed 1,
    ``graphs`` intersections) and ``small`` (seed 2, one, for the untimed first step), each
    ``steps`` PyG batches of ``tj_models.synthetic`` traffic with Poisson(``vehicles``) vehicles
    on the approaches at the first step."""
    import torch

    from tj_models.synthetic import SyntheticTrafficConfig, collate_windows, synthetic_windows

    cfg = SyntheticTrafficConfig(steps=steps, warmup_steps=0, initial_vehicles=vehicles)
    torch.save({name: collate_windows(synthetic_windows(cfg, streams=n, window=steps, seed=seed))
                for name, n, seed in (("full", graphs, 1), ("small", 1, 2))}, path)  # fmt: skip
    return path


def _step_fn(agent: Any, component: str, t_in: int, encoded: dict[int, Any]) -> Any:
    """fwd + bwd of one component on a window (list of batches), gradients dropped after."""
    import torch
    import torch.nn.functional as F

    from tj_models import world_model_loss

    def step(window: list[Any]) -> None:
        enc = encoded.get(id(window))
        if component == "gnn":
            out = agent.encode(window[0])
            loss = (F.binary_cross_entropy_with_logits(out.risk_logit, window[0].risk)
                    + out.node.pow(2).mean())  # fmt: skip
        elif component.startswith("world_model"):
            out = agent.predict(window, input_steps=t_in, horizon=1)
            loss = world_model_loss(agent.world_model, window, out).total
        elif component == "controller":
            out = agent.controller(enc)
            actions = torch.zeros(window[0].num_graphs, dtype=torch.long, device=out.logits.device)
            logp = torch.log_softmax(out.logits, -1).gather(1, actions[:, None])
            loss = -logp.mean() + out.value.pow(2).mean() + out.cost_value.pow(2).mean()
        else:
            loss = agent.shield(enc).pow(2).mean()
        loss.backward()
        for p in agent.parameters():
            p.grad = None

    return step


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one measurement in this process; returns a JSON-able result (``spec`` included)."""
    import torch

    from tj_models import TrafficAgent

    if spec["threads"]:
        torch.set_num_threads(spec["threads"])
    device = torch.device(spec["device"])
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    component, t_in = spec["component"], spec["input_steps"]
    agent = TrafficAgent.preset(spec["preset"]).to(device)
    agent.freeze_for_phase(PHASE[component])
    agent.set_activation_checkpointing(component == "world_model+ckpt")
    windows = torch.load(spec["windows"], weights_only=False)  # save_windows' file
    small, full = ([s.to(device) for s in windows[k]] for k in ("small", "full"))
    del windows
    encoded: dict[int, Any] = {}
    if component in ("controller", "shield"):
        with torch.no_grad():  # the encoder is frozen in phases 2 and 3: encode once, untimed
            encoded = {id(w): agent.encode(w[0]) for w in (small, full)}
    step = _step_fn(agent, component, t_in, encoded)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(spec["precision"])
    if dtype is not None and not cuda:
        raise ValueError(f"precision {spec['precision']}: measured on CUDA only")
    autocast = torch.autocast("cuda", dtype=dtype or torch.float16, enabled=dtype is not None)
    with autocast:
        step(small)  # one-time initialisation (kernels, thread pools) stays out of the delta
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        alloc0 = torch.cuda.memory_allocated()
    with _PeakTree() as sampler, autocast:
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
    counts = agent.parameter_counts()
    result = {
        **spec,
        "samples_per_s": spec["graphs"] * spec["iters"] / elapsed,
        "peak_uss_delta_mib": (sampler.peak_uss - sampler.base_uss) / MIB,
        "peak_pss_delta_mib": (sampler.peak_pss - sampler.base_pss) / MIB,
        "vehicles_per_graph": full[-1].num_nodes / spec["graphs"],
        "params": counts["world_model" if component.startswith("world") else component],
        "torch_threads": torch.get_num_threads(),
    }
    if cuda:
        result["cuda_peak_alloc_mib"] = (torch.cuda.max_memory_allocated() - alloc0) / MIB
    return result


def run_child(spec: dict[str, Any], timeout: float = 1800) -> dict[str, Any]:
    """``measure(spec)`` in a fresh interpreter; its stderr tail in the error if it fails."""
    proc = subprocess.run([sys.executable, "-m", __name__, json.dumps(spec)], capture_output=True,
                          text=True, check=False, timeout=timeout)  # fmt: skip
    if proc.returncode != 0:
        what = f"{spec['preset']}/{spec['component']}/{spec['device']}-{spec['precision']}"
        raise RuntimeError(
            f"models child {what} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(json.dumps(measure(json.loads(sys.argv[1]))), flush=True)
