"""WSL2 / drvfs / shm / cgroup detection from fixture /proc files, and the env defaults it drives."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

import tj_dist
import tj_monitor
from tj_dist import EnvironmentInfo, GpuInfo

FIXTURES = Path(__file__).parent / "fixtures"


def _env(**kw) -> EnvironmentInfo:
    base = {"wsl2": False, "kernel": "Linux", "shm_bytes": 8 << 30}
    return EnvironmentInfo(**{**base, **kw})


GPU = GpuInfo(
    index=0, name="NVIDIA GeForce RTX 2080 Ti", capability=(7, 5), total_memory_bytes=11 << 30
)


@pytest.mark.parametrize(
    ("fixture", "environ", "expected"),
    [
        ("proc_version_wsl2.txt", {}, True),
        ("proc_version_wsl1.txt", {}, False),  # WSL1: no real kernel, no GPU, not WSL2
        ("proc_version_wsl1.txt", {"WSL_INTEROP": "/run/WSL/1_interop"}, True),
        ("proc_version_native.txt", {}, False),
        ("proc_version_native.txt", {"WSL_INTEROP": "x"}, False),  # a stray variable is not WSL
    ],
)
def test_is_wsl2_from_proc_version(fixture: str, environ: dict, expected: bool) -> None:
    assert tj_dist.is_wsl2((FIXTURES / fixture).read_text(), environ) is expected


def test_drvfs_mounts_parsed_with_octal_escapes() -> None:
    mounts = tj_dist.parse_drvfs_mounts((FIXTURES / "proc_mounts_wsl2.txt").read_text())
    assert [m.mount_point for m in mounts] == ["/mnt/c", "/mnt/d", "/mnt/my data"]
    assert mounts[1].source == "D:\\"
    assert mounts[2].source == "E:\\My Data"
    assert all(m.fstype == "9p" for m in mounts)  # /usr/lib/wsl/drivers (aname=drivers) excluded
    wsl1 = tj_dist.parse_drvfs_mounts((FIXTURES / "proc_mounts_wsl1.txt").read_text())
    assert [(m.mount_point, m.fstype) for m in wsl1] == [("/mnt/c", "drvfs")]


def _cgroup_v2(root: Path, limit: str) -> Path:
    """A cgroup v2 tree whose job cgroup has `limit` as memory.max; returns /proc/self/cgroup."""
    (root / "job").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    (root / "job" / "memory.max").write_text(limit + "\n")
    proc = root.parent / "proc-cgroup"
    proc.write_text("0::/job\n")
    return proc


def test_detect_environment_from_fixtures(tmp_path: Path) -> None:
    cgroup = tmp_path / "cgroup"
    proc = _cgroup_v2(cgroup, str(256 << 20))  # below any real machine's RAM
    info = tj_dist.detect_environment(
        proc_version=FIXTURES / "proc_version_wsl2.txt",
        proc_mounts=FIXTURES / "proc_mounts_wsl2.txt",
        shm_path=tmp_path,
        cgroup_root=cgroup,
        proc_cgroup=proc,
        environ={"WSL_DISTRO_NAME": "Ubuntu"},
        probe_gpus=False,
    )
    assert info.wsl2
    assert "microsoft-standard-WSL2" in info.kernel
    assert len(info.drvfs_mounts) == 3
    assert info.memory_limit_bytes == 256 << 20
    assert info.shm_bytes and info.shm_bytes > 0
    assert info.environ_flags == {"WSL_DISTRO_NAME": "Ubuntu"}
    assert info.cpu_count >= 1
    assert not info.cuda


def test_memory_limit_and_shm_are_tj_monitors(tmp_path: Path) -> None:
    """One limit per machine: detect_environment reports what tj-monitor's MemoryMonitor uses."""
    cgroup = tmp_path / "cgroup"
    proc = _cgroup_v2(cgroup, "max")  # no cgroup limit: physical RAM
    info = tj_dist.detect_environment(
        cgroup_root=cgroup, proc_cgroup=proc, shm_path=tmp_path / "absent", probe_gpus=False
    )
    assert info.memory_limit_bytes == tj_monitor.memory_limit(cgroup_root=cgroup, proc_cgroup=proc)
    assert info.memory_limit_bytes == psutil.virtual_memory().total
    assert info.shm_bytes is None  # not mounted
    here = tj_dist.detect_environment(probe_gpus=False)
    assert here.memory_limit_bytes == tj_monitor.memory_limit()
    shm = tj_monitor.shm_usage("/dev/shm")
    assert here.shm_bytes == (shm.total if shm is not None else None)
    assert not hasattr(tj_dist, "container_memory_limit")  # the weaker reader is gone


