"""`doctor` on this machine: every line has a status, the facts are real, exit status is right;
and on injected bad conditions (a tiny container limit, no /dev/shm, a full disk, a data dir on a
Windows drive under WSL2) the line says WARN or FAIL with its fix."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

import tj_monitor
from tj_hybrid.doctor import Probes, run_checks

APP = Path(__file__).resolve().parents[1]


def test_doctor_checks_this_machine(tmp_path: Path) -> None:
    checks = run_checks({"run dir": tmp_path / "runs", "data dir": tmp_path / "data"})
    by_name = {c.name: c for c in checks}
    for name in (
        "python",
        "torch",
        "pyg",
        "ray",
        "sumo",
        "libsumo",
        "ram",
        "swap",
        "container limit",
        "/dev/shm",
        "wsl2",
        "disk run dir",
        "disk data dir",
        "cpus",
    ):
        assert name in by_name, name
    assert all(c.status in ("OK", "WARN", "FAIL") for c in checks)
    assert all(c.fix for c in checks if c.status != "OK")  # every problem comes with its fix
    assert by_name["python"].detail == platform.python_version()
    assert by_name["libsumo"].status == "OK"
    assert by_name["sumo"].detail.startswith("1.28")


def test_doctor_command_runs() -> None:
    out = subprocess.run(
        [sys.executable, str(APP), "doctor", "--profile", "smoke"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode in (0, 1), out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("OK") and "libsumo" in line for line in lines), out.stdout
    assert (out.returncode == 1) == any(line.startswith("FAIL") for line in lines)


def _bad_machine(tmp_path: Path, **thresholds: int) -> Probes:
    """A WSL2 machine in a container capped at 512 MiB (cgroup v2, the limit on the process's
    own cgroup, below the root), without /dev/shm, with D: mounted at /mnt/d."""
    cgroup = tmp_path / "cgroup"
    (cgroup / "job").mkdir(parents=True)
    (cgroup / "cgroup.controllers").write_text("cpu memory\n")
    (cgroup / "memory.max").write_text("max\n")
    (cgroup / "job" / "memory.max").write_text(f"{512 << 20}\n")
    (tmp_path / "proc-cgroup").write_text("0::/job\n")
    (tmp_path / "version").write_text(
        "Linux version 5.15.167.4-microsoft-standard-WSL2 (root@x) (gcc 11.2.0) #1 SMP\n"
    )
    (tmp_path / "mounts").write_text(
        "/dev/sdc / ext4 rw,relatime 0 0\n"
        "D:\\134 /mnt/d 9p rw,noatime,aname=drvfs;path=D:\\;uid=1000;gid=1000 0 0\n"
    )
    return Probes(
        proc_version=tmp_path / "version",
        proc_mounts=tmp_path / "mounts",
        cgroup_root=cgroup,
        proc_cgroup=tmp_path / "proc-cgroup",
        shm_path=tmp_path / "no-shm",
        environ={},
        **thresholds,
    )


def test_doctor_flags_injected_bad_conditions_with_their_fix(tmp_path: Path) -> None:
    probes = _bad_machine(tmp_path, disk_warn=1 << 61, disk_fail=1 << 60)  # no disk is that big
    paths = {"run dir": tmp_path / "runs", "data dir": Path("/mnt/d/datasets/phase1")}
    with pytest.warns(RuntimeWarning, match="/mnt/d"):
        checks = run_checks(paths, probes=probes)
    by_name = {c.name: c for c in checks}
    limit = by_name["container limit"]
    # one memory limit: the doctor's is tj-monitor's on the same cgroup files
    cg_limit = tj_monitor.memory_limit(
        cgroup_root=probes.cgroup_root, proc_cgroup=probes.proc_cgroup
    )
    assert cg_limit == 512 << 20
    assert limit.status == "WARN" and limit.detail.startswith("0.5 GiB (cgroup)")
    assert "raise its memory limit" in limit.fix and "--profile low_memory" in limit.fix
    shm = by_name["/dev/shm"]
    assert shm.status == "WARN" and shm.detail == "not mounted" and "--shm-size" in shm.fix
    disk = by_name["disk run dir"]
    assert disk.status == "FAIL" and disk.fix == "free space or point run dir elsewhere (--set)"
    assert by_name["disk data dir"].status == "FAIL"
    assert by_name["wsl2"].detail.startswith("WSL2:")
    drvfs = by_name["drvfs data dir"]
    assert drvfs.status == "WARN" and "move it under your Linux home" in drvfs.fix
    assert "drvfs run dir" not in by_name  # the run dir is on the Linux filesystem
    assert all(c.fix for c in checks if c.status != "OK")


def test_doctor_thresholds_decide_between_ok_warn_and_fail(tmp_path: Path) -> None:
    paths = {"run dir": tmp_path}
    ok = {c.name: c for c in run_checks(paths, probes=Probes(disk_warn=0, disk_fail=0))}
    assert ok["disk run dir"].status == "OK" and ok["disk run dir"].fix == ""
    warn = {c.name: c for c in run_checks(paths, probes=Probes(disk_warn=1 << 61, disk_fail=0))}
    assert warn["disk run dir"].status == "WARN" and warn["disk run dir"].fix
    roomy = Probes(min_shm=0, min_memory=0)  # this machine's /dev/shm and RAM are then enough
    fine = {c.name: c for c in run_checks(paths, probes=roomy)}
    assert fine["ram"].status == "OK" and fine["container limit"].status == "OK"
    assert fine["/dev/shm"].status == ("OK" if tj_monitor.shm_usage() else "WARN")
    with pytest.raises(ValueError, match="disk_fail"):
        Probes(disk_warn=1, disk_fail=2)
