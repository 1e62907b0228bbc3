"""``tj-hybrid eval --checkpoints RUN/phase2`` (or ``RUN/phase3``): every policy a phase kept on
validation traffic, which chose the exported one, and on held-out traffic against the baselines.
Phase 2's are the clone PPO started from (iteration 0) and each kept checkpoint
(``phase2.keep_checkpoints``), exported here; phase 3's are phase 2's policy (iteration 0) and
its candidates (``candidates/iter-N``, one per checkpoint).

It answers what a user asks after a run: did validation pick well, would another checkpoint have
done better, and are the policies even told apart by these episodes. Held-out traffic stays for
reporting: the lowest held-out row is shown as hindsight, never exported. The policies act as
their phase scores them (phase 2: alone; phase 3: behind ``phase3.guard`` and the learned
shield, as ``eval --agent`` runs an agent). Everything goes to a folder of its own,
``<run.root>/checkpoints-<scenario>-<timestamp>/`` (``report.md``, ``checkpoints.json``,
``eval.json``, ``checkpoints.png``, phase 2's exported checkpoints under ``agents/``)."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import sys
from pathlib import Path
from typing import Any, Literal

from tj_hybrid.commands.agent import AgentError, checked_agent, prepare_agent_setup
from tj_hybrid.commands.checkpoint_table import Candidate
from tj_hybrid.config import ConfigError, HybridConfig
from tj_hybrid.data_paths import scenario_name
from tj_hybrid.preflight import check_writable_dir
from tj_hybrid.run_dir import RunDir

__all__ = ["Kept", "evaluate_checkpoints", "kept_policies", "run_checkpoints"]

log = logging.getLogger(__name__)
CLONE = "clone"  # phase 2's clone (iteration 0)
PHASE2 = "phase2"  # phase 2's policy among phase 3's candidates (iteration 0)
EXPORTED = "exported"  # the exported agent's row when no kept policy is it
_PREFIX = "iter-"  # phase 2's checkpoint folders and phase 3's candidates: iter-NNNNN


@dataclasses.dataclass(frozen=True, kw_only=True)
class Kept:
    """What a phase folder holds: which phase, the agent checked against the scenario (and that
    phase 2's checkpoints export onto), the agent folders ready to run (name -> (iteration,
    folder)), phase 2's RLlib checkpoints still to export (by iteration), the exported agent and
    the iteration validation chose (None: not recorded)."""

    folder: Path
    phase: Literal["phase2", "phase3"]
    base: Path
    agents: dict[str, tuple[int, Path]]
    checkpoints: dict[int, Path]
    exported: Path | None
    chosen: int | None


def _numbered(folder: Path) -> dict[int, Path]:
    """``folder/iter-NNNNN`` folders by N (half-written ``.iter-*.tmp`` ones left out)."""
    return {int(p.name[len(_PREFIX):]): p for p in sorted(folder.glob(f"{_PREFIX}*"))
            if p.is_dir() and p.name[len(_PREFIX):].isdigit()}  # fmt: skip


def _agent(path: Path) -> Path | None:
    return path if (path / "config.json").is_file() else None


def _phase_folder(path: Path | None) -> Path:
    if path is None:
        raise AgentError("eval --checkpoints needs a phase folder, e.g. runs/<run>/phase2")
    if not path.is_dir():
        raise AgentError(f"--checkpoints {path}: no such directory")
    if (path / "phase2").is_dir() and not (path / "checkpoints").is_dir():
        return path / "phase2"
    return path


def _chosen(path: Path, key: str) -> int | None:
    """The chosen iteration kept in ``path`` under ``key`` (None: no such file or entry)."""
    if not path.is_file():
        return None
    value = json.loads(path.read_text()).get(key)
    return int(value[0] if isinstance(value, list) else value) if value is not None else None


def _phase3(folder: Path) -> Kept:
    agents = {f"{_PREFIX}{i:05d}": (i, p) for i, p in _numbered(folder / "candidates").items()
              if _agent(p)}  # fmt: skip
    start = _agent(folder.parent / "phase2" / "agent")
    if not agents:
        raise AgentError(f"--checkpoints {folder}: no phase-3 candidate (candidates/iter-NNNNN) "
                         "to compare")  # fmt: skip
    exported = _agent(folder / "agent")
    base = exported or start or next(iter(agents.values()))[1]
    return Kept(folder=folder, phase="phase3", base=base,
                agents=({PHASE2: (0, start)} if start else {}) | agents, checkpoints={},
                exported=exported,
                chosen=_chosen(folder / "candidates" / "selection.json", "chosen"))  # fmt: skip


def kept_policies(path: Path | None) -> Kept:
    """Read a phase-2 or phase-3 folder (a run folder is taken for its ``phase2/``);
    ``AgentError`` with one line when it holds no policy to compare or nothing to export phase
    2's checkpoints onto."""
    folder = _phase_folder(path)
    if (folder / "candidates").is_dir():
        return _phase3(folder)
    checkpoints = _numbered(folder / "checkpoints")
    clone = _agent(folder / "imitation" / "clone")
    if not checkpoints and clone is None:
        raise AgentError(f"--checkpoints {folder}: no kept checkpoint (checkpoints/iter-NNNNN) "
                         "and no clone (imitation/clone): give a phase-2 folder of a run; set "
                         "phase2.keep_checkpoints to keep more than the last 2")  # fmt: skip
    exported = _agent(folder / "agent")
    base = exported or folder.parent / "phase1" / "agent"
    if checkpoints and not _agent(base):
        raise AgentError(f"--checkpoints {folder}: neither its agent/ nor {base} holds an "
                         "exported agent to export the checkpoints onto")  # fmt: skip
    return Kept(folder=folder, phase="phase2", base=base,
                agents={CLONE: (0, clone)} if clone else {}, checkpoints=checkpoints,
                exported=exported,
                chosen=_chosen(folder / "validation" / "validation.json", "best"))  # fmt: skip


