"""The dist suite: its quick run records checkpoint and accumulation figures; helpers."""

from __future__ import annotations

import math

import pytest
import torch

from tj_bench.suite import parse_counts
from tj_bench.suites._dist_accumulate import VARIANTS
from tj_bench.suites.dist import accumulation_ratios, checkpoint_round, make_state


def _positive(r, name: str, unit: str) -> float:
    f = r.figure(name)
    assert f.unit == unit, name
    assert len(f.values) == 1 and math.isfinite(f.median) and f.median > 0, name
    return f.median


def test_quick_run_checkpoints(quick) -> None:
    r = quick.suite("dist")
    assert r.params["sizes_mib"] == "8"
    base = "checkpoint/8MiB"
    t = {
        k: _positive(r, f"{base}/{k}", "s")
        for k in ("save/plain", "save/fsync", "save/atomic", "load/plain", "load/verified")
    }
    assert _positive(r, f"{base}/atomic_vs_fsync_save", "x") == pytest.approx(
        t["save/atomic"] / t["save/fsync"]
    )
    assert _positive(r, f"{base}/verified_vs_plain_load", "x") == pytest.approx(
        t["load/verified"] / t["load/plain"]
    )


def test_quick_run_accumulation(quick) -> None:
    r = quick.suite("dist")
    assert r.params["gloo_ranks"] == 2 and r.params["accumulation_steps"] == 4
    hidden = r.params["hidden"]
    assert (
        r.params["parameters"] == (256 * hidden + hidden) + (hidden * hidden + hidden) + hidden + 1
    )
    t = {v: _positive(r, f"accumulate/gloo/{v}", "s/step") for v in VARIANTS}
    ratios = accumulation_ratios(t["no_ddp"], t["no_sync"], t["sync_each"])
    for name, value in ratios.items():
        assert _positive(r, f"accumulate/gloo/{name}", "x") == pytest.approx(value)
    if torch.cuda.is_available():
        assert r.params["nccl_ranks"] == min(2, torch.cuda.device_count())
        for v in VARIANTS:
            _positive(r, f"accumulate/nccl/{v}", "s/step")
    else:
        assert "no CUDA device" in r.unavailable["nccl"]
        assert not any(f.name.startswith("accumulate/nccl") for f in r.figures)


def test_parse_sizes() -> None:  # the sizes_mib option
    assert parse_counts("64, 256", "sizes_mib") == [64, 256]
    for bad in ("", "0", "64,-1", "64,64"):
        with pytest.raises(ValueError, match="sizes_mib"):
            parse_counts(bad, "sizes_mib")


def test_accumulation_ratios() -> None:
    assert accumulation_ratios(1.0, 2.0, 3.0) == {"no_sync_speedup": 1.5, "ddp_overhead": 2.0}
    assert all(math.isnan(x) for x in accumulation_ratios(0.0, 0.0, 1.0).values())


def test_checkpoint_round_times_every_variant_and_cleans_up(tmp_path) -> None:
    state = make_state(1)
    assert sum(v.numel() * 4 for k, v in state.items() if k != "step") == 2**20
    for rep in (0, 1):  # both orders
        t = checkpoint_round(state, tmp_path, rep)
        assert set(t) == {"save/plain", "save/fsync", "save/atomic", "load/plain", "load/verified"}
        assert all(s > 0 for s in t.values())
    assert list(tmp_path.iterdir()) == []
