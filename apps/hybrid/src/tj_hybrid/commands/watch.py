"""``tj-hybrid watch --agent PATH``: one episode of an exported agent in sumo-gui, so an engineer
can see what it does. The env is the one ``eval`` measures (padded to the agent, the first
held-out time window, a SUMO seed of the evaluation), on the traci backend with sumo-gui as
SUMO; the agent decides every step until the episode ends or the window is closed. Traffic: the
first held-out route file (the scenario's own demand, when it has one), or ``--routes FILE``.
Without a display (Linux with neither DISPLAY nor WAYLAND_DISPLAY) it says so in one line and
starts nothing."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from tj_hybrid.commands.agent import checked_agent, prepare_agent_setup
from tj_hybrid.config import ConfigError, HybridConfig
from tj_hybrid.preflight import check_readable_file
from tj_rl.env.runtime import sumo_binary

__all__ = ["display_problem", "run_watch"]


def display_problem() -> str | None:
    """Why sumo-gui cannot open a window here, or None."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY")
                                                 or os.environ.get("WAYLAND_DISPLAY")):  # fmt: skip
        return ("no display (neither DISPLAY nor WAYLAND_DISPLAY is set): sumo-gui needs one; "
                "use ssh -X, WSLg or a desktop session, or `eval` for the numbers")  # fmt: skip
    try:
        sumo_binary("sumo-gui")
    except FileNotFoundError as exc:
        return str(exc)
    return None


def run_watch(cfg: HybridConfig, agent: Path | None, *, routes: Path | None = None,
              delay_ms: float = 100.0) -> int:  # fmt: skip
    """The command: one line and 2 when there is no display or an input is bad; else the
    episode in sumo-gui and a line of its numbers."""
    problem = display_problem()
    if problem is not None:
        print(f"tj-hybrid: watch: {problem}", file=sys.stderr)
        return 2
    try:
        if not delay_ms >= 0:
            raise ConfigError(f"--delay {delay_ms}: milliseconds per step, must be >= 0")
        folder = checked_agent(cfg, agent, "watch")
        if routes is not None:
            check_readable_file(routes, "--routes")
    except ConfigError as exc:
        print(f"tj-hybrid: watch: {exc}", file=sys.stderr)
        return 2
    from tj_hybrid.evaluation import acting_policy
    from tj_rl.env import TrafficSignalCore
    from tj_rl.eval import run_episode

    setup = prepare_agent_setup(cfg, folder, None)
    traffic = routes if routes is not None else setup.held_out.files[0]
    scenario = setup.heldout_scenario.each_window()[0].with_routes(traffic)
    env = dataclasses.replace(setup.env, backend="traci", reader="subscription", metrics=True,
                              route_files=(), gui=True, gui_delay_ms=delay_ms)  # fmt: skip
    seed = cfg.phase2.eval.sumo_seeds[0]
    print(f"watch: {folder} on {traffic.name}, {scenario.describe_windows()}, SUMO seed {seed}; "
          "close the window to stop", flush=True)  # fmt: skip
    core = TrafficSignalCore(env, scenario=scenario)
    try:
        policy = acting_policy(cfg, folder)
        row = run_episode(core, policy, 0, seed)
        end = core.sim_time
    finally:
        core.close()
    if row["status"] != "time_limit":  # sumo-gui gone: the window was closed
        print(f"watch: stopped at {end:g} s: the window was closed")
    else:
        print(f"watch: episode ended at {end:g} s: average delay {row['avg_delay']:.2f} s, "
              f"{row['throughput']:g} vehicles through")  # fmt: skip
    return 0