def test_detect_environment_on_this_machine() -> None:
    info = tj_dist.detect_environment()
    assert info.cpu_count >= 1
    assert info.kernel.startswith("Linux")
    assert info.cuda == (len(info.gpus) > 0)


def test_check_data_path_warns_on_windows_drive(tmp_path: Path) -> None:
    env = _env(
        wsl2=True,
        drvfs_mounts=tj_dist.parse_drvfs_mounts((FIXTURES / "proc_mounts_wsl2.txt").read_text()),
    )
    with pytest.warns(RuntimeWarning, match=r"/mnt/d/datasets/phase1.*5-10x slower"):
        mount = tj_dist.check_data_path("/mnt/d/datasets/phase1", env)
    assert mount is not None and mount.mount_point == "/mnt/d"
    with pytest.warns(RuntimeWarning, match="my data"):
        assert tj_dist.check_data_path("/mnt/my data/x", env).mount_point == "/mnt/my data"
    # a symlink from the Linux home into a Windows drive is still a Windows drive
    link = tmp_path / "data"
    link.symlink_to("/mnt/c/Users/me/data")
    with pytest.warns(RuntimeWarning, match="C:"):
        assert tj_dist.check_data_path(link, env).mount_point == "/mnt/c"


def test_check_data_path_quiet_on_linux_filesystem(recwarn: pytest.WarningsRecorder) -> None:
    env = _env(
        wsl2=True,
        drvfs_mounts=tj_dist.parse_drvfs_mounts((FIXTURES / "proc_mounts_wsl2.txt").read_text()),
    )
    assert tj_dist.check_data_path("/home/me/data", env) is None
    assert tj_dist.check_data_path("/mnt/cdrive/data", env) is None  # prefix, not the mount
    assert tj_dist.check_data_path("/mnt/wsl/x", env) is None  # tmpfs, not drvfs
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_wsl2_defaults_set_nccl_vars_and_recommend_no_pinning() -> None:
    environ: dict[str, str] = {}
    result = tj_dist.apply_env_defaults(_env(wsl2=True, gpus=(GPU, GPU)), environ=environ)
    assert environ == {"NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1"}
    assert result.set_vars == environ
    assert result.pin_memory is False
    assert "PYTORCH_ALLOC_CONF" not in environ  # never expandable segments under WSL2


def test_env_defaults_never_overwrite_user_values() -> None:
    environ = {"NCCL_P2P_DISABLE": "0", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    with pytest.warns(RuntimeWarning, match="expandable_segments under WSL2"):
        result = tj_dist.apply_env_defaults(_env(wsl2=True, gpus=(GPU,)), environ=environ)
    assert environ == {
        "NCCL_P2P_DISABLE": "0",
        "NCCL_IB_DISABLE": "1",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    }
    assert result.kept_user_vars == {"NCCL_P2P_DISABLE": "0"}
    assert result.set_vars == {"NCCL_IB_DISABLE": "1"}

    native: dict[str, str] = {"PYTORCH_ALLOC_CONF": "max_split_size_mb:128"}
    result = tj_dist.apply_env_defaults(_env(gpus=(GPU,)), environ=native)
    assert native == {"PYTORCH_ALLOC_CONF": "max_split_size_mb:128"}
    assert result.kept_user_vars == {"PYTORCH_ALLOC_CONF": "max_split_size_mb:128"}


def test_native_gpu_gets_expandable_segments_and_cpu_gets_nothing() -> None:
    environ: dict[str, str] = {}
    result = tj_dist.apply_env_defaults(_env(gpus=(GPU,)), environ=environ)
    assert environ == {"PYTORCH_ALLOC_CONF": "expandable_segments:True"}
    assert result.pin_memory is True
    off: dict[str, str] = {}
    tj_dist.apply_env_defaults(_env(gpus=(GPU,)), environ=off, expandable_segments=False)
    cpu: dict[str, str] = {}
    tj_dist.apply_env_defaults(_env(), environ=cpu)
    assert off == {} and cpu == {}


def test_small_shm_is_warned_about() -> None:
    with pytest.warns(RuntimeWarning, match=r"/dev/shm is 64 MiB"):
        result = tj_dist.apply_env_defaults(_env(shm_bytes=64 << 20), environ={})
    assert any("/dev/shm" in w for w in result.warnings)


def test_apply_env_defaults_uses_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NCCL_P2P_DISABLE", raising=False)
    monkeypatch.delenv("NCCL_IB_DISABLE", raising=False)
    monkeypatch.setenv("NCCL_IB_DISABLE", "0")
    tj_dist.apply_env_defaults(_env(wsl2=True))
    assert os.environ["NCCL_P2P_DISABLE"] == "1"
    assert os.environ["NCCL_IB_DISABLE"] == "0"
    monkeypatch.delenv("NCCL_P2P_DISABLE")
