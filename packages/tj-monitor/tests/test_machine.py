"""The record facts: CPU model from /proc/cpuinfo, installed versions, the checkout's commit."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tj_monitor import cpu_model, git_commit, gpu_driver, package_versions


def test_cpu_model_reads_cpuinfo_and_falls_back(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Test CPU @ 3.00GHz\nmodel name\t: other\n")
    assert cpu_model(info) == "Test CPU @ 3.00GHz"
    assert cpu_model(tmp_path / "missing")  # platform's name instead, never empty here


def test_package_versions_leave_out_what_is_not_installed() -> None:
    got = package_versions(["tj-monitor", "psutil", "no-such-distribution-x"])
    assert set(got) == {"tj-monitor", "psutil"} and got["tj-monitor"].count(".") >= 2


def test_gpu_driver_is_a_string_or_none() -> None:
    assert gpu_driver() is None or isinstance(gpu_driver(), str)


def test_git_commit_says_dirty_and_none_outside_a_checkout(tmp_path: Path) -> None:
    assert git_commit(tmp_path) is None
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              cwd=repo, capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip

    try:
        git("init", "-q")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git is not usable here")
    (repo / "f.txt").write_text("a")
    git("add", "f.txt")
    git("commit", "-q", "-m", "one")
    head = git("rev-parse", "HEAD")
    assert git_commit(repo) == head
    (repo / "f.txt").write_text("b")
    assert git_commit(repo) == f"{head}+dirty"
    (repo / "untracked.txt").write_text("c")
    git("checkout", "-q", "f.txt")
    assert git_commit(repo) == head  # untracked files do not count