def run_checkpoints(cfg: HybridConfig, path: Path | None) -> int:
    """The command: check the inputs (one line and 2 when bad), evaluate, print the table."""
    try:
        kept = kept_policies(path)
        checked_agent(cfg, kept.base, "eval")
        check_writable_dir(cfg.run.root, "run directory")
    except ConfigError as exc:
        print(f"tj-hybrid: eval: {exc}", file=sys.stderr)
        return 2
    out = RunDir.resolve(cfg.run.root, None, f"checkpoints-{scenario_name(cfg.scenario.path)}").path
    table, lines, report = evaluate_checkpoints(cfg, kept, out)
    print("", table, "", *lines, "", f"report: {report}", sep="\n")
    return 0


def _same_weights(a: Path, b: Path) -> bool:
    """Two exported agents with equal tensors (the exported one among the kept ones)."""
    from safetensors.torch import load_file

    if not all((p / "model.safetensors").is_file() for p in (a, b)):
        return False
    x, y = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    return x.keys() == y.keys() and all(bool((x[k] == y[k]).all()) for k in x)


def _candidates(cfg: HybridConfig, kept: Kept, agents: Path) -> dict[Candidate, Path]:
    """Each kept policy as an agent folder (the checkpoints exported under ``agents``), the
    exported one marked; the exported agent gets a row of its own when no kept one is it."""
    from tj_hybrid.phase2.train import export_policy

    found: list[tuple[str, int | None, Path]] = [(n, i, a) for n, (i, a) in kept.agents.items()]
    for i, checkpoint in kept.checkpoints.items():
        log.info("eval --checkpoints: exporting %s", checkpoint)
        found.append((checkpoint.name, i, export_policy(
            checkpoint, agents / checkpoint.name, base=kept.base, preset=cfg.model.preset,
            policy=cfg.phase2.policy)))  # fmt: skip
    mine = [n for n, _, a in found if kept.exported is not None and _same_weights(a, kept.exported)]
    out = {Candidate(name=n, iteration=i, exported=n in mine[:1]): a for n, i, a in found}
    if kept.exported is not None and not mine:
        out[Candidate(name=EXPORTED, iteration=kept.chosen, exported=True)] = kept.exported
    return out


