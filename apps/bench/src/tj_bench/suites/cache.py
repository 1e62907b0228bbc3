"""Suite ``cache``: tj-data's DiskCache and LRUCache against the ``diskcache`` library.

The measured reason behind writing DiskCache instead of depending on diskcache. Same values
(numpy arrays of each size), same byte bound (half the values fit: eviction runs), LRU eviction
in every case (diskcache: ``eviction_policy="least-recently-used"``). Each case puts every value,
then gets as many keys (80% drawn from the newer half: hits); the cases run interleaved in each
repetition. Then a stored entry's file is truncated to half (what a crash mid-write leaves after
a power cut) and the suite records what each disk cache's ``get`` returns for it.

Option ``sleep_ms`` sleeps inside every timed put and get of every case: a deliberately slower
run, for the test that checks ``--compare`` flags a regression.

The cases share one ``put`` / ``get`` interface: ``DiskcacheLRU`` puts the ``diskcache`` library
behind tj-data's (LRU eviction, the same byte bound), ``Slowed`` makes any case sleep inside every
operation; ``truncated_outcome`` cuts a stored entry's file in half and says what ``get`` returns.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tj_bench.measure import timed
from tj_bench.suite import SizedOptions, Suite, SuiteContext, parse_counts, sized_help
from tj_data import DiskCache, LRUCache

__all__ = ["SUITE", "CacheLike", "DiskcacheLRU", "Outcome", "Slowed", "close", "parse_sizes",
           "put_get", "run", "truncated_outcome"]  # fmt: skip

# diskcache's own SQLite files (index, WAL): never the value file the probe looks for
_SQLITE_PREFIX = "cache.db"
_PROBE = np.arange(100_000, dtype=np.float64)  # 800 KB: a file of its own in either cache


class CacheLike(Protocol):
    def put(self, key: Any, value: Any) -> Any: ...
    def get(self, key: Any) -> Any: ...


class DiskcacheLRU:
    """``diskcache.Cache`` with LRU eviction (which writes its SQLite index on every read)."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        import diskcache

        self.cache = diskcache.Cache(
            str(directory), size_limit=max_bytes, eviction_policy="least-recently-used"
        )

    def put(self, key: Any, value: Any) -> None:
        self.cache.set(key, value)

    def get(self, key: Any) -> Any:
        return self.cache.get(key)

    def close(self) -> None:
        self.cache.close()


class Slowed:
    """``inner`` with a ``seconds`` sleep inside every ``put`` and ``get``."""

    def __init__(self, inner: CacheLike, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"Slowed: seconds must be >= 0, got {seconds}")
        self.inner, self.seconds = inner, seconds

    def put(self, key: Any, value: Any) -> Any:
        time.sleep(self.seconds)
        return self.inner.put(key, value)

    def get(self, key: Any) -> Any:
        time.sleep(self.seconds)
        return self.inner.get(key)

    def close(self) -> None:
        close(self.inner)


def close(cache: object) -> None:
    """Close a case that holds open files (diskcache's SQLite connection); others: nothing."""
    fn = getattr(cache, "close", None)
    if callable(fn):
        fn()


@dataclass(frozen=True)
class Outcome:
    """What ``get`` did with a truncated entry; ``safe``: no exception, no wrong value."""

    text: str
    safe: bool | None


def _files(root: Path) -> dict[Path, int]:
    return {p: p.stat().st_size for p in root.rglob("*") if p.is_file()}


def truncated_outcome(cache: CacheLike, directory: Path) -> Outcome:
    """Store one value in an empty cache at ``directory``, truncate the file it went to, get it.

    ``safe`` is True when ``get`` misses or returns the right value, False when it raises or
    returns a damaged value, None when the value went into no file of its own.
    """
    before = _files(directory)
    cache.put("k", _PROBE)
    new = {p: s for p, s in _files(directory).items()
           if p not in before and not p.name.startswith(_SQLITE_PREFIX)}  # fmt: skip
    if not new:
        return Outcome("value stored inside SQLite (not a file)", None)
    path = max(new, key=new.__getitem__)  # the value's file (the largest new one)
    os.truncate(path, new[path] // 2)
    try:
        got = cache.get("k")
    except Exception as exc:
        return Outcome(f"raises {type(exc).__name__}", False)
    if got is None:
        return Outcome("miss (entry dropped, refetched by the caller)", True)
    if isinstance(got, np.ndarray) and np.array_equal(got, _PROBE):
        return Outcome("the right value", True)
    return Outcome(f"a damaged value ({type(got).__name__})", False)


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
SIZED: SizedOptions = {
    "sizes_kib": ("64,1024", "64,1024", "value sizes in KiB, comma-separated"),
    "items": (400, 40, "values per size; the bound holds half of them"),
    "sleep_ms": (0.0, 0.0, "sleep inside every timed put and get (a deliberately slowed run)"),
}
HIT_SHARE = 0.8  # share of gets drawn from the newer half of the keys


def parse_sizes(text: str) -> list[int]:
    """``"64,1024"`` (KiB) -> ``[65536, 1048576]`` bytes."""
    return [kib * 1024 for kib in parse_counts(text, "sizes_kib")]


def put_get(
    cache: CacheLike, values: list[np.ndarray], rng: np.random.Generator
) -> dict[str, float]:
    """Put every value (keys 0..n-1), then n gets (``HIT_SHARE`` from the newer half): rates."""
    n = len(values)
    _, put_s = timed(lambda: [cache.put(i, v) for i, v in enumerate(values)])
    keys = np.where(
        rng.random(n) < HIT_SHARE, rng.integers(n // 2, n, n), rng.integers(0, n // 2, n)
    )
    hits, get_s = timed(lambda: sum(cache.get(int(k)) is not None for k in keys))
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
    o = ctx.sized_options(SIZED)
    sizes, items, sleep_ms = parse_sizes(o["sizes_kib"]), o["items"], o["sleep_ms"]
    if items < 2 or sleep_ms < 0:
        raise ValueError(f"cache: items >= 2 and sleep_ms >= 0 needed, got {items}, {sleep_ms}")
    ctx.param("sizes_kib", ",".join(str(s // 1024) for s in sizes))  # as parsed
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
    options=sized_help(SIZED),
)
