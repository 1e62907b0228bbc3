"""PeakPssSampler on a real process tree: the peak sees a child's memory that is gone by exit."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tj_monitor import PeakPssSampler, shm_usage, tree_memory

MiB = 2**20


def _wait_for(cond, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_peak_keeps_the_highest_tree_pss_after_the_memory_is_freed(worker_tree) -> None:
    root = worker_tree.root.pid
    before = tree_memory(root)
    base = before.pss
    with PeakPssSampler(interval=0.02, pid=root) as peak:
        assert worker_tree.send("alloc a 200") == "ok"
        _wait_for(lambda: peak.peak_pss >= base + 180 * MiB)
        assert worker_tree.send("free a") == "ok"
        _wait_for(lambda: peak.last is not None and peak.last.pss < base + 100 * MiB)
    assert peak.peak_pss >= base + 180 * MiB
    assert peak.peak_pss < base + 260 * MiB  # PSS of the tree, not RSS of each process
    assert peak.peak_processes == 2 and peak.samples >= 3
    assert before.uss + 180 * MiB <= peak.peak_uss < before.uss + 260 * MiB  # private: the child's


def test_exit_takes_a_final_reading_and_a_vanished_root_stops_the_thread() -> None:
    with PeakPssSampler(interval=60.0) as peak:  # a block shorter than one interval
        pass
    assert peak.samples >= 1 and peak.peak_pss > 0  # exit read it at least once
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    sampler = PeakPssSampler(interval=0.01, pid=proc.pid).start()
    _wait_for(lambda: sampler.samples >= 1)
    proc.kill()
    proc.wait()
    sampler.stop()  # no exception: the root's exit ends polling
    assert sampler.peak_pss > 0
    with pytest.raises(ValueError, match="interval"):
        PeakPssSampler(interval=0)


def test_shm_usage_of_a_directory_and_of_a_missing_path(tmp_path) -> None:
    usage = shm_usage(tmp_path)
    assert usage is not None and usage.total > 0 and 0 <= usage.used <= usage.total
    total, used = usage  # a named tuple
    assert (total, used) == (usage.total, usage.used)
    assert shm_usage(tmp_path / "missing") is None
