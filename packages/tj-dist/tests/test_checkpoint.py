"""Atomic checkpoints on real files: kill mid-write, truncate, corrupt, drop markers, bad paths,
and a bit-exact resume in a fresh process."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import tj_dist
from tj_dist import CheckpointError, CorruptCheckpointError

WORKERS = Path(__file__).parent / "_tjdist_workers.py"


def _state(step: int, numel: int = 1000) -> dict:
    return {
        "step": step,
        "w": torch.full((numel,), float(step)),
        "meta": {"lr": 0.1, "tags": ["a"]},
    }


def test_save_load_round_trip_and_keep_last_k(tmp_path: Path) -> None:
    for step in (10, 20, 30, 40):
        path = tj_dist.save_checkpoint(tmp_path, _state(step), step=step, keep=3)
        assert path == tmp_path / f"ckpt-{step:09d}.pt"
    assert [c.step for c in tj_dist.list_checkpoints(tmp_path)] == [20, 30, 40]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"ckpt-{s:09d}.pt{ext}" for s in (20, 30, 40) for ext in ("", ".done")
    ]
    loaded = tj_dist.load_latest(tmp_path)
    assert loaded is not None and loaded.step == 40
    assert torch.equal(loaded.state["w"], torch.full((1000,), 40.0))
    assert loaded.state["meta"] == {"lr": 0.1, "tags": ["a"]}


def test_empty_or_missing_directory_means_fresh_start(tmp_path: Path) -> None:
    assert tj_dist.load_latest(tmp_path) is None
    assert tj_dist.load_latest(tmp_path / "not-yet") is None


def test_keep_below_two_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep=1 must be >= 2"):
        tj_dist.save_checkpoint(tmp_path, _state(1), step=1, keep=1)


def test_checkpoint_directory_that_is_a_file(tmp_path: Path) -> None:
    file = tmp_path / "ckpts"
    file.write_text("oops")
    with pytest.raises(NotADirectoryError, match=f"{file}.*not a directory"):
        tj_dist.save_checkpoint(file, _state(1), step=1)
    with pytest.raises(NotADirectoryError, match=str(file)):
        tj_dist.load_latest(file)


def test_truncated_newest_is_skipped_with_a_warning(tmp_path: Path) -> None:
    for step in (1, 2):
        tj_dist.save_checkpoint(tmp_path, _state(step), step=step)
    newest = tmp_path / "ckpt-000000002.pt"
    newest.write_bytes(newest.read_bytes()[:-100])
    with pytest.warns(RuntimeWarning, match="ckpt-000000002.pt.*bytes on disk.*truncated"):
        loaded = tj_dist.load_latest(tmp_path)
    assert loaded is not None and loaded.step == 1
    with pytest.raises(CorruptCheckpointError, match=f"{newest}.*truncated"):
        tj_dist.load_checkpoint(newest)
    # without the marker check torch.load itself fails, still naming the file
    with pytest.raises(CheckpointError, match=str(newest)):
        tj_dist.load_checkpoint(newest, verify=False)


def test_corrupt_bytes_are_caught_by_the_checksum(tmp_path: Path) -> None:
    for step in (1, 2):
        tj_dist.save_checkpoint(tmp_path, _state(step, numel=50_000), step=step)
    newest = tmp_path / "ckpt-000000002.pt"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the tensor payload: torch.load alone would not notice
    newest.write_bytes(bytes(data))
    with pytest.warns(RuntimeWarning, match="sha256 does not match"):
        loaded = tj_dist.load_latest(tmp_path)
    assert loaded is not None and loaded.step == 1


def test_checkpoint_without_marker_is_incomplete(tmp_path: Path) -> None:
    for step in (1, 2):
        tj_dist.save_checkpoint(tmp_path, _state(step), step=step)
    (tmp_path / "ckpt-000000002.pt.done").unlink()  # killed between rename and marker
    with pytest.warns(RuntimeWarning, match="incomplete checkpoint .*ckpt-000000002.pt"):
        loaded = tj_dist.load_latest(tmp_path)
    assert loaded is not None and loaded.step == 1
    # the next save cleans up the orphan and any stale temp file
    (tmp_path / ".tmp-ckpt-stale.partial").write_bytes(b"x" * 10)
    tj_dist.save_checkpoint(tmp_path, _state(3), step=3)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"ckpt-{s:09d}.pt{e}" for s in (1, 3) for e in ("", ".done")]


def test_resaving_a_step_replaces_it(tmp_path: Path) -> None:
    tj_dist.save_checkpoint(tmp_path, _state(5), step=5)
    tj_dist.save_checkpoint(tmp_path, {**_state(5), "w": torch.zeros(3)}, step=5)
    loaded = tj_dist.load_latest(tmp_path)
    assert loaded is not None and torch.equal(loaded.state["w"], torch.zeros(3))


@dataclasses.dataclass
class NotAllowed:
    x: int


def test_intact_but_unloadable_state_is_an_error_not_a_skip(tmp_path: Path) -> None:
    tj_dist.save_checkpoint(tmp_path, _state(1), step=1)
    tj_dist.save_checkpoint(tmp_path, {"obj": NotAllowed(1)}, step=2)
    # silently resuming from step 1 would hide the bug: raise, naming the file and the fix
    with pytest.raises(
        CheckpointError, match=r"ckpt-000000002.pt: cannot be loaded.*NotAllowed.*add_safe_globals"
    ):
        tj_dist.load_latest(tmp_path)
    loaded = tj_dist.load_checkpoint(tmp_path / "ckpt-000000002.pt", weights_only=False)
    assert loaded["obj"] == NotAllowed(1)


def test_load_checkpoint_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no such checkpoint file"):
        tj_dist.load_checkpoint(tmp_path / "ckpt-000000001.pt")


@pytest.mark.timeout(180)
def test_sigkill_during_save_leaves_the_previous_checkpoint_loadable(tmp_path: Path) -> None:
    """A process saving 48 MB checkpoints in a loop is SIGKILLed while a temp file is being
    written; the newest complete checkpoint must load and verify, the partial one is never used."""
    for attempt in range(5):
        ckpt = tmp_path / f"attempt{attempt}"
        proc = subprocess.Popen(
            [sys.executable, str(WORKERS), "saver", "--ckpt-dir", str(ckpt), "--megabytes", "48"],
            stdout=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 120
            # wait for at least two complete checkpoints, then for a write in progress
            while len(tj_dist.list_checkpoints(ckpt) if ckpt.exists() else []) < 2:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.01)
            while not any(p.name.startswith(".tmp-ckpt-") for p in ckpt.iterdir()):
                assert time.monotonic() < deadline
                time.sleep(0.001)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
        partial = [p for p in ckpt.iterdir() if p.name.startswith(".tmp-ckpt-")]
        if partial:  # killed mid-write (else it finished in the gap: try again)
            break
    assert partial, "never caught a write in progress"
    loaded = tj_dist.load_latest(ckpt)
    assert loaded is not None
    assert loaded.state["step"] == loaded.step
    assert torch.equal(loaded.state["payload"][:10], torch.full((10,), float(loaded.step)))
    assert loaded.path.name == f"ckpt-{loaded.step:09d}.pt"


@pytest.mark.timeout(240)
def test_resume_in_a_fresh_process_reproduces_the_uninterrupted_run(tmp_path: Path) -> None:
    """Run A trains 2N steps and checkpoints at N; run B, a new process, loads that checkpoint
    and trains to 2N. Dropout, data sampling (python/numpy/torch RNG + a stateful sampler),
    AdamW, StepLR, the fp16 GradScaler and the accumulator must all resume exactly."""
    from _tjdist_workers import train_cli

    n = 6
    ckpt, out_a, out_b = tmp_path / "ckpt", tmp_path / "a.pt", tmp_path / "b.pt"
    # run A here (one process start fewer), leaving this process's threads and RNGs as they were
    threads, rng = torch.get_num_threads(), tj_dist.capture_rng_state()
    try:
        train_cli(str(ckpt), 2 * n, str(out_a), resume=False, save_at=n)
    finally:
        torch.set_num_threads(threads)
        tj_dist.restore_rng_state(rng)
    common = [sys.executable, str(WORKERS), "train", "--ckpt-dir", str(ckpt), "--steps", str(2 * n)]
    subprocess.run([*common, "--out", str(out_b), "--resume"], check=True, timeout=200)
    a = torch.load(out_a, weights_only=True)
    b = torch.load(out_b, weights_only=True)
    assert all(torch.equal(x, y) for x, y in zip(a["params"], b["params"], strict=True))
    assert (a["scale"], a["skipped"], a["lr"]) == (b["scale"], b["skipped"], b["lr"])
    assert a["scale"] != 2.0**8  # the scaler state really moved during the run
    assert tj_dist.load_latest(ckpt).step == n
