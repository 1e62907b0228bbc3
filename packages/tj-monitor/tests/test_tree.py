"""Process-tree PSS/USS/RSS on real processes (no mocks of psutil)."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import time

import psutil
import pytest

from tj_monitor import TreeSampler, measure_processes, tree_memory

MiB = 2**20


def _settled_pss(pid: int) -> int:
    """Median of three readings (the kernel's page accounting moves a little between reads)."""
    return sorted(tree_memory(pid).pss for _ in range(3))[1]


def test_child_allocation_shows_in_tree_pss_and_leaves_with_it(worker_tree) -> None:
    root = worker_tree.root.pid
    before = tree_memory(root)
    assert before.processes == 2 and before.pids[0] == root  # root + its worker
    base = _settled_pss(root)
    assert worker_tree.send("alloc a 300") == "ok"
    grown = _settled_pss(root)
    delta = grown - base
    assert abs(delta - 300 * MiB) <= 0.10 * 300 * MiB, f"PSS delta {delta / MiB:.1f} MiB"
    assert worker_tree.send("exit") == "worker-exited"
    after = tree_memory(root)
    assert after.processes == 1
    assert after.pss < grown - 300 * MiB, f"PSS after exit {after.pss / MiB:.0f} MiB"


def test_forked_reader_of_shared_mmap_has_tiny_uss_but_full_rss(tmp_path) -> None:
    size = 200 * MiB
    path = tmp_path / "shared.bin"
    with path.open("wb") as f:
        f.truncate(size)
    with path.open("r+b") as f:
        mm = mmap.mmap(f.fileno(), size, flags=mmap.MAP_SHARED)
    page = mmap.PAGESIZE
    for off in range(0, size, page):
        mm[off] = 1  # populate the page cache through the shared mapping
    r, w = os.pipe()
    r2, w2 = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: only read the mapping, then wait
        try:
            os.close(r)
            os.close(w2)
            total = 0
            for off in range(0, size, page):
                total += mm[off]
            os.write(w, b"1" if total == size // page else b"0")
            os.read(r2, 1)
        finally:
            os._exit(0)
    try:
        os.close(w)
        os.close(r2)
        assert os.read(r, 1) == b"1"
        tree = tree_memory(per_process=True)
        child = next(p for p in tree.per_process if p.pid == pid)
        assert child.rss >= size * 0.95, f"child RSS {child.rss / MiB:.0f} MiB"
        assert child.uss < 40 * MiB, f"child USS {child.uss / MiB:.0f} MiB"
        # PSS splits the shared pages: the tree pays for them once, RSS counts them twice
        assert tree.rss - tree.pss >= size * 0.85
    finally:
        os.write(w2, b"x")
        os.waitpid(pid, 0)
        os.close(r)
        os.close(w2)
        mm.close()


def test_zombie_and_vanished_children_are_skipped_not_raised() -> None:
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while psutil.Process(zombie.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    gone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    handle = psutil.Process(gone.pid)
    gone.kill()
    gone.wait()  # reaped: the pid no longer exists
    try:
        tree = tree_memory()
        assert tree.skipped >= 1 and zombie.pid not in tree.pids
        me = psutil.Process()
        direct = measure_processes(me.pid, [me, handle])
        assert direct.processes == 1 and direct.skipped == 1
        assert direct.pss > 0
    finally:
        zombie.wait()


def test_missing_root_raises_no_such_process() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    with pytest.raises(psutil.NoSuchProcess):
        tree_memory(proc.pid)


def test_sampler_carries_pss_within_its_cpu_budget_and_estimates_growth(worker_tree) -> None:
    # Both clocks are injected: the wall clock says when a read happens, the CPU clock what a
    # full PSS read costs (1 ms here, whatever this machine's real cost), so the budget's
    # arithmetic is fixed: 1 ms at 0.1 % of a core -> the next full read is due 1 s later.
    now = [0.0]
    cpu = [0.0]

    def cpu_clock() -> float:
        cpu[0] += 0.001  # read before and after a full read: it costs 1 ms
        return cpu[0]

    root = worker_tree.root.pid
    sampler = TreeSampler(
        root, max_cpu_fraction=0.001, clock=lambda: now[0], cpu_clock=cpu_clock
    )
    first = sampler.read()
    assert first.pss_age_s == 0.0 and first.rss_at_pss is None and sampler.full_reads == 1
    assert sampler.full_cpu_s == pytest.approx(0.001)
    assert worker_tree.send("alloc a 100") == "ok"
    now[0] = 0.5  # inside the budget window
    carried = sampler.read()
    assert sampler.full_reads == 1 and carried.pss_age_s == 0.5
    assert carried.pss == first.pss and carried.rss_at_pss == first.rss
    assert abs(carried.pss_estimate - first.pss - 100 * MiB) < 10 * MiB
    now[0] = 0.99  # still inside: RSS only (the CPU clock is not even read)
    assert sampler.read().pss_age_s == 0.99 and sampler.full_reads == 1
    now[0] = 1.5  # budget window over: PSS is read again
    fresh = sampler.read()
    assert sampler.full_reads == 2 and fresh.pss_age_s == 0.0
    assert abs(fresh.pss - first.pss - 100 * MiB) < 10 * MiB
    assert sampler.full_cpu_s == pytest.approx(0.002)
    now[0] = 2.4  # the window restarts at the last full read (1.5 + 1 s)
    assert sampler.read().pss_age_s == pytest.approx(0.9) and sampler.full_reads == 2
    with pytest.raises(ValueError, match="max_cpu_fraction"):
        TreeSampler(max_cpu_fraction=0)
