"""MemoryMonitor: the thread, history, peaks, export, and degraded parts (no CUDA, no NVML)."""

from __future__ import annotations

import csv
import itertools
import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from tj_monitor import MemoryMonitor, MemorySample, MonitorConfig
from tj_monitor.curves import SampleHistory

PNG = b"\x89PNG\r\n\x1a\n"


def _wait_for(pred, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_thread_samples_records_and_exports(tmp_path: Path) -> None:
    stream = tmp_path / "run" / "memory.jsonl"
    cfg = MonitorConfig(interval_s=0.02, jsonl_path=stream, nvml=False)
    with MemoryMonitor(cfg) as mon:
        _wait_for(lambda: mon.stats.samples >= 4)
        tid = mon.thread_id
        assert tid != threading.get_native_id()
        assert tid in {t.id for t in psutil.Process().threads()}
    st = mon.stats
    assert mon._thread is None and mon.thread_id is None  # stopped and joined
    assert st.samples >= 4 and st.errors == 0 and st.cpu_seconds > 0 and st.wall_seconds > 0
    hist = mon.history
    assert len(hist) == st.samples and all(isinstance(s, MemorySample) for s in hist)
    assert [s.time for s in hist] == sorted(s.time for s in hist)
    peak = mon.peak
    assert peak is not None and peak.value("pressure") == max(s.value("pressure") for s in hist)
    assert mon.peaks["tree_pss"] == max(s.tree.pss for s in hist)
    assert mon.peaks["sys_available"] == min(s.system.available for s in hist)

    lines = stream.read_text().splitlines()
    assert len(lines) == st.samples
    row = json.loads(lines[0])
    assert row["warn_threshold"] == mon.thresholds["warn"] and row["tree_pss"] > 0

    csv_path = mon.save(tmp_path / "curve.csv")
    rows = list(csv.DictReader(csv_path.open()))
    assert len(rows) == len(hist) and int(rows[0]["tree_pss"]) == hist[0].tree.pss
    jl = [json.loads(x) for x in mon.save(tmp_path / "curve.jsonl").read_text().splitlines()]
    assert jl[-1]["limit"] == mon.limit
    png = mon.plot(tmp_path / "curve.png")
    assert png.read_bytes()[:8] == PNG and png.stat().st_size > 10_000
    with pytest.raises(ValueError, match="unsupported format"):
        mon.save(tmp_path / "curve.parquet")


def test_history_is_bounded_and_keeps_the_whole_run() -> None:
    mon = MemoryMonitor(MonitorConfig(nvml=False))
    s = mon.measure()
    h = SampleHistory(capacity=8)
    samples = [type(s)(**{**s.__dict__, "time": float(i)}) for i in range(100)]
    for x in samples:
        h.append(x)
    kept = [x.time for x in h.snapshot()]
    assert 4 <= len(kept) <= 8 and kept[0] == 0.0 and kept[-1] >= 64
    steps = {b - a for a, b in itertools.pairwise(kept)}
    assert steps == {float(h.stride)}


def test_degraded_parts_are_notes_not_errors(tmp_path: Path) -> None:
    cfg = MonitorConfig(
        cgroup_root=tmp_path / "no-cgroup", shm_path=tmp_path / "no-shm", nvml=True, cuda=True
    )
    mon = MemoryMonitor(cfg)
    s = mon.sample()
    notes = " ".join(s.notes)
    assert s.system.cgroup is None and s.system.shm_used is None
    assert "cgroup" in notes
    assert s.nvml or "nvml:" in notes  # GPUs from NVML, or the reason they are missing
    import torch  # imported by the host: CUDA stats are read only if CUDA is initialised

    s2 = mon.measure()
    if not torch.cuda.is_initialized():
        assert s2.cuda == () and any("cuda" in n for n in s2.notes)
    assert json.loads(json.dumps(s2.to_dict()))["system"]["limit"] == s2.system.limit
    mon.stop()


def test_sampling_never_imports_torch_or_matplotlib() -> None:
    code = textwrap.dedent(
        """
        import sys, tj_monitor
        with tj_monitor.MemoryMonitor(tj_monitor.MonitorConfig(interval_s=0.01)) as m:
            m.sample()
        print(sorted(k for k in ("torch", "matplotlib", "tensorboard") if k in sys.modules))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_watched_pid_that_dies_is_counted_not_raised() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        mon = MemoryMonitor(MonitorConfig(pid=proc.pid, interval_s=0.02, nvml=False))
        with mon:
            _wait_for(lambda: mon.stats.samples >= 1)
            proc.kill()
            proc.wait()
            n = mon.stats.samples + mon.stats.errors
            _wait_for(lambda: mon.stats.samples + mon.stats.errors >= n + 2)
        assert mon.stats.errors >= 1  # sampling a vanished root is an error, logged, not raised
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_cuda_stats_and_cleanup_empty_cache() -> None:
    import torch

    x = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")
    mon = MemoryMonitor(MonitorConfig(nvml=False))
    s = mon.measure()
    assert (
        s.cuda and s.cuda[0].allocated >= 64 * 2**20 and s.cuda[0].reserved >= s.cuda[0].allocated
    )
    del x
    report = mon.run_cleanup(0)
    assert report.cuda_emptied
    assert mon.measure().cuda[0].reserved < s.cuda[0].reserved