def evaluate_checkpoints(cfg: HybridConfig, kept: Kept, out: Path) -> tuple[str, list[str], Path]:
    """Evaluate ``kept`` into the folder ``out``: the table, its summary lines, the report."""
    from tj_hybrid.commands.checkpoint_table import (
        candidate_rows,
        plot_candidates,
        summary_lines,
        to_markdown,
    )
    from tj_hybrid.evaluation import (
        acting_note,
        acting_policy,
        evaluate_policies,
        frontier_points,
        held_out_set,
        save_evaluation,
        validation_table,
        write_phase_report,
    )
    from tj_hybrid.phase2.evaluate import trained_policy

    out.mkdir(parents=True, exist_ok=True)
    episodes = out / "episodes"
    setup = prepare_agent_setup(cfg, kept.base, episodes)
    candidates = _candidates(cfg, kept, out / "agents")
    act = trained_policy if kept.phase == "phase2" else acting_policy
    policies = {c.name: act(cfg, a) for c, a in candidates.items()}
    log.info("eval --checkpoints: %d policies of %s on validation and held-out traffic",
             len(policies), kept.folder)  # fmt: skip
    weights = cfg.phase3.cost_weights
    validation: dict[str, tuple[float, float]] = {}
    if setup.validation is not None:
        table = validation_table(cfg, setup, policies, cost_weights=weights, parallel=True)
        summary = held_out_set(table, ("avg_delay", "cost"))["summary"]
        validation = dict(frontier_points(summary))
    evaluation = evaluate_policies(cfg, setup, policies, cost_weights=weights)
    save_evaluation(out / "eval.json", evaluation)
    rows = candidate_rows(list(candidates), validation, evaluation)
    table, lines = to_markdown(rows), summary_lines(rows)
    picture = plot_candidates(rows, out / "checkpoints.png", phase=kept.phase)
    _save_rows(out / "checkpoints.json", kept, rows)
    facts = {
        "phase-2 folder": kept.folder.resolve(),
        "scenario": cfg.scenario.path,
        "held-out time windows": setup.heldout_scenario.describe_windows(),
        "validation": (f"{setup.validation.describe()}; SUMO seeds "
                       f"{list(cfg.phase2.validation.sumo_seeds)}" if setup.validation else "none"),
        "acting": ("as phase 2 scores its policies (no dilemma-zone guard, no learned shield)"
                   if kept.phase == "phase2" else acting_note(cfg)),
    }  # fmt: skip
    report = write_phase_report(
        out / "report.md",
        title=f"Every kept {kept.phase} policy on {scenario_name(cfg.scenario.path)}",
        facts=facts, evaluation=evaluation, lead=[table, "", *lines],
        pictures=[picture.name] if picture else [],
    )  # fmt: skip
    if episodes.is_dir() and not any(episodes.iterdir()):
        episodes.rmdir()
    return table, lines, report


def _save_rows(path: Path, kept: Kept, rows: list[Any]) -> None:
    from tj_monitor import atomic_write_json

    def num(x: float) -> float | None:
        return x if math.isfinite(x) else None

    def finite(d: dict[str, float]) -> dict[str, float | None]:
        return {k: num(v) for k, v in d.items()}

    atomic_write_json(path, {"folder": str(kept.folder), "phase": kept.phase,
                             "chosen": kept.chosen, "rows": [
        {"name": r.candidate.name, "iteration": r.candidate.iteration,
         "exported": r.candidate.exported, "validation": num(r.validation),
         "validation_cost": num(r.validation_cost), "cost": finite(r.cost),
         "delay": finite(r.delay), "change": finite(r.change), "se": finite(r.se),
         "best": r.best, "best_delay": finite(r.best_delay), "worst": finite(r.worst)}
        for r in rows]})  # fmt: skip

