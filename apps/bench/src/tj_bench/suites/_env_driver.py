"""The env suite's driver side: the scenarios' files, one worker process per episode (with the PSS
probe answered here through tj-monitor), and the check that an interpreter can run sumo-rl.
"""

from __future__ import annotations

import json
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tj_bench.measure import MIB
from tj_bench.suites._env_worker import PROBE, RESULT
from tj_monitor import stop_processes, tree_memory

__all__ = ["WORKER", "ScenarioFiles", "build_scenarios", "check_sumo_rl", "run_episode"]

WORKER = Path(__file__).with_name("_env_worker.py")


@dataclass(frozen=True, kw_only=True)
class ScenarioFiles:
    """A scenario as both envs get it: tj-rl its ``.sumocfg``, sumo-rl its net and routes."""

    label: str
    sumocfg: str
    net: str
    routes: str


def build_scenarios(
    names: tuple[str, ...], out: Path, *, seconds: float, grid: int, rates: dict[str, float]
) -> dict[str, ScenarioFiles]:
    """The embedded default scenario (1 light) and NxN grids at the demand ``rates[name]``."""
    from tj_rl.env import SyntheticSpec, build_scenario, default_scenario

    scenarios = {}
    for name in names:
        if name == "default":
            label, sc = "default (1 light)", default_scenario()
        else:
            spec = SyntheticSpec(
                kind="grid",
                rows=grid,
                cols=grid,
                lanes=2,
                turn_lanes=0,
                duration=seconds,
                rates=(rates[name],),
                seed=1,
                name=name,
            )
            sc = build_scenario(spec, out / name)
            label = f"grid {grid}x{grid} ({grid**2} lights), {rates[name]:g} veh/h"
        scenarios[name] = ScenarioFiles(
            label=label,
            sumocfg=str(sc.sumocfg),
            net=str(sc.net_file),
            routes=str(sc.route_files[0]),
        )
    return scenarios


def run_episode(
    python: str, settings: dict[str, Any], *, timeout: float = 3600.0
) -> dict[str, Any]:
    """One episode in a fresh ``python`` process: the worker's result plus ``pss_mib``, the
    PSS of its process tree (SUMO's child included) read when the worker asked, near the end."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [python, str(WORKER), json.dumps(settings)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        watchdog = threading.Timer(timeout, proc.kill)
        watchdog.start()
        result, pss = None, 0
        try:
            assert proc.stdin is not None and proc.stdout is not None
            for line in proc.stdout:
                if PROBE in line:
                    pss = tree_memory(proc.pid).pss
                    proc.stdin.write("read\n")
                    proc.stdin.flush()
                elif RESULT in line:
                    result = json.loads(line.split(RESULT, 1)[1])
            code = proc.wait()
        finally:
            watchdog.cancel()
            stop_processes([proc], 0.0, sig=signal.SIGKILL)  # a worker that failed: killed, reaped
        err.seek(0)
        if code != 0 or result is None:
            what = f"{settings['impl']} {settings.get('variant', '')} {settings['backend']}"
            raise RuntimeError(
                f"env worker ({what}) failed with exit code {code}:\n{err.read()[-3000:]}"
            )
    result["pss_mib"] = pss / MIB
    return result


def check_sumo_rl(python: str) -> tuple[str | None, str]:
    """``(sumo-rl's version, "")`` if ``python`` can run the sumo-rl side, else ``(None, why)``."""
    try:
        proc = subprocess.run(
            [python, str(WORKER), "check-sumo-rl"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"cannot run {python}: {exc}"
    lines = [x for x in proc.stdout.splitlines() if x.startswith(RESULT)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"{python} cannot run sumo-rl (it needs sumo-rl, psutil and SUMO): {tail}"
    return json.loads(lines[-1][len(RESULT) :])["version"], ""
