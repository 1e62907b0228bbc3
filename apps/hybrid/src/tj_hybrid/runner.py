"""Run the selected phases, in order, into one run directory (new, or resumed).

The runner knows phases only through the registry (``tj_hybrid.phases``): it checks every input
first, then runs each phase with the agent exported by the phase it starts from, writes each
phase's result when it finishes, and on ``--resume`` skips the phases that finished. Errors a user
can fix (config, data, an interrupted run) end with one clear line and exit status 2 (130/143 when
stopped by Ctrl-C/SIGTERM), never a traceback. Started by torchrun (``tj_hybrid.multinode``),
every rank runs this: the group is joined first, rank 0's run folder decides what is finished,
rank 0 alone writes the config, results and reports, and a lost peer ends every survivor with
one line naming the job's nodes (exit 1).
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from tj_data import StoreError
from tj_hybrid.config import ConfigError, LoadedConfig, to_plain
from tj_hybrid.data_paths import scenario_name
from tj_hybrid.interrupt import RunInterrupted, stop_on_signals
from tj_hybrid.multinode import (
    Torchrun,
    check_torchrun_run,
    join_job,
    peer_lost,
    rank_zero_value,
    torchrun_launch,
)
from tj_hybrid.phase_api import PhaseContext, PhaseResult
from tj_hybrid.phases import REGISTRY, PhaseSpec
from tj_hybrid.preflight import preflight
from tj_hybrid.report import write_run_report
from tj_hybrid.run_dir import RunDir
from tj_monitor import atomic_write_text

__all__ = ["latest_run", "run"]

log = logging.getLogger(__name__)


def _scenario_of(run: Path) -> Path | None:
    """The scenario a run ran (its config.yaml's ``scenario.path``); None when unreadable."""
    try:
        plain = yaml.safe_load(RunDir(path=run).config.read_text())
        return Path(plain["scenario"]["path"]).resolve()
    except (OSError, yaml.YAMLError, TypeError, KeyError):
        return None


def latest_run(root: Path, registry: Sequence[PhaseSpec] = REGISTRY,
               scenario: Path | None = None) -> RunDir | None:  # fmt: skip
    """The most recently modified run under ``root`` that holds any phase's work (and, given
    ``scenario``, ran that .sumocfg)."""
    folders = {s.folder for s in registry}

    def has_work(run: Path) -> bool:
        return any((run / f / "checkpoints").is_dir() or (run / f / "result.json").exists()
                   for f in folders)  # fmt: skip

    runs = [p for p in Path(root).glob("*") if has_work(p)]
    if scenario is not None:
        runs = [p for p in runs if _scenario_of(p) == Path(scenario).resolve()]
    return RunDir(path=max(runs, key=lambda p: p.stat().st_mtime)) if runs else None


def _run_dir(loaded: LoadedConfig, resume: bool, registry: Sequence[PhaseSpec]) -> RunDir:
    cfg = loaded.config
    if resume and cfg.run.name is None:  # this scenario's newest run
        found = latest_run(cfg.run.root, registry, scenario=cfg.scenario.path)
        if found is None:
            raise ConfigError(f"--resume: no run with checkpoints under {cfg.run.root} for the "
                              f"scenario {cfg.scenario.path} (set run.name to resume another)")
        return found
    run_dir = RunDir.resolve(cfg.run.root, cfg.run.name, scenario_name(cfg.scenario.path))
    if resume and not run_dir.path.is_dir():
        raise ConfigError(f"--resume: {run_dir.path} does not exist")
    return run_dir


def _resume_hint(run_dir: RunDir, specs: Sequence[PhaseSpec], profile: str,
                 registry: Sequence[PhaseSpec]) -> str:  # fmt: skip
    phases = specs[0].name if len(specs) == 1 else f"{specs[0].name}-{specs[-1].name}"
    if tuple(specs) == tuple(registry):
        phases = "all"
    return (f"uv run apps/hybrid --phase {phases} --profile {profile} "
            f"--set run.root={run_dir.path.parent} --set run.name={run_dir.path.name} "
            "--resume")  # fmt: skip


def _agent_for(spec: PhaseSpec, run_dir: RunDir, done: dict[str, PhaseResult],
               registry: Sequence[PhaseSpec]) -> Path | None:  # fmt: skip
    if spec.starts_from is None:
        return None
    if spec.starts_from in done:
        return done[spec.starts_from].agent
    folder = next(s.folder for s in registry if s.name == spec.starts_from)
    return run_dir.phase(folder).agent


def _run_phases(loaded: LoadedConfig, specs: Sequence[PhaseSpec], run_dir: RunDir,
                resume: bool, registry: Sequence[PhaseSpec],
                launch: Torchrun | None = None) -> None:  # fmt: skip
    done: dict[str, PhaseResult] = {}
    main = launch is None or launch.is_main
    for spec in specs:
        pdir = run_dir.phase(spec.folder)
        finished = PhaseResult.load(pdir.result) if resume else None
        if launch is not None:  # rank 0's folder decides (a node-local one may lag behind)
            finished = rank_zero_value(finished)
        if finished is not None:
            log.info("phase %s (%s) already finished; skipping it", spec.name, spec.title)
            done[spec.name] = finished
            continue
        context = PhaseContext(
            config=loaded.config, profile=loaded.profile, run_dir=run_dir, spec=spec,
            resume=resume, previous_agent=_agent_for(spec, run_dir, done, registry),
        )  # fmt: skip
        t0 = time.perf_counter()
        result = spec.load().run(context)
        wall = time.perf_counter() - t0  # this invocation's (a resumed phase: since the resume)
        result = dataclasses.replace(result, metrics={**result.metrics, "wall_s": wall})
        if not main:
            done[spec.name] = result
            continue
        result.save(pdir.result)
        done[spec.name] = result
        write_run_report(run_dir)  # runs/<run>/report.md: every finished phase so far
        print(f"phase {spec.name} done: {result.headline}; report {result.report}", flush=True)


def run(loaded: LoadedConfig, specs: Sequence[PhaseSpec], *, resume: bool = False,
        registry: Sequence[PhaseSpec] = REGISTRY) -> int:  # fmt: skip
    """Run ``specs`` (phases of ``registry``, in its order); returns the process exit status."""
    try:
        launch = torchrun_launch()
        if launch is not None:
            check_torchrun_run(loaded.config, specs)
        run_dir = _run_dir(loaded, resume, registry)
        preflight(loaded.config, specs, run_dir, resume=resume, registry=registry)
    except ConfigError as exc:
        print(f"tj-hybrid: {exc}", file=sys.stderr)
        return 2
    log.info("run directory %s%s", run_dir.path, " (resuming)" if resume else "")
    if launch is None or launch.is_main:
        run_dir.path.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run_dir.config, yaml.safe_dump(to_plain(loaded.config), sort_keys=False))
    if launch is not None:
        return _run_as_rank(loaded, specs, run_dir, resume, registry, launch)
    from tj_dist import RankFailedError

    try:
        with stop_on_signals():
            _run_phases(loaded, specs, run_dir, resume, registry)
    except RunInterrupted as exc:
        print(
            f"tj-hybrid: {exc}; the newest checkpoint is kept. Continue with:\n  "
            + _resume_hint(run_dir, specs, loaded.profile, registry),
            file=sys.stderr,
        )
        return exc.exit_code
    except ConfigError as exc:
        print(f"tj-hybrid: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:  # corrupt, incomplete or malformed data: name it, no traceback
        print(f"tj-hybrid: data error: {exc}", file=sys.stderr)
        return 2
    except RankFailedError as exc:
        print(f"tj-hybrid: training failed: {exc}", file=sys.stderr)
        return 1
    return 0


def _run_as_rank(loaded: LoadedConfig, specs: Sequence[PhaseSpec], run_dir: RunDir,
                 resume: bool, registry: Sequence[PhaseSpec], launch: Torchrun) -> int:  # fmt: skip
    """One rank of a torchrun job: the phases in place; a lost peer is one line, exit 1 (torchrun
    then stops this node's other ranks)."""
    import tj_dist

    nodes = join_job(launch, loaded.config.dist.backend)
    log.info("rank %d of %d; the job's nodes: %s", launch.rank, launch.world_size, nodes)
    try:
        with stop_on_signals():
            _run_phases(loaded, specs, run_dir, resume, registry, launch)
    except RunInterrupted as exc:
        if launch.is_main:
            print(f"tj-hybrid: {exc}; restart every node's command with --resume",
                  file=sys.stderr)  # fmt: skip
        return exc.exit_code
    except (ConfigError, StoreError) as exc:
        print(f"tj-hybrid: rank {launch.rank}: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # torch.distributed's errors are RuntimeErrors
        if not peer_lost(exc):
            raise
        print(f"tj-hybrid: rank {launch.rank} (node {launch.node_rank}) lost a peer: "
              f"{str(exc).splitlines()[0]}; the job's nodes: {nodes}. Restart every node's "
              "command with --resume to continue from the newest checkpoint",
              file=sys.stderr)  # fmt: skip
        return 1
    finally:
        tj_dist.cleanup()
    return 0
