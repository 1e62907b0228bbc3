"""launch_local with real gloo groups: fail fast with the child's traceback, no orphans, and the
group-level helpers (comm hooks, rank_zero_only, RNG gathering, NCCL-style fallback)."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import time
from pathlib import Path

import psutil
import pytest
import torch
from _tjdist_workers import die_on_rank_one, misc_worker, raise_on_rank_one

import tj_dist


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _spawned_children() -> list[psutil.Process]:
    """Live (non-zombie) multiprocessing-spawned children of this test process."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "spawn_main" in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def _no_stale_ranks() -> bool:
    """multiprocessing itself knows every rank ended (it reaped them, nobody else did)."""
    return not [p for p in mp.active_children() if p.name.startswith("tj-dist-rank")]


def _pids(pid_dir: Path) -> list[int]:
    return [int(p.read_text()) for p in sorted(pid_dir.glob("*.pid"))]


@pytest.mark.timeout(120)  # without fail-fast, rank 0 would sit in a barrier for 30 minutes
def test_rank_that_raises_fails_fast_with_its_traceback(tmp_path: Path) -> None:
    with pytest.raises(tj_dist.RankFailedError) as info:
        tj_dist.launch_local(raise_on_rank_one, 2, str(tmp_path), backend="gloo")
    err = info.value
    assert err.rank == 1
    assert "raised ValueError: boom from rank 1" in str(err)
    assert "raise_on_rank_one" in err.child_traceback  # the child's own frames
    assert 'raise ValueError("boom from rank 1")' in err.child_traceback
    assert isinstance(err.__cause__, ValueError)
    pids = _pids(tmp_path)
    assert len(pids) == 2
    assert all(_gone(pid) for pid in pids), "a rank outlived launch_local"
    assert not _spawned_children()
    assert _no_stale_ranks()


@pytest.mark.timeout(120)
def test_rank_killed_by_signal_does_not_hang_the_others(tmp_path: Path) -> None:
    with pytest.raises(tj_dist.RankFailedError, match="rank 1 was killed by SIGKILL") as info:
        tj_dist.launch_local(die_on_rank_one, 2, str(tmp_path), backend="gloo")
    assert info.value.exitcode == -9
    assert all(_gone(pid) for pid in _pids(tmp_path))
    assert not _spawned_children()
    assert _no_stale_ranks()
    # a launcher in a child process sends it to its parent: it must come back as itself
    back = pickle.loads(pickle.dumps(info.value))
    assert isinstance(back, tj_dist.RankFailedError) and str(back) == str(info.value)
    assert (back.rank, back.exitcode, back.child_traceback) == (1, -9, info.value.child_traceback)


@pytest.mark.timeout(120)
def test_join_timeout_stops_a_hung_run() -> None:
    with pytest.raises(TimeoutError, match=r"ranks \[0\] still running after 1.0 s"):
        tj_dist.launch_local(time.sleep, 1, 600, backend="gloo", join_timeout=1.0)
    assert not _spawned_children()
    assert _no_stale_ranks()


def test_launch_local_refuses_bad_arguments() -> None:
    with pytest.raises(TypeError, match="picklable"):
        tj_dist.launch_local(lambda: 1, 2)
    with pytest.raises(ValueError, match="nprocs=0"):
        tj_dist.launch_local(time.sleep, 0)
    with pytest.raises(ValueError, match="backend='mpi' is unknown"):
        tj_dist.launch_local(time.sleep, 1, backend="mpi")


@pytest.mark.timeout(180)
def test_group_helpers_under_two_real_ranks(tmp_path: Path) -> None:
    port = tj_dist.free_port()
    r0, r1 = tj_dist.launch_local(misc_worker, 2, port, str(tmp_path), backend="gloo")
    # compressed all-reduce: both ranks hold the mean of rank 1's (x=1) and rank 2's (x=2) grads
    for hook in ("fp16", "bf16"):
        expected = torch.full((1, 4), 3.0)  # mean over ranks of 2 rows * (rank + 1)
        assert torch.allclose(r0[f"grad_{hook}"], expected)
        assert torch.equal(r0[f"grad_{hook}"], r1[f"grad_{hook}"])
    assert (
        "static_graph=True cannot be combined with gradient accumulation"
        in r0["static_graph_error"]
    )
    assert "pytorch/pytorch#187732" in r0["static_graph_error"]
    assert "rebuild the DDP wrapper" in r0["freeze_ddp_error"]
    # rank 1 left rank_zero_only only after rank 0's slow write was on disk
    assert r0["saw_marker_after_context"] and r1["saw_marker_after_context"]
    assert r0["rank_zero_failure"] == "OSError: disk full (injected)"
    assert r1["rank_zero_failure"].startswith("RuntimeError: rank 0 failed inside rank_zero_only")
    assert "disk full" in r1["rank_zero_failure"]
    assert r0["rng_ranks"] == 2 and r0["rng_distinct"]
    assert r1["nonmain_save"] is None
    # one rank's failed smoke test moved both to a fresh gloo group that works
    for r in (r0, r1):
        backend, reason, total = r["fallback"]
        assert backend == "gloo"
        assert "rank 1: RuntimeError: injected transport failure" in reason
        assert total == 2.0


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
def test_nccl_two_gpus_with_smoke_test() -> None:  # pragma: no cover - GPU only
    from _tjdist_workers import nccl_worker

    results = tj_dist.launch_local(nccl_worker, 2, backend="nccl")
    assert [r["device"] for r in results] == ["cuda:0", "cuda:1"]
    assert all(r["backend"] == "nccl" and r["fallback_reason"] is None for r in results)
    assert all(r["sum"] == 3.0 for r in results)


def test_pid_helper_sanity(tmp_path: Path) -> None:
    (tmp_path / "0.pid").write_text(str(os.getpid()))
    assert _pids(tmp_path) == [os.getpid()] and not _gone(os.getpid())
