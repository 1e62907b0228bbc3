"""StepProfiler on the CPU with the real torch.profiler; OomSnapshot (GPU part skipped on CPU)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch

from tj_monitor import OomSnapshot, ProfilerConfig, StepProfiler


def test_step_profiler_writes_chrome_trace_and_top_table(tmp_path: Path) -> None:
    a = torch.randn(64, 64)
    cfg = ProfilerConfig(wait=1, warmup=1, active=2, repeat=1, row_limit=5)
    with StepProfiler(tmp_path / "prof", cfg) as prof:
        for _ in range(6):
            (a @ a).relu_()
            prof.step()
    assert [p.name for p in prof.written] == ["trace-0.json", "top-0.txt"]
    trace = json.loads((tmp_path / "prof" / "trace-0.json").read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "aten::mm" in names or "aten::matmul" in names
    table = (tmp_path / "prof" / "top-0.txt").read_text()
    assert "Self CPU" in table and ("aten::mm" in table or "aten::matmul" in table)
    with pytest.raises(RuntimeError, match="outside"):
        prof.step()
    with pytest.raises(ValueError, match="active"):
        ProfilerConfig(active=0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_oom_snapshot_without_cuda_is_inert(tmp_path: Path) -> None:
    with pytest.raises(torch.OutOfMemoryError), OomSnapshot(tmp_path / "snap") as snap:
        assert not snap.enabled and snap.dump() is None
        raise torch.OutOfMemoryError("simulated by the caller")
    assert snap.written == [] and not (tmp_path / "snap").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_oom_snapshot_on_real_cuda_oom(tmp_path: Path) -> None:
    free, _total = torch.cuda.mem_get_info()
    with pytest.raises(torch.OutOfMemoryError), OomSnapshot(tmp_path) as snap:
        keep = torch.empty(1024, device="cuda")
        torch.empty(free * 4, dtype=torch.uint8, device="cuda")
    del keep
    assert len(snap.written) == 1 and snap.written[0].exists()
    data = pickle.loads(snap.written[0].read_bytes())
    assert "segments" in data and "device_traces" in data
