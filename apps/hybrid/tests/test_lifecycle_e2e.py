"""The trainer as a user meets it: Ctrl-C / SIGTERM, bad inputs, a corrupted dataset.

Real runs of ``apps/hybrid`` in a subprocess on the small recorded dataset (conftest.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

pytestmark = pytest.mark.slow


def _start(app: Path, args: list[str]) -> subprocess.Popen[str]:
    """Start the trainer as a terminal would: its own process group, default signal handling."""
    return subprocess.Popen(
        [sys.executable, str(app), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip


def _wait_for(path: Path, proc: subprocess.Popen[str], limit_s: float = 400) -> None:
    deadline = time.monotonic() + limit_s
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _group_alive(pgid: int) -> list[psutil.Process]:
    alive = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except (ProcessLookupError, psutil.Error):
            pass
    return alive


@pytest.mark.parametrize(("sig", "whom", "code"), [
    (signal.SIGINT, "group", 130),  # a terminal's Ctrl-C reaches the whole foreground group
    (signal.SIGTERM, "main", 143),  # a scheduler's stop often reaches the main process only
])  # fmt: skip
def test_a_signal_stops_the_run_cleanly_and_resume_finishes_it(
    sig: int, whom: str, code: int, small_args: list[str], tmp_path: Path, app: Path, run: Any
) -> None:
    args = [*small_args, "--set", "run.name=stopped", "--set", "phase1.steps=400",
            "--set", "phase1.checkpoint_every=10"]  # fmt: skip
    proc = _start(app, args)
    ckpts = tmp_path / "runs" / "stopped" / "phase1" / "checkpoints"
    _wait_for(ckpts / "ckpt-000000010.pt.done", proc)
    if whom == "group":
        os.killpg(proc.pid, sig)
    else:
        os.kill(proc.pid, sig)
    try:
        _, err = proc.communicate(timeout=60)  # "within seconds"; generous for a loaded CI host
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("the run did not stop within 60 s of the signal")
    assert proc.returncode == code, err
    assert "Traceback" not in err, err
    assert "--resume" in err and "run.name=stopped" in err
    deadline = time.monotonic() + 10
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _group_alive(proc.pid), "processes left behind"
    assert any(ckpts.glob("*.done"))  # the last checkpoint is kept
    if sig == signal.SIGINT:  # once is enough: resume the interrupted run to the end
        args_short = [a if a != "phase1.steps=400" else "phase1.steps=30" for a in args]
        resumed = run(*args_short, "--resume")
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert "resumed phase 1 from" in resumed.stderr


def test_bad_inputs_fail_before_anything_starts(tmp_path: Path, run: Any) -> None:
    runs = tmp_path / "runs"
    base = ["--profile", "smoke", "--set", f"run.root={runs}", "--set", "run.name=bad"]
    out = run(*base, "--set", "scenario.path=/nope/x.sumocfg")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "scenario.path /nope/x.sumocfg: no such file" in out.stderr
    broken = tmp_path / "broken.sumocfg"
    broken.write_text("<configuration><input><net-file value='missing.net.xml'/></input>"
                      "</configuration>")  # fmt: skip
    out = run(*base, "--set", f"scenario.path={broken}")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "missing.net.xml" in out.stderr
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    out = run(*base, "--set", f"phase1.data.path={a_file / 'data'}")
    assert out.returncode == 2 and f"{a_file} is not a directory" in out.stderr
    # the cpu profile's look-ahead teacher forks libsumo: said before phase 1, not in phase 2
    out = run("--profile", "cpu", *base[2:], "--set", "scenario.env.backend=traci")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "the look-ahead teacher forks the process running SUMO" in out.stderr
    assert "scenario.env.backend=traci" in out.stderr
    assert not runs.exists()  # no empty run directory left behind


def test_a_corrupted_dataset_is_noticed_and_recorded_again(
    small_args: list[str], small_data: Path, tmp_path: Path, run: Any
) -> None:
    import shutil

    data = tmp_path / "data"
    shutil.copytree(small_data, data)
    args = [*small_args, "--set", f"phase1.data.path={data}", "--set", "phase1.steps=2",
            "--set", "phase1.eval_batches=1"]  # fmt: skip
    first = run(*args, "--set", "run.name=clean")
    assert first.returncode == 0, first.stderr
    x = data / "train" / "shard-00000" / "x.npy"
    raw = bytearray(x.read_bytes())
    raw[-5] ^= 0xFF  # one flipped byte in the node features; same size
    x.write_bytes(bytes(raw))
    second = run(*args, "--set", "run.name=corrupt")
    assert second.returncode == 0, second.stderr
    assert "shard-00000/x.npy" in second.stderr and "sha256" in second.stderr
    assert "recording" in second.stderr  # recorded again instead of training on it
    a = json.loads((tmp_path / "runs" / "clean" / "phase1" / "eval.json").read_text())
    b = json.loads((tmp_path / "runs" / "corrupt" / "phase1" / "eval.json").read_text())
    assert a["eval"] == b["eval"]  # the same data again: the same result
