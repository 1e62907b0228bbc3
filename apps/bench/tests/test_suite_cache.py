"""The cache suite: its quick run records every case's rates consistently and tj-data's DiskCache
turns a truncated entry into a miss; its helpers (sizes, put/get, the slowing wrapper, the
truncation probe) do what the suite relies on."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tj_bench import SuiteContext
from tj_bench.suites import cache as cache_suite
from tj_bench.suites.cache import (
    CASES,
    COMPARED,
    SUITE,
    Slowed,
    parse_sizes,
    put_get,
    truncated_outcome,
)

SIZES = ("64KiB", "1024KiB")


def test_rates_of_every_case(quick, values) -> None:
    r = quick.suite("cache")
    assert r.params["sleep_ms"] == 0.0 and r.params["sizes_kib"] == "64,1024"
    cases = [c for c in CASES if c != "diskcache" or "diskcache" not in r.unavailable]
    for tag, size in zip(SIZES, (64 << 10, 1 << 20), strict=True):
        for case in cases:
            name = f"{case}/{tag}"
            puts, mb = values(r, f"{name}/puts_per_s"), values(r, f"{name}/put_mb_per_s")
            assert all(p > 0 for p in puts) and values(r, f"{name}/gets_per_s")[0] > 0
            assert mb == pytest.approx([p * size / 1e6 for p in puts])
            assert all(0 <= h <= 1 for h in values(r, f"{name}/hit_rate"))
        if "diskcache" in cases:
            for case in COMPARED:
                for what in ("puts", "gets"):
                    ratio = values(r, f"vs_diskcache/{case}/{tag}/{what}")
                    ours = values(r, f"{case}/{tag}/{what}_per_s")
                    theirs = values(r, f"diskcache/{tag}/{what}_per_s")
                    assert ratio == pytest.approx(
                        [a / b for a, b in zip(ours, theirs, strict=True)]
                    )


def test_truncated_entry_is_a_miss_in_diskcache_of_tj_data(quick, values) -> None:
    r = quick.suite("cache")
    assert values(r, "truncated/disk/safe") == [1.0]
    assert any("truncated" in n and "DiskCache: miss" in n for n in r.notes)
    if "diskcache" not in r.unavailable:
        assert r.figure("truncated/diskcache/safe").values  # measured or NaN with the reason


def test_parse_sizes() -> None:
    assert parse_sizes("64,1024") == [64 << 10, 1 << 20]
    assert parse_sizes(" 4 ") == [4096]
    for bad in ("", "a,b", "0", "-1"):
        with pytest.raises(ValueError, match="sizes_kib"):
            parse_sizes(bad)


class _Dict:
    """An unbounded cache, counting its calls."""

    def __init__(self) -> None:
        self.d: dict[Any, Any] = {}
        self.calls = 0

    def put(self, key: Any, value: Any) -> None:
        self.calls += 1
        self.d[key] = value

    def get(self, key: Any) -> Any:
        self.calls += 1
        return self.d.get(key)


def test_put_get_counts() -> None:
    cache, values = _Dict(), [np.zeros(4) for _ in range(10)]
    r = put_get(cache, values, np.random.default_rng(0))
    assert cache.calls == 20 and sorted(cache.d) == list(range(10))
    assert r["hit_rate"] == 1.0 and r["put_mb_per_s"] == pytest.approx(r["puts_per_s"] * 32 / 1e6)


def test_slowed_sleeps_in_every_operation(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(cache_suite.time, "sleep", slept.append)
    inner = _Dict()
    put_get(Slowed(inner, 0.25), [np.zeros(2)] * 6, np.random.default_rng(0))
    assert slept == [0.25] * 12 and inner.calls == 12
    with pytest.raises(ValueError):
        Slowed(inner, -1.0)


class _PickleFiles:
    """A file-per-entry cache that unpickles what it finds (as diskcache does)."""

    def __init__(self, d: Path, *, swallow: bool) -> None:
        self.d, self.swallow = d, swallow
        d.mkdir(parents=True, exist_ok=True)

    def put(self, key: Any, value: Any) -> None:
        (self.d / f"{key}.val").write_bytes(pickle.dumps(value))

    def get(self, key: Any) -> Any:
        try:
            return pickle.loads((self.d / f"{key}.val").read_bytes())
        except Exception:
            if self.swallow:
                return None
            raise


class _InMemory(_Dict):
    def __init__(self, d: Path) -> None:
        super().__init__()
        d.mkdir(parents=True, exist_ok=True)


def test_truncated_outcome(tmp_path: Path) -> None:
    raised = truncated_outcome(_PickleFiles(tmp_path / "a", swallow=False), tmp_path / "a")
    assert raised.safe is False and raised.text.startswith("raises")
    missed = truncated_outcome(_PickleFiles(tmp_path / "b", swallow=True), tmp_path / "b")
    assert missed.safe is True and missed.text.startswith("miss")
    nofile = truncated_outcome(_InMemory(tmp_path / "c"), tmp_path / "c")
    assert nofile.safe is None


def test_without_diskcache_only_tj_data_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "diskcache", None)  # `import diskcache` raises ImportError
    ctx = SuiteContext(suite="cache", quick=True, runs=1, workdir=tmp_path, out_dir=tmp_path,
                       options={"sizes_kib": "4", "items": "4"})  # fmt: skip
    SUITE.run(ctx)
    r = ctx.result
    assert "diskcache" in r.unavailable
    names = {f.name for f in r.figures}
    assert "disk/4KiB/puts_per_s" in names and "lru/4KiB/gets_per_s" in names
    assert not any("diskcache" in n for n in names)
    assert r.figure("truncated/disk/safe").values == [1.0]
