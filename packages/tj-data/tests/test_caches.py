"""LRUCache (bytes, TTL, threads), DiskCache (atomic, LRU by size, crash and corruption) and
TieredCache (L1 -> L2 -> loader, corrupt L2 refetched)."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import pickle
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tj_data import CacheError, DiskCache, LRUCache, TieredCache, nbytes_of


def arr(n: int, v: float = 0.0) -> np.ndarray:
    return np.full(n // 8, v, np.float64)  # n bytes


def test_lru_eviction_order_and_bytes() -> None:
    c: LRUCache[str, np.ndarray] = LRUCache(1000)
    c.put("a", arr(400))
    c.put("b", arr(400))
    assert c.get("a") is not None  # a is now the most recent
    c.put("c", arr(400))  # evicts b (least recently used), not a
    assert "b" not in c and "a" in c and "c" in c
    assert c.nbytes == 800 and c.keys() == ["a", "c"]
    assert c.put("huge", arr(2000)) is False  # larger than the cache: returned, not stored
    s = c.stats()
    assert (s.hits, s.misses, s.evictions, s.rejected, s.entries, s.nbytes) == (1, 0, 1, 1, 2, 800)
    assert c.get("b") is None and c.stats().misses == 1
    assert c.get_or_load("d", lambda k: arr(104)).nbytes == 104 and c.nbytes == 904
    assert nbytes_of({"x": arr(80), "t": torch.zeros(4)}) == 80 + 16 + 128


def test_lru_ttl_expiry_and_shrink() -> None:
    now = [0.0]
    c: LRUCache[str, np.ndarray] = LRUCache(10_000, ttl=5.0, timer=lambda: now[0])
    c.put("old", arr(800))
    now[0] = 3.0
    c.put("new", arr(800))
    assert c.get("old") is not None
    now[0] = 6.0  # old expired (stored at 0, ttl 5), new has 2 s left
    assert c.get("old") is None and c.get("new") is not None
    assert c.stats().expired == 1 and c.nbytes == 800
    now[0] = 9.0
    assert c.expire() == 1 and len(c) == 0
    lru: LRUCache[int, np.ndarray] = LRUCache(10_000)
    for i in range(5):
        lru.put(i, arr(1000))
    assert lru.shrink(1500) == 2000  # two least recently used entries
    assert lru.keys() == [2, 3, 4] and lru.stats().evictions == 2
    assert lru.shrink(0) == 0


def test_lru_threads_and_pickle() -> None:
    c: LRUCache[int, np.ndarray] = LRUCache(64_000)

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(2000):
            k = int(rng.integers(0, 200))
            if c.get(k) is None:
                c.put(k, arr(int(rng.integers(1, 20)) * 64))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s = c.stats()
    assert s.hits + s.misses == 8000 and s.nbytes <= 64_000
    assert s.nbytes == sum(nbytes_of(c.get(k)) for k in c)
    clone = pickle.loads(pickle.dumps(c))  # a worker's copy starts empty
    assert len(clone) == 0 and clone.max_bytes == 64_000


def test_disk_roundtrip_and_lru_by_size(tmp_path: Path) -> None:
    d = DiskCache(tmp_path / "cache", max_bytes=20_000)
    value = {
        "x": np.arange(12, dtype=np.float32).reshape(3, 4),
        "t": torch.ones(2),
        "n": 3,
        "s": "a",
    }
    assert d.put(("shard", 1), value)
    got = d.get(("shard", 1))
    assert np.array_equal(got["x"], value["x"]) and torch.equal(got["t"], value["t"])
    assert (got["n"], got["s"]) == (3, "a") and d.get("missing") is None
    for i in range(4):
        d.put(i, arr(4000, i))
        time.sleep(0.01)  # distinct mtimes
    assert d.get(0) is not None  # touch 0: now the most recently used
    d.put(9, arr(8000))  # over 20 kB: evicts the least recently used (1, 2...) down to 18 kB
    assert d.get(0) is not None and d.get(9) is not None and d.get(1) is None
    assert d.nbytes <= 18_000 and d.stats().evictions >= 1
    assert d.put("big", arr(30_000)) is False and d.stats().rejected == 1
    with pytest.raises(TypeError, match="cannot cache a object"):
        d.put("obj", object())


def test_disk_not_writable(tmp_path: Path) -> None:
    f = tmp_path / "a-file"
    f.write_text("x")
    with pytest.raises(CacheError, match="a-file/cache: cache directory is not writable"):
        DiskCache(f / "cache", max_bytes=1000)


def test_disk_corrupt_entry_dropped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = DiskCache(tmp_path, max_bytes=1 << 20)
    d.put("a", arr(4000, 1.0))
    d.put("b", arr(4000, 2.0))
    path_a, path_b = d._path("a"), d._path("b")
    os.truncate(path_a, path_a.stat().st_size - 100)  # a crash left a short file
    data = bytearray(path_b.read_bytes())
    data[-200] ^= 0xFF  # a flipped byte, same size
    path_b.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        assert d.get("a") is None and d.get("b") is None
    assert "corrupt cache entry" in caplog.text and "truncated" in caplog.text
    assert "crc32 mismatch" in caplog.text
    assert not path_a.exists() and not path_b.exists() and d.stats().corrupt == 2


def _write_then_large(path: str, ready: Any) -> None:
    d = DiskCache(path, max_bytes=1 << 31)
    d.put("small", np.arange(10))
    ready.set()
    d.put("large", np.ones(200_000_000 // 8))  # ~200 MB: killed while writing


def test_disk_survives_kill_mid_write(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")  # the test process has everything imported: starts at once
    ready = ctx.Event()
    child = ctx.Process(target=_write_then_large, args=(str(tmp_path), ready))
    child.start()
    assert ready.wait(30)
    deadline = time.monotonic() + 30
    while not any(p.name.startswith(".tmp-") for p in tmp_path.rglob("*")):
        assert time.monotonic() < deadline and child.is_alive(), "no temp file seen"
        time.sleep(0.001)
    os.kill(child.pid, signal.SIGKILL)
    child.join()
    assert child.exitcode == -signal.SIGKILL
    assert any(p.name.startswith(".tmp-") for p in tmp_path.rglob("*"))
    d = DiskCache(tmp_path, max_bytes=1 << 31)  # reopening removes the dead writer's temp file
    assert not any(p.name.startswith(".tmp-") for p in tmp_path.rglob("*"))
    assert np.array_equal(d.get("small"), np.arange(10))
    assert d.get("large") is None  # never half a value
    d.put("large", np.ones(10))
    assert d.get("large").sum() == 10


def _hammer(path: str, w: int) -> None:
    d = DiskCache(path, max_bytes=100_000)
    for i in range(80):
        d.put((w, i), np.full(1000, w * 1000 + i, np.float64))
        for j in (i, i - 1):
            other = d.get((1 - w, j))
            if other is not None and other[0] != (1 - w) * 1000 + j:
                raise AssertionError(f"wrong value for {(1 - w, j)}")


def test_disk_shared_by_processes(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_hammer, args=(str(tmp_path), w)) for w in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    d = DiskCache(tmp_path, max_bytes=100_000)
    assert d.nbytes <= 100_000 + 2 * 8_200  # each process may overshoot by its last entry
    assert len(d) >= 5 and not any(p.name.startswith(".tmp-") for p in tmp_path.rglob("*"))
    for e in d._entries():  # every surviving entry decodes to its own value
        assert d.get(_key_of(e.path)) is not None


def _key_of(path: str) -> Any:
    import json

    from tj_data._codec import _PREFIX

    data = Path(path).read_bytes()
    hlen = _PREFIX.unpack_from(data, 0)[3]
    key = json.loads(data[_PREFIX.size : _PREFIX.size + hlen])["key"]
    return tuple(key)


def test_tiered_cache(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    loads: list[int] = []

    def loader(k: int) -> np.ndarray:
        loads.append(k)
        return arr(1000, float(k))

    l2 = DiskCache(tmp_path, max_bytes=1 << 20)
    t = TieredCache(LRUCache(2500), l2, loader)
    assert t.get(1)[0] == 1.0 and t.get(1)[0] == 1.0 and loads == [1]  # L1 hit
    for k in (2, 3):
        t.get(k)
    assert 1 not in t.l1 and t.get(1)[0] == 1.0 and loads == [1, 2, 3]  # from L2, promoted
    assert 1 in t.l1
    t.l1.clear()
    p = l2._path(2)
    os.truncate(p, p.stat().st_size // 2)
    with caplog.at_level(logging.WARNING):
        assert t.get(2)[0] == 2.0  # corrupt L2 entry dropped and refetched from the loader
    assert loads == [1, 2, 3, 2] and "corrupt cache entry" in caplog.text
    s = t.stats()
    assert s.loads == 4 and s.l2 is not None and s.l2.corrupt == 1
    assert t.shrink(1500) >= 1000 and t.l1.nbytes <= 1000
    t.invalidate(3)
    assert 3 not in t.l1 and 3 not in l2
