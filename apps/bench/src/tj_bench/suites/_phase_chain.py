"""The chain of runs behind the phase suites: a phase-1 run, phase-2 runs continuing a copy of it
(one per variant and training seed), phase-3 runs continuing a copy of a phase-2 run.

Each run is ``apps/hybrid --phase N`` (``--resume`` on the copy, so the finished phases are
skipped and every variant and seed starts from the same phase-1 encoder, dataset, demand pool
and held-out traffic), and saves its arguments in the run folder for the next phase.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tj_bench.suites._phase_app import ARGS_FILE, AppArgs, run_app
from tj_bench.suites._phase_scenario import QUICK_PHASE2, QUICK_PHASE3, base_args, scenario_key
from tj_hybrid import phase_dir

__all__ = [
    "VARIANTS",
    "phase1_base",
    "phase2_args",
    "run_phase1",
    "run_phase2",
    "run_phase3",
]

# phase-2 policy variants: the product (PPO from the teacher's clone), PPO alone (the imitation
# ablation), the GNN ablation, and the graph-free baseline
VARIANTS: dict[str, tuple[str, ...]] = {
    "graph": (),
    "ppo-alone": ("phase2.imitation.teacher=none",),
    "gnn-random": ("phase2.gnn=random",),
    "gnn-finetune": ("phase2.gnn=finetune",),
    "lane-mlp": ("phase2.policy=lane-mlp",),
}


def _run(args: AppArgs, root: Path, name: str, phase: str, src: Path | None = None,
         skip: Sequence[str] = (), **app: Any) -> tuple[Path, float]:  # fmt: skip
    """``--phase PHASE`` into ``root/name`` (``--resume`` on a copy of the run ``src``, ``skip``
    left out), its arguments saved there for the next phase: (the run folder, wall s)."""
    resume = []
    if src is not None:
        shutil.rmtree(root / name, ignore_errors=True)
        shutil.copytree(src, root / name, ignore=shutil.ignore_patterns(ARGS_FILE, *skip))
        resume = ["--resume"]
    wall = run_app([*args.argv(), "--set", f"run.root={root}", "--set", f"run.name={name}",
                    "--phase", phase, *resume], root / f"{name}.log", **app)  # fmt: skip
    args.save(root / name)
    return root / name, wall


def run_phase1(args: AppArgs, root: Path, name: str, **app: Any) -> tuple[Path, float]:
    """``--phase 1`` into ``root/name``: (the run folder, wall s). ``app``: ``run_app``'s
    keywords (a clone's command)."""
    return _run(args, root, name, "1", **app)


def phase1_base(shared: dict[str, Any], root: Path, scenario: str, *, quick: bool,
                sets: Sequence[str] = ()) -> tuple[Path, AppArgs]:  # fmt: skip
    """The phase-1 run phase 2 starts from, and its arguments: ``root/base`` when it holds a
    finished one (kept from an earlier run with the same root), else the phase1 suite's run of
    this benchmark run when it used the same scenario, else a new phase-1 run in ``root/base``."""
    base = root / "base"
    if phase_dir(base, "1").finished:
        return base, AppArgs.load(base) or base_args(scenario, root, quick=quick, sets=sets)
    done = shared.get("phase1_run")
    made = AppArgs.load(done) if done is not None else None
    if made is not None and made.scenario == scenario_key(scenario):
        return Path(done), made
    args = base_args(scenario, root, quick=quick, sets=sets)
    return run_phase1(args, root, "base")[0], args


def phase2_args(made: AppArgs, variant: str, seed: int | None, *, quick: bool,
                sets: Sequence[str] = ()) -> AppArgs:  # fmt: skip
    """Phase 2's arguments after a phase-1 run made with ``made``."""
    return made.plus(*(QUICK_PHASE2 if quick else ()), *sets, *VARIANTS[variant], seed=seed)


def run_phase2(base: Path, made: AppArgs, root: Path, variant: str, seed: int, *,
               quick: bool, sets: Sequence[str] = ()) -> tuple[Path, float]:  # fmt: skip
    """``--phase 2 --resume`` of ``variant`` with training seed ``seed`` on a copy of ``base``
    (made with ``made``) in ``root/<variant>-s<seed>``: (the run folder, wall s)."""
    args = phase2_args(made, variant, seed, quick=quick, sets=sets)
    return _run(args, root, f"{variant}-s{seed}", "2", base)


def run_phase3(src: Path, made: AppArgs, root: Path, seed: int, *, quick: bool,
               sets: Sequence[str] = ()) -> tuple[Path, float]:  # fmt: skip
    """``--phase 3 --resume`` on a copy of the phase-2 run ``src`` (made with ``made``; its
    phase 3, Ray folder, checkpoints and report left out) in ``root/<src>-p3``: (the run folder,
    wall s)."""
    args = made.plus(*(QUICK_PHASE3 if quick else ()), *sets, seed=seed)
    p3 = phase_dir(src, "3")  # its names: phase 3's folder, any checkpoints and reports
    skip = (p3.root.name, p3.checkpoints.name, p3.report.name, "ray")
    return _run(args, root, f"{src.name}-p3", "3", src, skip)
