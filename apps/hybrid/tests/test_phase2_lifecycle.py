"""Phase 2 as a user meets it: Ctrl-C mid-training (Ray, its workers and every SUMO gone within
30 s; ``--resume`` continues from the newest RLlib checkpoint), and a net without controllable
lights refused before anything (Ray included) starts."""

from __future__ import annotations

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


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _alive(procs: list[psutil.Process]) -> list[str]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(" ".join(p.cmdline())[:100])
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.mark.timeout(1500)  # phases 1 and 2 (twice): a loaded CI host is slow
def test_ctrl_c_in_phase_2_stops_ray_and_sumo_and_resume_continues(
    small_args: list[str], tiny_phase2: list[str], tmp_path: Path, app: Path, run: Any
) -> None:
    args = [*small_args, "--set", "run.name=p2stop", "--set", "phase1.steps=5",
            "--set", "phase1.eval_batches=1", *tiny_phase2, "--set", "phase2.iterations=50"]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, str(app), *args, "--phase", "1-2"], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    first = tmp_path / "runs" / "p2stop" / "phase2" / "checkpoints" / "iter-00001"
    deadline = time.monotonic() + 900
    while not first.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no phase-2 checkpoint"
        time.sleep(0.1)
    tree = _tree(proc.pid)  # the trainer, phase 2's child, Ray's processes, its workers
    assert any("raylet" in " ".join(p.cmdline()) for p in tree if p.is_running())
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the foreground group
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("the run did not stop within 60 s of Ctrl-C")
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    assert "--resume" in err and "run.name=p2stop" in err
    deadline = time.monotonic() + 30
    while _alive(tree) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(tree), f"left behind: {_alive(tree)}"

    resumed = run(*args[:-2], "--set", "phase2.iterations=2", "--phase", "1-2", "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resumed phase 2 from" in resumed.stderr
    assert "phase 2 done: held-out avg delay" in resumed.stdout


def test_a_net_without_controllable_lights_fails_before_anything_starts(
    tmp_path: Path, run: Any
) -> None:
    from tj_rl.env.runtime import sumo_binary

    net = tmp_path / "plain.net.xml"
    subprocess.run([sumo_binary("netgenerate"), "--grid", "--grid.number=2", "-o", str(net)],
                   check=True, capture_output=True)  # fmt: skip
    (tmp_path / "plain.rou.xml").write_text("<routes/>")
    cfg = tmp_path / "plain.sumocfg"
    cfg.write_text("<configuration><input><net-file value='plain.net.xml'/>"
                   "<route-files value='plain.rou.xml'/></input></configuration>")  # fmt: skip
    runs = tmp_path / "runs"
    before = {p.pid for p in psutil.process_iter()}
    out = run("--profile", "smoke", "--set", f"run.root={runs}", "--set", "run.name=nolights",
              "--set", f"scenario.path={cfg}", "--phase", "1-2")  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert f"{net}: has no traffic light to control" in out.stderr
    assert not runs.exists()
    started = [p for p in psutil.process_iter(["cmdline"]) if p.pid not in before
               and "raylet" in " ".join(p.info["cmdline"] or [])]  # fmt: skip
    assert not started, "Ray was started"
