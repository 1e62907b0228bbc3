"""Suite ``models``: forward+backward throughput and peak memory of each tj-models component.

Batches of 32 graphs of ~15 vehicles (``tj_models.synthetic`` traffic); the world model reads
windows of 4 input steps + 1 target step. Every (preset, component, device, precision) measurement runs in a fresh
child process (``_models_child``), the children interleaved repetition by repetition, so that the
activation-checkpointing comparison (``world_model+ckpt`` against ``world_model``) is taken in
the same repetition under the same load. CPU runs in fp32; with CUDA the same children also run
on the GPU in fp32, fp16 and (where the GPU has it natively) bf16 autocast.
"""

from __future__ import annotations

from typing import Any

from tj_bench.measure import ratio
from tj_bench.suite import SizedOptions, Suite, SuiteContext, sized_help
from tj_bench.suites._models_child import COMPONENTS, PRECISIONS, run_child, save_windows

__all__ = ["SUITE", "figure", "targets"]

SIZED: SizedOptions = {
    "graphs": (32, 8, "graphs (intersections) per batch"),
    "vehicles": (15.0, 15.0, "mean vehicles per graph, Poisson"),
    "input_steps": (4, 4, "world-model input steps per window"),
    "iters": (5, 2, "timed fwd+bwd steps per measurement"),
    "warmup": (2, 1, "untimed fwd+bwd steps before them"), "threads": (0, 1, "torch intra-op threads per child (0: torch's default)"),
}  # fmt: skip
OPTIONS = {
    "presets": "comma-separated TrafficAgent presets (default tiny,normal; quick: tiny)",
    "components": f"comma-separated components (default all: {','.join(COMPONENTS)})",
    "cuda": "also measure on CUDA when a device is present (default true)",
    **sized_help(SIZED),
}


def targets(cuda: bool, bf16: bool) -> list[tuple[str, str]]:
    """(device, precision) pairs to measure: CPU fp32, then CUDA fp32/fp16[/bf16]."""
    out = [("cpu", "fp32")]
    if cuda:
        out += [("cuda", p) for p in PRECISIONS if p != "bf16" or bf16]
    return out


def figure(preset: str, component: str, device: str, precision: str, what: str) -> str:
    """``normal/world_model/cpu-fp32/samples_per_s``."""
    return f"{preset}/{component}/{device}-{precision}/{what}"


def _record(ctx: SuiteContext, r: dict[str, Any]) -> None:
    def name(what: str) -> str:
        return figure(r["preset"], r["component"], r["device"], r["precision"], what)

    unit = "windows/s" if r["component"].startswith("world_model") else "graphs/s"
    ctx.record(name("samples_per_s"), r["samples_per_s"], unit=unit, better="higher")
    if r["device"] == "cpu":
        ctx.record(name("peak_uss_delta"), r["peak_uss_delta_mib"], unit="MiB", better="lower")
        ctx.record(name("peak_pss_delta"), r["peak_pss_delta_mib"], unit="MiB", better="lower")
    else:
        ctx.record(name("peak_alloc_delta"), r["cuda_peak_alloc_mib"], unit="MiB", better="lower")


def _record_checkpointing(ctx: SuiteContext, preset: str, device: str, precision: str,
                          plain: dict[str, Any], ckpt: dict[str, Any]) -> None:  # fmt: skip
    """Per-repetition ratios with / without activation checkpointing (same repetition)."""
    mem = "peak_uss_delta_mib" if device == "cpu" else "cuda_peak_alloc_mib"
    base = f"{preset}/checkpointing/{device}-{precision}"
    ctx.record(f"{base}/throughput_ratio", ratio(ckpt["samples_per_s"], plain["samples_per_s"]),
               unit="x", better="higher")  # fmt: skip
    ctx.record(f"{base}/memory_ratio", ratio(ckpt[mem], plain[mem]), unit="x", better="lower")


def _gpu(ctx: SuiteContext) -> tuple[bool, bool]:
    """(measure on CUDA, with bf16); says in ``unavailable`` what is left out and why."""
    want = ctx.option("cuda", True)
    if not (want and ctx.cuda):
        why = "no CUDA device" if want else "disabled (--set models.cuda=false)"
        ctx.unavailable("cuda", f"{why}: GPU columns (fp16/bf16) not measured")
        return False, False
    from tj_dist import choose_precision

    bf16 = choose_precision("auto", "cuda").precision == "bf16"  # where it is native only
    if not bf16:
        ctx.unavailable("cuda-bf16", "the GPU has no native bf16 (compute capability < 8.0)")
    return True, bf16


def run(ctx: SuiteContext) -> None:
    from tj_models import PRESETS

    presets = ctx.choices("presets", "tiny" if ctx.quick else "tiny,normal", PRESETS)
    components = ctx.choices("components", ",".join(COMPONENTS), COMPONENTS)
    base = ctx.sized_options(SIZED)
    ctx.param("presets", ",".join(presets))
    cuda, bf16 = _gpu(ctx)
    base["windows"] = str(save_windows(ctx.workdir / "windows.pt", base["graphs"],
                                       base["vehicles"], base["input_steps"] + 1))  # fmt: skip
    cases = [(d, p, s) for d, p in targets(cuda, bf16) for s in presets]
    vehicles: list[float] = []
    params: dict[tuple[str, str], int] = {}
    for rep in ctx.repetitions("interleaved repetitions"):
        for device, precision, preset in cases:
            got = {}
            for comp in ctx.progress(components, f"rep {rep + 1}: {preset} {device}-{precision}"):
                spec = {**base, "device": device, "precision": precision, "preset": preset,
                        "component": comp, "rep": rep}  # fmt: skip
                got[comp] = r = run_child(spec)
                _record(ctx, r)
                vehicles.append(r["vehicles_per_graph"])
                params[(preset, comp)] = r["params"]
                ctx.param("torch_threads", r["torch_threads"])
            if "world_model" in got and "world_model+ckpt" in got:
                _record_checkpointing(ctx, preset, device, precision, got["world_model"],
                                      got["world_model+ckpt"])  # fmt: skip
    for (preset, comp), count in params.items():
        ctx.record(f"{preset}/{comp}/params", count, unit="parameters")
    ctx.param("vehicles_per_graph", round(sum(vehicles) / len(vehicles), 2))
    ctx.note("Forward+backward samples/s (graphs/s; windows of input_steps + 1 steps/s for the "
             "world model), one fresh child process per measurement, children interleaved per "
             "repetition. Memory delta: peak during warm-up + timed steps minus after the model "
             "and batch were built (activations + gradients, no optimizer state): CPU = the "
             "child's USS/PSS polled every 2 ms; CUDA = max_memory_allocated. CUDA fp32 runs "
             "without autocast; fp16/bf16 under torch.autocast (no GradScaler). On a machine with "
             "few cores, threads=0 lets torch's OpenMP team compete with the polling thread "
             "(CPU throughput fell by 10x and more on 2 cores): the published tables use "
             "threads=1.")  # fmt: skip
    ctx.note("controller and shield time the component alone on precomputed (frozen) encoder "
             "outputs; checkpointing ratios are with / without activation checkpointing of the "
             "world model's GNN layers, taken in the same repetition.")  # fmt: skip


SUITE = Suite(
    name="models", run=run, options=OPTIONS,
    summary="tj-models fwd+bwd throughput, peak USS/PSS and activation-checkpointing cost per "
            "preset and precision (CPU fp32; CUDA fp32/fp16/bf16 when present)",
)  # fmt: skip
