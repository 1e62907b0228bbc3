"""tj-data's DiskCache against the `diskcache` library, plus LRUCache overhead (issue 4: the
measured reason behind writing DiskCache instead of depending on diskcache).

    uv run python packages/tj-data/benchmarks/bench_cache.py --out bench_cache.json

Same values (numpy arrays of --sizes bytes), same byte bound, LRU eviction in both (diskcache:
eviction_policy="least-recently-used", which writes its SQLite index on every read). Puts then
gets (80% hits), interleaved, median of --repeats runs, in one process; then a truncated entry
(what a crash mid-write leaves after a power cut): what each cache returns for it.
diskcache is a dev-only dependency of the workspace; without it only tj-data's rows are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _bench_common import machine

from tj_data import DiskCache, LRUCache


class DC:
    """diskcache.Cache behind the same put/get interface."""

    def __init__(self, d: Path, max_bytes: int) -> None:
        import diskcache

        self.c = diskcache.Cache(
            str(d), size_limit=max_bytes, eviction_policy="least-recently-used"
        )

    def put(self, k: Any, v: Any) -> None:
        self.c.set(k, v)

    def get(self, k: Any) -> Any:
        return self.c.get(k)

    def path_of(self, k: Any) -> Path | None:
        row = self.c._sql("SELECT filename FROM Cache WHERE key = ?", (k,)).fetchone()
        return Path(self.c.directory) / row[0] if row and row[0] else None


def run(cache: Any, values: list[np.ndarray], rng: np.random.Generator) -> dict[str, float]:
    n = len(values)
    t0 = time.perf_counter()
    for i, v in enumerate(values):
        cache.put(i, v)
    put_s = time.perf_counter() - t0
    keys = np.where(rng.random(n) < 0.8, rng.integers(n // 2, n, n), rng.integers(0, n // 2, n))
    t0 = time.perf_counter()
    hits = sum(cache.get(int(k)) is not None for k in keys)
    get_s = time.perf_counter() - t0
    return {"put_per_s": n / put_s, "get_per_s": n / get_s, "hit_rate": hits / n,
            "mb_per_s_put": sum(v.nbytes for v in values) / put_s / 1e6}  # fmt: skip


def truncated(make: Any, root: Path) -> str:
    c = make(root)
    c.put("k", np.arange(100_000, dtype=np.float64))
    path = c._path("k") if isinstance(c, DiskCache) else c.path_of("k")
    if path is None:
        return "value stored inside SQLite (not a file)"
    os.truncate(path, path.stat().st_size // 2)
    try:
        got = c.get("k")
    except Exception as exc:
        return f"raises {type(exc).__name__}"
    if got is None:
        return "miss (entry dropped, refetched by the caller)"
    ok = isinstance(got, np.ndarray) and np.array_equal(got, np.arange(100_000))
    return "the right value" if ok else f"a damaged value ({type(got).__name__})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[64 << 10, 1 << 20])
    ap.add_argument("--items", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=Path("bench_cache.json"))
    args = ap.parse_args()
    try:
        import diskcache  # noqa: F401

        have_dc = True
    except ImportError:
        have_dc = False
    root = Path(tempfile.mkdtemp(prefix="tjdata-cache-", dir=args.dir))
    result: dict[str, Any] = {"machine": machine(), "rows": {}}
    try:
        for size in args.sizes:
            values = [np.full(size // 8, i, np.float64) for i in range(args.items)]
            bound = size * args.items // 2  # half the values fit: eviction runs
            makers = {
                "tj-data DiskCache": lambda d, b=bound: DiskCache(d, b),
                "tj-data DiskCache(checksum=False)": lambda d, b=bound: DiskCache(
                    d, b, checksum=False
                ),
            }
            if have_dc:
                makers["diskcache.Cache (LRU)"] = lambda d, b=bound: DC(d, b)
            makers["tj-data LRUCache (memory)"] = lambda d, b=bound: LRUCache(b)
            runs: dict[str, list[dict[str, float]]] = {k: [] for k in makers}
            for r in range(args.repeats):
                for name, make in makers.items():  # interleaved
                    d = root / f"{name[:6]}-{size}-{r}"
                    runs[name].append(run(make(d), values, np.random.default_rng(r)))
                    shutil.rmtree(d, ignore_errors=True)
            for name, rs in runs.items():
                result["rows"][f"{name}, {size // 1024} KiB"] = {
                    k: float(np.median([x[k] for x in rs])) for k in rs[0]
                }
        result["truncated"] = {
            "tj-data DiskCache": truncated(lambda d: DiskCache(d, 1 << 30), root / "t1")
        }
        if have_dc:
            result["truncated"]["diskcache.Cache"] = truncated(
                lambda d: DC(d, 1 << 30), root / "t2"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"\nMachine: {result['machine']}\n")
    print(
        "| cache, value size | puts/s | put MB/s | gets/s (80% hits) | hit rate |\n|---|---:|---:|---:|---:|"
    )
    for name, v in result["rows"].items():
        print(
            f"| {name} | {v['put_per_s']:,.0f} | {v['mb_per_s_put']:,.0f} | {v['get_per_s']:,.0f} | {v['hit_rate']:.2f} |"
        )
    print("\n| cache | get() of an entry truncated to half |\n|---|---|")
    for name, v in result["truncated"].items():
        print(f"| {name} | {v} |")


if __name__ == "__main__":
    main()
