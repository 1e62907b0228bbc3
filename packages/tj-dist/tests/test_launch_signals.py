"""The launcher and signals: a terminal's Ctrl-C stops every rank without a traceback per rank,
and ranks do not outlive a launcher killed by SIGKILL (no orphan keeps training)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

RANKS = textwrap.dedent('''
    import os, sys, time
    from pathlib import Path

    def spin(folder):
        Path(folder, f"rank-{os.environ['RANK']}.pid").write_text(str(os.getpid()))
        while True:
            time.sleep(0.05)
''')
MAIN = textwrap.dedent('''
    import sys
    from tj_dist import launch_local
    from ranks import spin
    if __name__ == "__main__":
        try:
            launch_local(spin, 2, sys.argv[1], backend="gloo")
        except KeyboardInterrupt:
            print("launcher: interrupted", file=sys.stderr)
            sys.exit(130)
''')


def _start(tmp_path: Path) -> tuple[subprocess.Popen[str], list[int]]:
    (tmp_path / "ranks.py").write_text(RANKS)
    (tmp_path / "main.py").write_text(MAIN)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, str(tmp_path / "main.py"), str(tmp_path)],
                            stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 120
    files = [tmp_path / f"rank-{r}.pid" for r in range(2)]
    while not all(f.exists() and f.read_text() for f in files):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "ranks did not start"
        time.sleep(0.05)
    return proc, [int(f.read_text()) for f in files]


def _gone(pids: list[int], limit_s: float = 30) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p)
                 and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]  # fmt: skip
        if not alive:
            return True
        time.sleep(0.1)
    return False


def test_ctrl_c_to_the_process_group_stops_every_rank_quietly(tmp_path: Path) -> None:
    proc, ranks = _start(tmp_path)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "launcher: interrupted" in err
    assert "KeyboardInterrupt" not in err  # the ranks ignore it: the launcher stops them
    assert _gone(ranks)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_ranks_do_not_outlive_a_killed_launcher(tmp_path: Path) -> None:
    proc, ranks = _start(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)  # the launcher only: its finally never runs
    proc.wait(timeout=30)
    try:
        assert _gone(ranks), "ranks kept running after their launcher died"
    finally:
        for pid in ranks:
            if psutil.pid_exists(pid):
                os.kill(pid, signal.SIGKILL)
