"""``tj-hybrid eval --checkpoints RUN/phase2``: every policy a phase-2 run kept (the clone PPO
started from, as iteration 0, and each kept checkpoint, ``phase2.keep_checkpoints``) on
validation traffic, which chose the exported one, and on held-out traffic against the baselines.

It answers what a user asks after a run: did validation pick well, would another checkpoint have
done better, and are the policies even told apart by these episodes. Held-out traffic stays for
reporting: the lowest held-out row is shown as hindsight, never exported. The policies act as
phase 2 scores them (no dilemma-zone guard). Everything goes to a folder of its own,
``<run.root>/checkpoints-<scenario>-<timestamp>/`` (``report.md``, ``checkpoints.json``,
``eval.json``, ``checkpoints.png``, the exported checkpoints under ``agents/``)."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import sys
from pathlib import Path
from typing import Any

from tj_hybrid.commands.agent import AgentError, checked_agent, prepare_agent_setup
from tj_hybrid.commands.checkpoint_table import Candidate
from tj_hybrid.config import ConfigError, HybridConfig
from tj_hybrid.data_paths import scenario_name
from tj_hybrid.preflight import check_writable_dir
from tj_hybrid.run_dir import RunDir

__all__ = ["Kept", "evaluate_checkpoints", "kept_policies", "run_checkpoints"]

log = logging.getLogger(__name__)
CLONE = "clone"  # the clone's row (iteration 0)
EXPORTED = "exported"  # the exported agent's row when no kept policy is it
_PREFIX = "iter-"  # phase 2's checkpoint folders: iter-NNNNN


@dataclasses.dataclass(frozen=True, kw_only=True)
class Kept:
    """What a phase-2 folder holds: its folder, the agent the checkpoints export onto (the
    phase's exported agent, else phase 1's), the clone, the checkpoints by iteration, the
    exported agent and the iteration validation chose (None: not recorded)."""

    folder: Path
    base: Path
    clone: Path | None
    checkpoints: dict[int, Path]
    exported: Path | None
    chosen: int | None


def _phase2_folder(path: Path | None) -> Path:
    if path is None:
        raise AgentError("eval --checkpoints needs a phase-2 folder, e.g. runs/<run>/phase2")
    if not path.is_dir():
        raise AgentError(f"--checkpoints {path}: no such directory")
    if (path / "phase2").is_dir() and not (path / "checkpoints").is_dir():
        return path / "phase2"
    return path


def kept_policies(path: Path | None) -> Kept:
    """Read a phase-2 folder (a run folder holding ``phase2/`` is taken too); ``AgentError`` with
    one line when it holds no policy to compare or nothing to export the checkpoints onto."""
    folder = _phase2_folder(path)
    checkpoints = {int(p.name[len(_PREFIX):]): p
                   for p in sorted((folder / "checkpoints").glob(f"{_PREFIX}*"))
                   if p.is_dir() and p.name[len(_PREFIX):].isdigit()}  # fmt: skip
    clone = folder / "imitation" / "clone"
    clone = clone if (clone / "config.json").is_file() else None
    if not checkpoints and clone is None:
        raise AgentError(f"--checkpoints {folder}: no kept checkpoint (checkpoints/iter-NNNNN) "
                         "and no clone (imitation/clone): give a phase-2 folder of a run; set "
                         "phase2.keep_checkpoints to keep more than the last 2")  # fmt: skip
    exported = folder / "agent"
    exported = exported if (exported / "config.json").is_file() else None
    base = exported or folder.parent / "phase1" / "agent"
    if checkpoints and not (base / "config.json").is_file():
        raise AgentError(f"--checkpoints {folder}: neither its agent/ nor {base} holds an "
                         "exported agent to export the checkpoints onto")  # fmt: skip
    chosen = None
    state = folder / "validation" / "validation.json"
    if state.is_file():
        best = json.loads(state.read_text()).get("best")
        chosen = int(best[0]) if best else None
    return Kept(folder=folder, base=base, clone=clone, checkpoints=checkpoints,
                exported=exported, chosen=chosen)  # fmt: skip


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

    found: list[tuple[str, int | None, Path]] = []
    if kept.clone is not None:
        found.append((CLONE, 0, kept.clone))
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
        delays,
        evaluate_policies,
        save_evaluation,
        validation_table,
        write_phase_report,
    )
    from tj_hybrid.phase2.evaluate import trained_policy

    out.mkdir(parents=True, exist_ok=True)
    episodes = out / "episodes"
    setup = prepare_agent_setup(cfg, kept.base, episodes)
    candidates = _candidates(cfg, kept, out / "agents")
    policies = {c.name: trained_policy(cfg, a) for c, a in candidates.items()}
    log.info("eval --checkpoints: %d policies of %s on validation and held-out traffic",
             len(policies), kept.folder)  # fmt: skip
    validation: dict[str, float] = {}
    if setup.validation is not None:
        table = validation_table(cfg, setup, policies, parallel=True)
        validation = {p: mean for p, (mean, _) in delays(table).items()}
    evaluation = evaluate_policies(cfg, setup, policies, cost_weights=cfg.phase3.cost_weights)
    save_evaluation(out / "eval.json", evaluation)
    rows = candidate_rows(list(candidates), validation, evaluation)
    table, lines = to_markdown(rows), summary_lines(rows)
    picture = plot_candidates(rows, out / "checkpoints.png")
    _save_rows(out / "checkpoints.json", kept, rows)
    facts = {
        "phase-2 folder": kept.folder.resolve(),
        "scenario": cfg.scenario.path,
        "held-out time windows": setup.heldout_scenario.describe_windows(),
        "validation": (f"{setup.validation.describe()}; SUMO seeds "
                       f"{list(cfg.phase2.validation.sumo_seeds)}" if setup.validation else "none"),
        "acting": "as phase 2 scores its policies (no dilemma-zone guard, no learned shield)",
    }  # fmt: skip
    report = write_phase_report(
        out / "report.md", title=f"Every kept phase-2 policy on {scenario_name(cfg.scenario.path)}",
        facts=facts, evaluation=evaluation, lead=[table, "", *lines],
        pictures=[picture.name] if picture else [],
    )  # fmt: skip
    if episodes.is_dir() and not any(episodes.iterdir()):
        episodes.rmdir()
    return table, lines, report


def _save_rows(path: Path, kept: Kept, rows: list[Any]) -> None:
    from tj_monitor import atomic_write_json

    def finite(d: dict[str, float]) -> dict[str, float | None]:
        return {k: (v if math.isfinite(v) else None) for k, v in d.items()}

    atomic_write_json(path, {"folder": str(kept.folder), "chosen": kept.chosen, "rows": [
        {"name": r.candidate.name, "iteration": r.candidate.iteration,
         "exported": r.candidate.exported,
         "validation": r.validation if math.isfinite(r.validation) else None,
         "delay": finite(r.delay), "change": finite(r.change), "se": finite(r.se),
         "best": r.best, "best_delay": finite(r.best_delay), "worst": finite(r.worst)}
        for r in rows]})  # fmt: skip

