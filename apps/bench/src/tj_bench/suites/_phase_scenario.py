"""What the phase suites train on: the scenario (the embedded default, a generated 2x2 grid or
any .sumocfg), where its dataset goes, and the tiny settings of ``--quick``.

The quick settings are the ones apps/hybrid's end-to-end tests use (``SMALL``, ``TINY_PHASE2``,
``TINY_PHASE3`` in its tests/conftest.py), copied: a real run of each phase in about a minute.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tj_bench.suites._phase_app import AppArgs, hybrid_app

__all__ = ["QUICK_PHASE1", "QUICK_PHASE2", "QUICK_PHASE3", "QUICK_PROFILE", "base_args",
           "grid_scenario", "scenario_key"]  # fmt: skip

QUICK_PROFILE = "smoke"
EMBEDDED = {"arterial": "configs/scenarios/arterial/arterial.sumocfg"}  # more scenarios of the repository
# A small but real phase 1: the embedded scenario, 5-minute episodes, tiny model, 2 gloo ranks.
QUICK_PHASE1 = (
    "phase1.record.train_episodes=3", "phase1.record.holdout_episodes=1",
    "phase1.record.episode_seconds=300", "phase1.steps=40", "phase1.checkpoint_every=10",
    "phase1.log_every=5", "phase1.eval_batches=5",
)  # fmt: skip
# A tiny but real phase 2: 2 PPO iterations on 5-minute episodes, one held-out route seed.
QUICK_PHASE2 = (
    "phase2.iterations=2", "phase2.checkpoint_every=1", "phase2.episode_seconds=300",
    "phase2.ppo.train_batch=120", "phase2.ppo.minibatch=60", "phase2.ppo.epochs=2",
    "phase2.demand.train_seeds=2", "phase2.demand.rates=[600,1200]",
    "phase2.demand.heldout_seeds=[101]", "phase2.eval.sumo_seeds=[9]",
    # the teacher's clone, small: 2 candidates, 2 demonstration episodes + 1 DAgger episode
    "phase2.imitation.candidates=[fixed-time,max-occupancy]", "phase2.imitation.episodes=2",
    "phase2.imitation.dagger_episodes=1", "phase2.imitation.clone.epochs=3",
    "phase2.validation.route_seeds=[5001]", "phase2.validation.sumo_seeds=[80001]",
    "phase2.sims_per_runner=2",  # the smoke profile's parallel sampling, 2 children
)  # fmt: skip
# A tiny but real phase 3: 3 PPO-Lagrangian iterations of 64 decisions, 2 ranks, 1 collector each.
QUICK_PHASE3 = (
    "phase3.iterations=3", "phase3.samples_per_iteration=64", "phase3.effective_batch=32",
    "phase3.micro_batch=16", "phase3.epochs=2", "phase3.checkpoint_every=1",
    "phase3.collect.fragment_steps=16", "phase3.collect.collectors=2",
)  # fmt: skip


def grid_scenario(folder: Path) -> Path:
    """A generated 2x2 grid of lights with tj-rl's builder (its .sumocfg); deterministic."""
    from tj_rl.env import SyntheticSpec, build_scenario

    spec = SyntheticSpec(kind="grid", rows=2, cols=2, duration=900.0, rates=(900.0,), seed=7,
                         name="grid2x2")  # fmt: skip
    sumocfg = build_scenario(spec, folder).sumocfg
    if sumocfg is None:
        raise RuntimeError(f"tj-rl's builder wrote no .sumocfg into {folder}")
    return sumocfg


def scenario_key(scenario: str) -> str:
    """``default``, ``grid`` or the absolute .sumocfg path: what two runs compare to match."""
    return scenario if scenario in ("default", "grid", *EMBEDDED) else str(Path(scenario).resolve())


def base_args(scenario: str, folder: Path, *, quick: bool, sets: Sequence[str] = ()) -> AppArgs:
    """Phase-1 arguments for a run whose dataset (and phase 2's demand pool beside it) goes under
    ``folder/data``: ``scenario`` is ``default``, ``grid`` (generated into ``folder/grid``) or a
    .sumocfg path; ``--quick`` adds the small phase-1 settings; ``sets`` come last."""
    folder = Path(folder)
    out = [f"phase1.data.path={folder / 'data' / 'phase1'}"]
    if scenario == "grid":
        out.append(f"scenario.path={grid_scenario(folder / 'grid')}")
    elif scenario != "default":
        path = (hybrid_app().parents[1] / EMBEDDED[scenario] if scenario in EMBEDDED else Path(scenario)).resolve()
        if path.suffix != ".sumocfg" or not path.is_file():
            raise ValueError(f"scenario: default, grid or an existing .sumocfg, got {scenario!r}")
        out.append(f"scenario.path={path}")
    if quick:
        out += QUICK_PHASE1
    return AppArgs(scenario=scenario_key(scenario), profile=QUICK_PROFILE if quick else None,
                   sets=(*out, *sets))  # fmt: skip
