"""Watching a policy: ``EnvConfig(backend="traci", gui=True)`` runs SUMO in sumo-gui (started
running, closed at the episode's end); refused on libsumo. The episode test needs a display: it
runs under ``xvfb-run`` and is skipped where that is not installed."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tj_rl.env import EnvConfig, make_backend

EPISODE = """
import sys
from tj_rl.env import EnvConfig, TrafficSignalCore, default_scenario
sc = default_scenario(sys.argv[1]).replace(end=60.0)
core = TrafficSignalCore(EnvConfig(backend="traci", gui=True, gui_delay_ms=0), scenario=sc)
obs, _ = core.reset(seed=1)
done = False
while not done:
    obs, _, term, trunc, _ = core.step({a: 0 for a in obs})
    done = all(term.values()) or all(trunc.values())
print("sim_time", core.sim_time)
core.close()
"""


def test_gui_is_traci_only() -> None:
    with pytest.raises(ValueError, match="sumo-gui runs over traci"):
        EnvConfig(gui=True)
    with pytest.raises(ValueError, match="gui_delay_ms"):
        EnvConfig(backend="traci", gui=True, gui_delay_ms=-1)
    with pytest.raises(ValueError, match="traci only"):
        make_backend("libsumo", gui_delay_ms=10)


@pytest.mark.skipif(shutil.which("xvfb-run") is None, reason="needs xvfb-run (a virtual display)")
def test_an_episode_runs_in_sumo_gui(default_sc) -> None:
    cfg = str(default_sc.sumocfg)
    out = subprocess.run(["xvfb-run", "-a", sys.executable, "-c", EPISODE, cfg],
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "sim_time 60" in out.stdout
