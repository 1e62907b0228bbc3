"""One tj-models forward+backward measurement in a fresh process (``tj_monitor.run_in_child``):
one measurement's allocator caches and thread pools stay out of the next one's memory delta.

Memory: the child's USS and PSS (tj-monitor's ``PeakPssSampler``, smaps_rollup) polled every
2 ms by a thread; the delta is the peak during warm-up + timed steps minus the value after the model
and the batch were built and one small step ran, i.e. activations + gradients of one step (no
optimizer state). tracemalloc cannot see torch's allocations, hence USS/PSS. On CUDA also
``torch.cuda.max_memory_allocated`` above the allocation before the steps.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from tj_monitor import PeakPssSampler, Timer, run_in_child, tree_memory

__all__ = ["COMPONENTS", "PHASE", "PRECISIONS", "measure", "run_child", "save_windows"]

COMPONENTS = ("gnn", "world_model", "world_model+ckpt", "controller", "shield")
PHASE = {"gnn": 1, "world_model": 1, "world_model+ckpt": 1, "controller": 3, "shield": 3}
PRECISIONS = ("fp32", "fp16", "bf16")  # fp16/bf16: CUDA autocast
POLL_S = 0.002
MIB = 2**20


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

    from tj_dist import AmpConfig
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
    if spec["precision"] != "fp32" and not cuda:
        raise ValueError(f"precision {spec['precision']}: measured on CUDA only")
    amp = AmpConfig(precision=spec["precision"], device_type=device.type)  # autocast: fp16/bf16
    with amp.autocast():
        step(small)  # one-time initialisation (kernels, thread pools) stays out of the delta
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        alloc0 = torch.cuda.memory_allocated()
    timer = Timer("steps", cuda="sync" if cuda else "off")
    base = tree_memory()
    with PeakPssSampler(POLL_S) as sampler, amp.autocast():
        for _ in range(spec["warmup"]):
            step(full)
        with timer:
            for _ in range(spec["iters"]):
                step(full)
    counts = agent.parameter_counts()
    result = {
        **spec,
        "samples_per_s": spec["graphs"] * spec["iters"] / timer.stats().total,
        "peak_uss_delta_mib": (sampler.peak_uss - base.uss) / MIB,
        "peak_pss_delta_mib": (sampler.peak_pss - base.pss) / MIB,
        "vehicles_per_graph": full[-1].num_nodes / spec["graphs"],
        "params": counts["world_model" if component.startswith("world") else component],
        "torch_threads": torch.get_num_threads(),
    }
    if cuda:
        result["cuda_peak_alloc_mib"] = (torch.cuda.max_memory_allocated() - alloc0) / MIB
    return result


def run_child(spec: dict[str, Any], timeout: float = 1800) -> dict[str, Any]:
    """``measure(spec)`` in a fresh spawned process."""
    what = f"{spec['preset']}/{spec['component']}/{spec['device']}-{spec['precision']}"
    return run_in_child(measure, spec, name=f"the models child {what}", timeout_s=timeout)
