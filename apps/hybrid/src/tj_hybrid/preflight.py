"""Inputs checked before anything starts: a bad path is a one-line error and exit status 2,
never a traceback after minutes of work or an empty run directory."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from tj_hybrid.config import ConfigError, HybridConfig
from tj_hybrid.data_paths import scenario_data_dir
from tj_hybrid.phases import PhaseSpec
from tj_hybrid.run_dir import RunDir
from tj_hybrid.traffic import demand_source, episode_windows, scenario_span

__all__ = [
    "check_controllable_lights",
    "check_demand",
    "check_lookahead",
    "check_readable_file",
    "check_scenario",
    "check_writable_dir",
    "preflight",
]


def check_writable_dir(path: Path, what: str) -> None:
    """``path`` is (or can be created as) a directory this process may write into."""
    path = Path(path)
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"{what} {path}: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} {path}: {probe} is not writable")


def check_readable_file(path: Path, what: str) -> None:
    if not Path(path).is_file():
        raise ConfigError(f"{what} {path}: no such file")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{what} {path}: not readable")


def check_scenario(config: HybridConfig) -> None:
    """The scenario's .sumocfg and the files it names exist and parse (times in SUMO's forms),
    every configured episode window lies inside the scenario's time span, and the training
    demand can be made (``check_demand``)."""
    from tj_rl.env import Scenario, ScenarioError

    path = config.scenario.path
    check_readable_file(path, "scenario.path")
    try:
        scenario = Scenario.from_sumocfg(path)
    except ScenarioError as exc:
        raise ConfigError(f"scenario.path: {exc}") from None
    record, p2 = config.phase1.record, config.phase2
    checks = [("phase2", p2.episode_seconds, p2.windows)]
    if config.phase1.data.json_source is None:  # phase 1 records from the scenario
        checks.insert(0, ("phase1.record", record.episode_seconds, record.windows))
    for section, seconds, windows in checks:
        try:
            episode_windows(scenario, seconds, windows, section)
        except ScenarioError as exc:
            key = f"{section}.{'episode_seconds' if windows is None else 'windows'}"
            raise ConfigError(f"{key}: {exc}") from None
    check_demand(config)


_ROUTED: set[Path] = set()  # own-demand files whose routing this process already checked


def check_demand(config: HybridConfig) -> None:
    """The training demand can be made: ``phase2.demand.source`` resolves, and the scenario's
    own demand routes on its net (duarouter, into a temporary folder: a route over an edge the
    net lacks is one line here, not a traceback in phase 2). Routed once: not again when the
    demand pool already holds the file (its name digests the net, route and additional files),
    nor at the next phase's preflight in the same process. A refused run writes nothing."""
    import tempfile

    from tj_rl.env import ScenarioError
    from tj_rl.traffic import ORIGINAL, VariationPool, is_complete, write_variation

    try:
        span = scenario_span(config)
        if demand_source(config, span) != "scenario":
            return
        pool = VariationPool(span, scenario_data_dir(config) / "demand", seeds=(1,))
        own = pool.path_for(ORIGINAL)
        if own in _ROUTED or is_complete(own):
            return
        with tempfile.TemporaryDirectory(prefix="tj-demand-check-") as tmp:
            write_variation(span, ORIGINAL, Path(tmp) / "own.rou.xml")
        _ROUTED.add(own)
    except ScenarioError as exc:
        raise ConfigError(f"phase2.demand: {exc}") from None


def check_controllable_lights(config: HybridConfig) -> None:
    """The scenario's net has at least one light the env can control (read from the net file:
    no SUMO, no Ray); the error names the file."""
    from tj_rl.env import ScenarioError
    from tj_rl.env.topology import read_topology

    env = config.scenario.env
    try:
        read_topology(scenario_span(config), yellow_time=env.yellow_time,
                      all_red_time=env.all_red_time, reach=env.obs_radius + 50.0,
                      crossing_speed=env.crossing_speed)  # fmt: skip
    except ScenarioError as exc:
        raise ConfigError(f"scenario.path {config.scenario.path}: {exc}") from None


def check_lookahead(config: HybridConfig) -> None:
    """The look-ahead teacher (``phase2.imitation.lookahead_s`` > 0, the ``cpu`` profile) forks
    the process running SUMO and reads /proc: libsumo on Linux (WSL2 included). Said before
    phase 1 starts, not when phase 2 first records demonstrations."""
    im = config.phase2.imitation
    if not (im.enabled and im.lookahead_s > 0):
        return
    from tj_rl.control import lookahead_unsupported

    why = lookahead_unsupported(config.scenario.env.backend)
    if why is not None:
        why = why.replace("backend=", "scenario.env.backend=")
        raise ConfigError(
            f"phase2.imitation.lookahead_s={im.lookahead_s:g}: the look-ahead teacher forks the "
            f"process running SUMO, so it needs scenario.env.backend=libsumo on Linux (WSL2 "
            f"included), but {why}: set phase2.imitation.lookahead_s=0 (or use --profile smoke)"
        )


def preflight(config: HybridConfig, specs: Sequence[PhaseSpec], run_dir: RunDir, *,
              resume: bool, registry: Sequence[PhaseSpec]) -> None:  # fmt: skip
    """Check the run directory, the hand-offs between phases and each phase's own inputs."""
    check_writable_dir(run_dir.path, "run directory")
    selected = {s.name for s in specs}
    every = {s.name: s for s in registry}
    for spec in specs:
        pdir = run_dir.phase(spec.folder)
        if not resume and (pdir.result.exists() or any(pdir.checkpoints.glob("*"))):
            raise ConfigError(
                f"{pdir.root} already has checkpoints or a result of phase {spec.name}: pass "
                "--resume to continue the run, or choose another run.name"
            )
        src = spec.starts_from
        if src is not None and src not in selected:
            agent = run_dir.phase(every[src].folder).agent
            if not (agent / "config.json").is_file():
                raise ConfigError(
                    f"phase {spec.name} starts from phase {src}'s agent, which {agent} does not "
                    f"hold: run phase {src} first (--phase all), or set run.name to a run that did"
                )
        spec.load().preflight(config)
