"""Suite ``quant``: what tj-data's quantisation saves and what it costs.

A traffic-like float32 store (``tj_data.synthetic``'s traffic blocks: snapshot columns, ranges
and outliers like recorded traffic, fixed seed) is summarised exactly (``compute_statistics``,
timed) and quantised with ``quantize_store``: x and y_next to int8, fitted on min/max and on the
0.1/99.9 percentiles, edge_attr to float16. Recorded: bytes per field and their ratio (the
quantisation report's), the max / mean absolute error per column (every value decoded and
compared), and, from the
min/max store, bytes per batch and collate time with ``dequantize="host"`` (float32 crosses the
bus) against ``"device"`` (int8/float16 cross, decoded by ``batch.dequantize()`` after
``.to(device)``), interleaved. Where CUDA exists, the transfer plus decode is timed as well.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from tj_bench.measure import interleaved, timed
from tj_bench.suite import SizedOptions, Suite, SuiteContext, sized_help
from tj_data import GraphBatch, MmapGraphDataset, QuantizeReport, compute_statistics, quantize_store
from tj_data.synthetic import write_synthetic
from tj_monitor import Timer

__all__ = ["COLUMN_UNITS", "SUITE", "run"]

FIELDS = {"x": "int8", "y_next": "int8", "edge_attr": "float16"}
PERCENTILES = (0.1, 99.9)
BATCH_SIZES = (32, 256)
MODES = ("host", "device")
CUDA_BATCHES = 50  # batches per case in the transfer timing
SIZED: SizedOptions = {
    "samples": (200_000, 3_000, "graphs in the generated float32 store"),
    "batches": (200, 20, "random batches per batch size and mode in the collate timing"),
}
COLUMN_UNITS = {
    "rel_x": "m", "rel_y": "m", "speed": "m/s", "accel": "m/s^2", "heading_sin": "1",
    "heading_cos": "1", "dist_to_stop_line": "m", "waiting_time": "s", "length": "m",
    "dx": "m", "dy": "m", "closing_speed": "m/s", "inv_ttc": "1/s",
}  # fmt: skip
# `length` is nearly constant (3 vehicle types): a fixed range instead of its min/max.
RANGES = {"x": {"length": (0.0, 20.0)}, "y_next": {"length": (0.0, 20.0)}}


def _stats(ctx: SuiteContext, src: Path) -> None:
    for _ in ctx.repetitions("exact statistics"):
        _, seconds = timed(lambda: compute_statistics(src, fields=list(FIELDS), method="exact"))
        ctx.record("stats/exact_s", seconds, unit="s", better="lower",
                   note="compute_statistics(method='exact') of x, y_next, edge_attr")  # fmt: skip


def _bytes(ctx: SuiteContext, r: QuantizeReport) -> None:
    ctx.record("bytes/store/float32", r.store_bytes_before, unit="bytes")
    ctx.record("bytes/store/quantised", r.store_bytes_after, unit="bytes")
    ctx.record("ratio/store", r.store_bytes_after / r.store_bytes_before, unit="x")
    for name, f in r.fields.items():
        ctx.record(f"bytes/{name}/float32", f.source_bytes, unit="bytes")
        ctx.record(f"bytes/{name}/stored", f.stored_bytes, unit="bytes")
        ctx.record(f"ratio/{name}", f.ratio, unit="x", note=f"{FIELDS[name]} / float32")


def _errors(ctx: SuiteContext, reports: dict[str, QuantizeReport]) -> None:
    """Per column: errors of the min/max fit; for int8 fields also of the percentile fit."""
    for fit, prefix in (("minmax", ""), ("pct", "pct/")):
        for name, r in reports[fit].fields.items():
            if fit == "pct" and r.kind == "float16":
                continue  # float16 has no fit: the same numbers as above
            for j, col in enumerate(r.columns):
                base, unit = f"error/{name}/{col}/{prefix}", COLUMN_UNITS[col]
                ctx.record(f"{base}max_abs", r.max_abs_error[j], unit=unit, better="lower")
                ctx.record(f"{base}mean_abs", r.mean_abs_error[j], unit=unit, better="lower")
                ctx.record(f"{base}clipped", int(r.clipped[j]), unit="values")


def _collate_case(ds: MmapGraphDataset, idx: list[list[int]]) -> Callable[[], tuple[float, float]]:
    """One pass over ``idx``: (seconds per batch, median bytes per batch)."""

    def case() -> tuple[float, float]:
        nbytes, seconds = timed(lambda: [ds.collate_fn(ds.__getitems__(i)).nbytes for i in idx])
        return seconds / len(idx), float(np.median(nbytes))

    return case


def _transfer_case(batches: list[GraphBatch]) -> Callable[[], float]:
    """Pinned batches to CUDA + ``dequantize()``: seconds per batch (synchronised at both ends)."""

    def case() -> float:
        with Timer("to device", cuda="sync") as timer:
            for b in batches:
                b.to("cuda", non_blocking=True).dequantize()
        return timer.stats().total / len(batches)

    return case


def _batches(ctx: SuiteContext, store: Path, n: int) -> None:
    datasets = {
        "host": MmapGraphDataset(store),
        "device": MmapGraphDataset(store, dequantize="device"),
    }
    idx = {}
    for bs in BATCH_SIZES:
        rng = np.random.default_rng(1)
        idx[bs] = [rng.integers(0, len(datasets["host"]), bs).tolist() for _ in range(n)]
    cases = {(bs, m): _collate_case(datasets[m], idx[bs]) for bs in BATCH_SIZES for m in MODES}
    out = interleaved(cases, ctx.repetitions("collate host vs device"))
    for (bs, m), values in out.items():
        for seconds, nbytes in values:
            ctx.record(f"batch/{bs}/{m}/bytes", nbytes, unit="bytes",
                       note="GraphBatch.nbytes: what .to(device) copies")  # fmt: skip
            ctx.record(f"batch/{bs}/{m}/collate_us", 1e6 * seconds, unit="us", better="lower")
    for bs in BATCH_SIZES:
        for host, device in zip(out[(bs, "host")], out[(bs, "device")], strict=True):
            ctx.record(f"batch/{bs}/device_vs_host_bytes", device[1] / host[1], unit="x")
    if not ctx.cuda:
        ctx.unavailable("batch/*/to_device_us", "no CUDA device: host -> device copy not timed")
        return
    pinned = {
        (bs, m): [datasets[m].collate_fn(datasets[m].__getitems__(i)).pin_memory()
                  for i in idx[bs][:CUDA_BATCHES]]
        for bs in BATCH_SIZES for m in MODES
    }  # fmt: skip
    transfers = {key: _transfer_case(batches) for key, batches in pinned.items()}
    for case in transfers.values():
        case()  # warm-up: CUDA context and allocator
    for (bs, m), values in interleaved(transfers, ctx.repetitions("to device")).items():
        for seconds in values:
            ctx.record(f"batch/{bs}/{m}/to_device_us", 1e6 * seconds, unit="us", better="lower",
                       note="pinned batch .to('cuda', non_blocking=True).dequantize()")  # fmt: skip


def run(ctx: SuiteContext) -> None:
    o = ctx.sized_options(SIZED)
    samples, n_batches = o["samples"], o["batches"]
    if samples < max(BATCH_SIZES) or n_batches < 1:
        raise ValueError(f"quant: samples >= {max(BATCH_SIZES)} and batches >= 1 needed, "
                         f"got {samples}, {n_batches}")  # fmt: skip
    ctx.param("fields", ", ".join(f"{k} {v}" for k, v in FIELDS.items()))
    ctx.param("percentile_fit", f"p{PERCENTILES[0]}-p{PERCENTILES[1]}")
    src = ctx.workdir / "float"
    write_synthetic({"npy": src}, samples=samples, traffic=True, progress=ctx.progress)
    _stats(ctx, src)
    reports = {
        "minmax": quantize_store(src, ctx.workdir / "q-minmax", FIELDS, ranges=RANGES),
        "pct": quantize_store(src, ctx.workdir / "q-pct", FIELDS, ranges=RANGES,
                              percentiles=PERCENTILES),
    }  # fmt: skip
    _bytes(ctx, reports["minmax"])
    _errors(ctx, reports)
    _batches(ctx, reports["minmax"].path, n_batches)
    ctx.note(
        "error/<field>/<column>/... : the min/max fit; .../pct/...: the "
        f"p{PERCENTILES[0]}-p{PERCENTILES[1]} fit (int8 fields only; outside it values "
        "saturate and are counted as clipped). `length` has a fixed [0, 20] m range."
    )


SUITE = Suite(
    name="quant",
    summary="tj-data quantisation: bytes and error per feature, host vs device dequantisation",
    run=run,
    options=sized_help(SIZED),
)
