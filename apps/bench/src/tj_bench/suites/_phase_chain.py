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
    "parse_seeds",
    "parse_variants",
    "phase1_base",
    "phase2_args",
    "run_phase1",
    "run_phase2",
    "run_phase3",
]

# phase-2 policy variants: the product, the GNN ablation, and the graph-free baseline
VARIANTS: dict[str, tuple[str, ...]] = {
    "graph": (),
    "gnn-random": ("phase2.gnn=random",),
    "gnn-finetune": ("phase2.gnn=finetune",),
    "lane-mlp": ("phase2.policy=lane-mlp",),
}


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]`` (at least one, no repeats)."""
    seeds = [int(s) for s in text.replace(" ", "").split(",") if s]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds: distinct integers, comma-separated, got {text!r}")
    return seeds


def parse_variants(text: str) -> list[str]:
    """``"graph,lane-mlp"`` -> the variants, each one of ``VARIANTS``."""
    names = [v for v in text.replace(" ", "").split(",") if v]
    bad = [v for v in names if v not in VARIANTS]
    if not names or bad or len(set(names)) != len(names):
        raise ValueError(f"variants: distinct names of {', '.join(VARIANTS)}, got {text!r}")
    return names


def _where(root: Path, name: str) -> list[str]:
    return ["--set", f"run.root={root}", "--set", f"run.name={name}"]


def run_phase1(args: AppArgs, root: Path, name: str, **app: Any) -> tuple[Path, float]:
    """``--phase 1`` into ``root/name``: (the run folder, wall s). ``app``: ``run_app``'s
    keywords (a clone's command)."""
    wall = run_app([*args.argv(), *_where(root, name), "--phase", "1"], root / f"{name}.log", **app)
    args.save(root / name)
    return root / name, wall


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


def _copy(src: Path, dst: Path, *skip: str) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(ARGS_FILE, *skip))


def phase2_args(made: AppArgs, variant: str, seed: int | None, *, quick: bool,
                sets: Sequence[str] = ()) -> AppArgs:  # fmt: skip
    """Phase 2's arguments after a phase-1 run made with ``made``."""
    return made.plus(*(QUICK_PHASE2 if quick else ()), *sets, *VARIANTS[variant], seed=seed)


def run_phase2(base: Path, made: AppArgs, root: Path, variant: str, seed: int, *,
               quick: bool, sets: Sequence[str] = ()) -> tuple[Path, float]:  # fmt: skip
    """``--phase 2 --resume`` of ``variant`` with training seed ``seed`` on a copy of ``base``
    (made with ``made``) in ``root/<variant>-s<seed>``: (the run folder, wall s)."""
    args = phase2_args(made, variant, seed, quick=quick, sets=sets)
    name = f"{variant}-s{seed}"
    _copy(base, root / name)
    wall = run_app([*args.argv(), *_where(root, name), "--phase", "2", "--resume"],
                   root / f"{name}.log")  # fmt: skip
    args.save(root / name)
    return root / name, wall


def run_phase3(src: Path, made: AppArgs, root: Path, seed: int, *, quick: bool,
               sets: Sequence[str] = ()) -> tuple[Path, float]:  # fmt: skip
    """``--phase 3 --resume`` on a copy of the phase-2 run ``src`` (made with ``made``; its
    phase 3, Ray folder, checkpoints and report left out) in ``root/<src>-p3``: (the run folder,
    wall s)."""
    args = made.plus(*(QUICK_PHASE3 if quick else ()), *sets, seed=seed)
    name = f"{src.name}-p3"
    _copy(src, root / name, "phase3", "ray", "checkpoints", "report.md")
    wall = run_app([*args.argv(), *_where(root, name), "--phase", "3", "--resume"],
                   root / f"{name}.log")  # fmt: skip
    args.save(root / name)
    return root / name, wall
