"""Container-aware memory limit on cgroup fixture trees, and process-tree PSS of real processes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tj_data import PeakPssSampler, cgroup_memory_limit, default_budget, memory_limit, tree_memory

GiB = 1 << 30


def _v2(root: Path, leaf_limit: str, parent_limit: str) -> Path:
    (root / "cgroup.controllers").write_text("memory cpu\n")
    leaf = root / "user.slice" / "job"
    leaf.mkdir(parents=True)
    (root / "user.slice" / "memory.max").write_text(parent_limit + "\n")
    (leaf / "memory.max").write_text(leaf_limit + "\n")
    proc = root / "proc-cgroup"
    proc.write_text("0::/user.slice/job\n")
    return proc


def test_cgroup_v2_tightest_ancestor(tmp_path: Path) -> None:
    proc = _v2(tmp_path, "max", str(3 * GiB))
    assert cgroup_memory_limit(cgroup_root=tmp_path, proc_cgroup=proc) == 3 * GiB
    assert memory_limit(cgroup_root=tmp_path, proc_cgroup=proc, physical=16 * GiB) == 3 * GiB
    assert memory_limit(cgroup_root=tmp_path, proc_cgroup=proc, physical=2 * GiB) == 2 * GiB
    (tmp_path / "user.slice" / "job" / "memory.max").write_text(f"{GiB}\n")
    assert cgroup_memory_limit(cgroup_root=tmp_path, proc_cgroup=proc) == GiB


def test_cgroup_v2_unlimited_garbage_and_namespace(tmp_path: Path) -> None:
    proc = _v2(tmp_path, "max", "max")
    assert cgroup_memory_limit(cgroup_root=tmp_path, proc_cgroup=proc) is None
    (tmp_path / "user.slice" / "memory.max").write_text("lots\n")  # garbage: no limit
    assert cgroup_memory_limit(cgroup_root=tmp_path, proc_cgroup=proc) is None
    # under a cgroup namespace the path does not exist below the root: the root is the cgroup
    (tmp_path / "memory.max").write_text(f"{5 * GiB}\n")
    proc.write_text("0::/elsewhere/unknown\n")
    assert cgroup_memory_limit(cgroup_root=tmp_path, proc_cgroup=proc) == 5 * GiB


def test_cgroup_v1_and_none(tmp_path: Path) -> None:
    mem = tmp_path / "memory" / "docker" / "abc"
    mem.mkdir(parents=True)
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (mem / "memory.limit_in_bytes").write_text(f"{2 * GiB}\n")
    proc = tmp_path / "proc-cgroup"
    proc.write_text("12:cpu:/\n4:memory:/docker/abc\n")
    assert cgroup_memory_limit(cgroup_root=tmp_path, proc_cgroup=proc) == 2 * GiB
    (mem / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1 "unlimited"
    assert cgroup_memory_limit(cgroup_root=tmp_path, proc_cgroup=proc) is None
    empty = tmp_path / "nothing"
    empty.mkdir()
    assert cgroup_memory_limit(cgroup_root=empty, proc_cgroup=proc) is None
    assert memory_limit(cgroup_root=empty, proc_cgroup=proc, physical=7 * GiB) == 7 * GiB
    assert default_budget(0.25, limit=8 * GiB) == 2 * GiB
    with pytest.raises(ValueError, match="fraction"):
        default_budget(0.0)
    assert 0 < memory_limit() <= psutil.virtual_memory().total


def test_tree_pss_counts_children() -> None:
    before = tree_memory()
    assert before.pss > 0 and before.uss > 0 and before.processes >= 1
    code = "import time; b = bytearray(64 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 20
        with PeakPssSampler(interval=0.05) as s:
            while time.monotonic() < deadline:
                m = tree_memory()
                if m.processes > before.processes and m.pss > before.pss + (48 << 20):
                    break
                time.sleep(0.05)
        assert m.processes >= before.processes + 1
        assert m.pss >= before.pss + (48 << 20)  # the child's 64 MiB of touched pages
        assert s.peak_pss >= m.pss - (8 << 20) and s.samples >= 1
    finally:
        child.kill()
        child.wait()
