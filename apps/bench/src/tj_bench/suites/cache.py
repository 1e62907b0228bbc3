"""Suite ``cache``: tj-data's DiskCache and LRUCache against the ``diskcache`` library.

The measured reason behind writing DiskCache instead of depending on diskcache. Same values
(numpy arrays of each size), same byte bound (half the values fit: eviction runs), LRU eviction
in every case (diskcache: ``eviction_policy="least-recently-used"``). Each case puts every value,
then gets as many keys (80% drawn from the newer half: hits); the cases run interleaved in each
repetition. Then a stored entry's file is truncated to half (what a crash mid-write leaves after
a power cut) and the suite records what each disk cache's ``get`` returns for it.

Option ``sleep_ms`` sleeps inside every timed put and get of every case: a deliberately slower
run, for the test that checks ``--compare`` flags a regression.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tj_bench.suite import Suite, SuiteContext, parse_counts
from tj_bench.suites._cache_cases import (
    CacheLike,
    DiskcacheLRU,
    Slowed,
    close,
    truncated_outcome,
)
from tj_data import DiskCache, LRUCache

__all__ = ["SUITE", "parse_sizes", "put_get", "run"]

Maker = Callable[[Path, int], CacheLike]
CASES: dict[str, tuple[str, Maker]] = {
    "disk": ("tj-data DiskCache", lambda d, b: DiskCache(d, b)),
    "disk_nocrc": (
        "tj-data DiskCache(checksum=False)",
        lambda d, b: DiskCache(d, b, checksum=False),
    ),
    "diskcache": ("diskcache.Cache (LRU)", lambda d, b: DiskcacheLRU(d, b)),
    "lru": ("tj-data LRUCache (memory)", lambda _d, b: LRUCache(b)),
}
COMPARED = ("disk", "disk_nocrc")  # in-run ratios to diskcache's rates
HIT_SHARE = 0.8  # share of gets drawn from the newer half of the keys


def parse_sizes(text: str) -> list[int]:
    """``"64,1024"`` (KiB) -> ``[65536, 1048576]`` bytes."""
    return [kib * 1024 for kib in parse_counts(text, "sizes_kib")]


def put_get(
    cache: CacheLike, values: list[np.ndarray], rng: np.random.Generator
) -> dict[str, float]:
    """Put every value (keys 0..n-1), then n gets (``HIT_SHARE`` from the newer half): rates."""
    n = len(values)
    t0 = time.perf_counter()
    for i, v in enumerate(values):
        cache.put(i, v)
    put_s = time.perf_counter() - t0
    keys = np.where(
        rng.random(n) < HIT_SHARE, rng.integers(n // 2, n, n), rng.integers(0, n // 2, n)
    )
    t0 = time.perf_counter()
    hits = sum(cache.get(int(k)) is not None for k in keys)
    get_s = time.perf_counter() - t0
    return {"puts_per_s": n / put_s, "gets_per_s": n / get_s, "hit_rate": hits / n,
            "put_mb_per_s": sum(v.nbytes for v in values) / put_s / 1e6}  # fmt: skip


def _record(ctx: SuiteContext, name: str, r: dict[str, float]) -> None:
    ctx.record(f"{name}/puts_per_s", r["puts_per_s"], unit="puts/s", better="higher")
    ctx.record(f"{name}/put_mb_per_s", r["put_mb_per_s"], unit="MB/s", better="higher")
    ctx.record(f"{name}/gets_per_s", r["gets_per_s"], unit="gets/s", better="higher",
               note=f"{HIT_SHARE:.0%} of the keys from the newer half")  # fmt: skip
    ctx.record(f"{name}/hit_rate", r["hit_rate"], unit="fraction")


def _size(
    ctx: SuiteContext, cases: dict[str, Maker], size: int, items: int, sleep_s: float
) -> None:
    """Every case on ``items`` values of ``size`` bytes, interleaved in each repetition."""
    tag = f"{size // 1024}KiB"
    values = [np.full(size // 8, i, np.float64) for i in range(items)]
    bound = size * items // 2  # half the values fit: eviction runs
    for r in ctx.repetitions(f"put/get {tag}"):
        rates = {}
        for case, make in cases.items():
            d = ctx.workdir / f"{case}-{tag}-{r}"
            cache = make(d, bound)
            if sleep_s > 0:
                cache = Slowed(cache, sleep_s)
            try:
                rates[case] = put_get(cache, values, np.random.default_rng(r))
            finally:
                close(cache)
                shutil.rmtree(d, ignore_errors=True)
            _record(ctx, f"{case}/{tag}", rates[case])
        if "diskcache" in rates:
            for case in COMPARED:
                for what in ("puts", "gets"):
                    ratio = rates[case][f"{what}_per_s"] / rates["diskcache"][f"{what}_per_s"]
                    ctx.record(f"vs_diskcache/{case}/{tag}/{what}", ratio, unit="x", better="higher",
                               note=f"{CASES[case][0]} / diskcache rate, same run")  # fmt: skip


def _truncated(ctx: SuiteContext, cases: dict[str, Maker]) -> None:
    found = []
    for case in ("disk", "diskcache"):
        if case not in cases:
            continue
        d = ctx.workdir / f"truncated-{case}"
        cache = cases[case](d, 1 << 30)
        try:
            outcome = truncated_outcome(cache, d)
        finally:
            close(cache)
            shutil.rmtree(d, ignore_errors=True)
        name = f"truncated/{case}/safe"
        if outcome.safe is None:
            ctx.record_missing(name, unit="bool", why=outcome.text)
        else:
            ctx.record(name, float(outcome.safe), unit="bool", note=outcome.text)
        found.append(f"{CASES[case][0].split(' (')[0]}: {outcome.text}")
    ctx.note("get() of an entry truncated to half (1 = a miss or the right value, 0 = raises "
             "or returns a damaged value): " + "; ".join(found))  # fmt: skip


def run(ctx: SuiteContext) -> None:
    sizes = parse_sizes(ctx.option("sizes_kib", "64,1024"))
    items = ctx.option("items", 40 if ctx.quick else 400)
    sleep_ms = ctx.option("sleep_ms", 0.0)
    if items < 2 or sleep_ms < 0:
        raise ValueError(f"cache: items >= 2 and sleep_ms >= 0 needed, got {items}, {sleep_ms}")
    ctx.param("sizes_kib", ",".join(str(s // 1024) for s in sizes))
    ctx.param("items", items)
    ctx.param("sleep_ms", sleep_ms)
    cases = {name: make for name, (_, make) in CASES.items()}
    try:
        import diskcache

        ctx.param("diskcache", diskcache.__version__)
    except ImportError:
        del cases["diskcache"]
        ctx.unavailable("diskcache", "the diskcache library is not installed "
                        "(tj-bench's `compare` extra): tj-data's rows only")  # fmt: skip
    for size in sizes:
        _size(ctx, cases, size, items, sleep_ms / 1000)
    _truncated(ctx, cases)
    if sleep_ms > 0:
        ctx.note(f"Deliberately slowed: {sleep_ms} ms of sleep in every timed put and get.")


SUITE = Suite(
    name="cache",
    summary="tj-data DiskCache / LRUCache vs the diskcache library; a truncated entry",
    run=run,
    options={
        "sizes_kib": "value sizes in KiB, comma-separated (default 64,1024)",
        "items": "values per size; the bound holds half of them (default 400; quick 40)",
        "sleep_ms": "sleep inside every timed put and get (default 0: a deliberately slowed run)",
    },
)  # fmt: skip
