"""cgroup v1/v2 parsing on fixture trees, and the effective limit on this machine."""

from __future__ import annotations

from pathlib import Path

import psutil

from tj_monitor import memory_limit, read_cgroup_memory, read_system_memory

GiB = 2**30


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def _proc(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "proc_cgroup"
    p.write_text(text)
    return p


def test_v2_limit_current_and_working_set(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    _write(
        root,
        {
            "cgroup.controllers": "cpu memory\n",
            "user.slice/job/memory.max": f"{8 * GiB}\n",
            "user.slice/job/memory.current": f"{3 * GiB}\n",
            "user.slice/job/memory.stat": f"anon 100\ninactive_file {GiB}\nactive_file 5\n",
            "user.slice/memory.max": f"{6 * GiB}\n",  # tighter ancestor wins
        },
    )
    cg = read_cgroup_memory(cgroup_root=root, proc_cgroup=_proc(tmp_path, "0::/user.slice/job\n"))
    assert cg is not None and cg.version == 2 and cg.path == "/user.slice/job"
    assert cg.limit == 6 * GiB and cg.current == 3 * GiB and cg.working_set == 2 * GiB
    assert cg.notes == ()
    assert (
        memory_limit(cgroup_root=root, proc_cgroup=tmp_path / "proc_cgroup", physical=16 * GiB)
        == 6 * GiB
    )


def test_v2_max_means_no_limit_and_physical_ram_applies(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    _write(
        root, {"cgroup.controllers": "memory\n", "memory.max": "max\n", "memory.current": "123\n"}
    )
    proc = _proc(tmp_path, "0::/\n")
    cg = read_cgroup_memory(cgroup_root=root, proc_cgroup=proc)
    assert cg is not None and cg.limit is None and cg.current == 123
    assert memory_limit(cgroup_root=root, proc_cgroup=proc, physical=16 * GiB) == 16 * GiB


def test_v2_namespace_path_missing_falls_back_to_root(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    _write(root, {"cgroup.controllers": "memory\n", "memory.max": f"{4 * GiB}\n"})
    proc = _proc(tmp_path, "0::/docker/abc123\n")  # host path, not mounted in the container
    cg = read_cgroup_memory(cgroup_root=root, proc_cgroup=proc)
    assert cg is not None and cg.limit == 4 * GiB
    assert cg.current is None and cg.working_set is None  # missing file: not available


def test_v1_limit_unlimited_sentinel_and_hierarchy(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    _write(
        root,
        {
            "unified/cgroup.procs": "",  # hybrid layout: v2 mounted below, memory on v1
            "memory/memory.limit_in_bytes": "9223372036854771712\n",
            "memory/job/memory.limit_in_bytes": f"{12 * GiB}\n",
            "memory/job/memory.usage_in_bytes": f"{5 * GiB}\n",
            "memory/job/memory.stat": f"cache 9\ninactive_file 7\ntotal_inactive_file {GiB}\n",
        },
    )
    proc = _proc(tmp_path, "5:cpu,cpuacct:/x\n4:memory:/job\n0::/\n")
    cg = read_cgroup_memory(cgroup_root=root, proc_cgroup=proc)
    assert cg is not None and cg.version == 1 and cg.path == "/job"
    assert cg.limit == 12 * GiB and cg.current == 5 * GiB and cg.working_set == 4 * GiB
    # the root's "unlimited" sentinel alone means no limit
    proc_root = _proc(tmp_path, "4:memory:/\n")
    cg_root = read_cgroup_memory(cgroup_root=root, proc_cgroup=proc_root)
    assert cg_root is not None and cg_root.limit is None


def test_garbage_unreadable_and_missing_files_degrade_to_none(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    _write(
        root,
        {
            "cgroup.controllers": "memory\n",
            "memory.max": "lots of memory\n",
            "memory.current": "-5\n",
            "memory.stat": "inactive_file NaN\n",
        },
    )
    cg = read_cgroup_memory(cgroup_root=root, proc_cgroup=tmp_path / "does-not-exist")
    assert cg is not None
    assert cg.limit is None and cg.current is None and cg.inactive_file is None
    joined = " ".join(cg.notes)
    assert "memory.max" in joined and "memory.current" in joined and "memory.stat" in joined
    # a directory where a file should be: unreadable, reported, not raised
    (root / "memory.max").unlink()
    (root / "memory.max").mkdir()
    cg2 = read_cgroup_memory(cgroup_root=root, proc_cgroup=tmp_path / "does-not-exist")
    assert cg2 is not None and cg2.limit is None and any("unreadable" in n for n in cg2.notes)


def test_no_cgroup_filesystem(tmp_path: Path) -> None:
    assert read_cgroup_memory(cgroup_root=tmp_path / "empty", proc_cgroup=tmp_path / "x") is None
    sysmem = read_system_memory(cgroup_root=tmp_path / "empty", shm_path=tmp_path / "no-shm")
    assert sysmem.cgroup is None and sysmem.shm_used is None and sysmem.limit == sysmem.total


def test_memory_limit_on_this_machine_is_sane() -> None:
    total = psutil.virtual_memory().total
    limit = memory_limit()
    assert 256 * 2**20 <= limit <= total
    sysmem = read_system_memory()
    assert sysmem.limit == limit
    assert 0 < sysmem.available <= sysmem.total and 0 <= sysmem.container_used <= sysmem.total
