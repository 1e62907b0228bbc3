"""``--phase all`` killed in every phase, and one DDP rank of phase 3 killed, each followed by
``--resume``: the run finishes, no finished phase runs again, phase 3 continues from its last
checkpoint with lambda restored, and no SUMO / Ray / rank / collector process is left behind."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

pytestmark = pytest.mark.slow


def _tree(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.NoSuchProcess):
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    return []


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    for p in _tree(proc.pid):
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)


def _start(app: Path, args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as fh:
        return subprocess.Popen([sys.executable, str(app), *args], stdout=fh,
                                stderr=subprocess.STDOUT, env={**os.environ,
                                                               "PYTHONUNBUFFERED": "1"})  # fmt: skip


def _wait_for(cond: Any, proc: subprocess.Popen[bytes], log: Path, what: str,
              timeout: float = 900) -> Any:  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = cond()
        if found:
            return found
        if proc.poll() is not None:
            raise AssertionError(f"the run ended ({proc.returncode}) before {what}:\n"
                                 + log.read_text()[-4000:])  # fmt: skip
        time.sleep(0.5)
    raise AssertionError(f"no {what} within {timeout} s:\n" + log.read_text()[-4000:])


def _stray(run_root: Path) -> list[str]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            cmd = " ".join(p.info["cmdline"] or [])
            if str(run_root) in cmd and p.pid != os.getpid():
                found.append(f"{p.pid}: {cmd[:150]}")
    return found


@pytest.mark.timeout(3000)  # three phases, four kills, five starts: slow on a loaded CI host
def test_sigkill_in_every_phase_and_of_a_rank_then_resume(
    small_args: list[str], tiny_phase2: list[str], tiny_phase3: list[str], tmp_path: Path,
    app: Path,
) -> None:  # fmt: skip
    args = [*small_args, "--set", "run.name=k", *tiny_phase2, *tiny_phase3,
            "--set", "phase3.iterations=4", "--phase", "all"]  # fmt: skip
    run_dir = tmp_path / "runs" / "k"
    p1, p2, p3 = (run_dir / f"phase{i}" for i in (1, 2, 3))

    # phase 1: killed after its first checkpoint
    proc = _start(app, args, tmp_path / "a.log")
    _wait_for(lambda: list((p1 / "checkpoints").glob("ckpt-*.pt")), proc, tmp_path / "a.log",
              "phase-1 checkpoint")  # fmt: skip
    _kill_tree(proc)
    assert not (p1 / "result.json").exists()

    # phase 2: killed after its first RLlib checkpoint
    proc = _start(app, [*args, "--resume"], tmp_path / "b.log")
    _wait_for(lambda: (p2 / "checkpoints" / "iter-00001").is_dir(), proc, tmp_path / "b.log",
              "phase-2 checkpoint")  # fmt: skip
    _kill_tree(proc)
    assert (p1 / "result.json").exists() and not (p2 / "result.json").exists()
    assert "resumed phase 1 from" in (tmp_path / "b.log").read_text()

    # phase 3: one rank SIGKILLed after the first checkpoint: the run fails fast, naming it
    log = tmp_path / "c.log"
    proc = _start(app, [*args, "--resume"], log)
    launched = re.compile(r"launched 2 ranks \(MASTER_PORT=\d+, pids \[(\d+), (\d+)\]")

    def ranks_after_a_checkpoint() -> tuple[str, str] | None:
        found = launched.findall(log.read_text())
        return found[-1] if found and list((p3 / "checkpoints").glob("ckpt-*.pt")) else None

    ranks = _wait_for(ranks_after_a_checkpoint, proc, log, "phase-3 checkpoint")
    os.kill(int(ranks[1]), signal.SIGKILL)
    t0 = time.monotonic()
    assert proc.wait(timeout=300) == 1, log.read_text()[-4000:]
    assert time.monotonic() - t0 < 120, "the surviving rank did not fail fast"
    text = log.read_text()
    assert "training failed" in text and "rank 1" in text and "SIGKILL" in text, text[-3000:]
    assert (p2 / "result.json").exists() and not (p3 / "result.json").exists()
    assert not _stray(tmp_path / "runs"), _stray(tmp_path / "runs")

    # phase 3 again: it resumes with lambda restored; the whole tree is killed at the next one
    saved = sorted((p3 / "checkpoints").glob("ckpt-*.pt"))[-1]
    log = tmp_path / "d.log"
    proc = _start(app, [*args, "--resume"], log)
    found = _wait_for(lambda: re.search(r"resumed phase 3 from \S+ \(iteration (\d+), policy version "
                                        r"(\d+), lambda ([0-9.]+)\)", log.read_text()), proc, log,
                      "phase-3 resume")  # fmt: skip
    it = int(found.group(1))
    assert saved.name == f"ckpt-{it:09d}.pt"
    rows = {r["step"]: r for r in map(json.loads, (p3 / "logs" / "metrics.jsonl").read_text()
                                      .splitlines())}  # fmt: skip
    assert float(found.group(3)) == pytest.approx(rows[it]["lambda"], abs=1e-4)
    assert int(found.group(2)) == it  # one policy version per iteration
    _wait_for(lambda: len(list((p3 / "checkpoints").glob("ckpt-*.pt"))) >= 2
              and sorted((p3 / "checkpoints").glob("ckpt-*.pt"))[-1] != saved, proc, log,
              "a later phase-3 checkpoint")  # fmt: skip
    _kill_tree(proc)

    # and to the end
    done = subprocess.run([sys.executable, str(app), *args, "--resume"], capture_output=True,
                          text=True, timeout=1500, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("1 (world-model pretraining)", "2 (safe RL with Ray RLlib PPO in SUMO)"):
        assert f"phase {name} already finished" in done.stderr
    assert "resumed phase 3 from" in done.stderr and "phase 3 done" in done.stdout
    assert (run_dir / "report.md").is_file()
    assert not _stray(tmp_path / "runs"), _stray(tmp_path / "runs")
