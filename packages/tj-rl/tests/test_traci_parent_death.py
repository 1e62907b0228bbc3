"""A traci SUMO dies with the process that started it, even when that process is SIGKILLed and
another process still holds the TraCI socket (a forked worker would): without the parent-death
signal SUMO waits for its client forever, an orphan holding its memory."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[3]
PARENT = """
import subprocess, sys, time
from pathlib import Path
from tj_rl.env.backends import TraciBackend

backend = TraciBackend()
backend.start(["-c", sys.argv[1]], workdir=Path(sys.argv[2]))
# another process holding the socket: SUMO sees no EOF when this one dies
holder = subprocess.Popen(["sleep", "600"], pass_fds=[backend.conn._socket.fileno()])
print(backend.pid(), holder.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_traci_sumo_dies_with_its_sigkilled_parent(tmp_path: Path) -> None:
    sumocfg = REPO / "configs/scenarios/default/default.sumocfg"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(sumocfg), str(tmp_path)],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    pids: list[int] = []
    try:
        assert parent.stdout is not None
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2, parent.communicate(timeout=60)
        sumo, holder = pids
        sumo_proc = psutil.Process(sumo)
        assert sumo_proc.ppid() == parent.pid
        parent.kill()
        parent.wait(timeout=60)
        # polled until gone (init reaps the orphan); bounded, so a slow machine only waits longer
        _, alive = psutil.wait_procs([sumo_proc], timeout=60)
        assert not alive, "SUMO kept running after its parent was SIGKILLed"
        assert psutil.Process(holder).is_running()  # the socket was still held: not an EOF exit
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
