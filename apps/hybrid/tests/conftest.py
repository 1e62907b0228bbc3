"""Shared fixtures: one small recorded dataset for every end-to-end test of this module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[1]

# A small but real phase-1 run: the embedded SUMO scenario, 5 minutes per episode, tiny model,
# 2 gloo ranks. Shared by the end-to-end tests through `small_args` (phase 1 only: a test that
# wants more passes a later `--phase`, which wins).
SMALL = [
    "--phase",
    "1",
    "--profile",
    "smoke",
    "--set",
    "phase1.record.train_episodes=3",
    "--set",
    "phase1.record.holdout_episodes=1",
    "--set",
    "phase1.record.episode_seconds=300",
    "--set",
    "phase1.steps=40",
    "--set",
    "phase1.checkpoint_every=10",
    "--set",
    "phase1.log_every=5",
    "--set",
    "phase1.eval_batches=5",
]


# A tiny but real phase 2 after SMALL's phase 1: 2 PPO iterations on 5-minute episodes.
TINY_PHASE2 = [
    "--set", "phase2.iterations=2", "--set", "phase2.checkpoint_every=1",
    "--set", "phase2.episode_seconds=300", "--set", "phase2.ppo.train_batch=120",
    "--set", "phase2.ppo.minibatch=60", "--set", "phase2.ppo.epochs=2",
    "--set", "phase2.demand.train_seeds=2", "--set", "phase2.demand.rates=[600,1200]",
    "--set", "phase2.demand.heldout_seeds=[101]", "--set", "phase2.eval.sumo_seeds=[9]",
    # the teacher's clone, small: 2 candidates, 2 demonstration episodes + 1 DAgger episode
    "--set", "phase2.imitation.candidates=[fixed-time,max-occupancy]",
    "--set", "phase2.imitation.episodes=2", "--set", "phase2.imitation.dagger_episodes=1",
    "--set", "phase2.imitation.clone.epochs=3", "--set", "phase2.validation.route_seeds=[5001]",
    "--set", "phase2.validation.sumo_seeds=[80001]",
    "--set", "phase2.sims_per_runner=2",  # the smoke profile's parallel sampling, 2 children
]  # fmt: skip


# A tiny but real phase 3 after TINY_PHASE2: 3 PPO-Lagrangian iterations of 64 light-decisions on
# 2 gloo ranks with one collector each; 5-minute episodes (60 decisions), so episodes end within
# an iteration and lambda moves.
TINY_PHASE3 = [
    "--set", "phase3.iterations=3", "--set", "phase3.samples_per_iteration=64",
    "--set", "phase3.effective_batch=32", "--set", "phase3.micro_batch=16",
    "--set", "phase3.epochs=2", "--set", "phase3.checkpoint_every=1",
    "--set", "phase3.collect.fragment_steps=16", "--set", "phase3.collect.collectors=2",
]  # fmt: skip


def run_app(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`python apps/hybrid ARGS` (what `uv run apps/hybrid ARGS` runs) in a subprocess."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, str(APP), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


@pytest.fixture(scope="session")
def small_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Record the small dataset once (by running phase 1 for one step)."""
    root = tmp_path_factory.mktemp("hybrid")
    data = root / "data"
    out = run_app(
        *SMALL,
        "--set",
        f"phase1.data.path={data}",
        "--set",
        f"run.root={root / 'warmup'}",
        "--set",
        "phase1.steps=1",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return data


@pytest.fixture
def app() -> Path:
    return APP


@pytest.fixture
def run() -> object:
    """The `run_app` helper, as a fixture (test modules cannot import conftest)."""
    return run_app


@pytest.fixture
def small_args(small_data: Path, tmp_path: Path) -> list[str]:
    return [*SMALL, "--set", f"phase1.data.path={small_data}", "--set", f"run.root={tmp_path / 'runs'}"]


@pytest.fixture
def tiny_phase2() -> list[str]:
    return list(TINY_PHASE2)


@pytest.fixture
def tiny_phase3() -> list[str]:
    return list(TINY_PHASE3)


def _refused(tmp_path: Path, *overrides: str) -> str:
    runs = tmp_path / "runs"
    out = run_app("--profile", "smoke", "--set", f"run.root={runs}", "--set", "run.name=t",
                  "--set", f"run.data_root={tmp_path / 'data'}",
                  *(a for o in overrides for a in ("--set", o)), timeout=120)  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("tj-hybrid:")]
    assert len(errors) == 1, out.stderr
    assert not runs.exists()  # nothing started, nothing half-written
    return errors[0]


@pytest.fixture
def refused(tmp_path: Path) -> object:
    """Run the CLI with ``--set`` overrides; it must exit 2 before anything starts with one error
    line, which is returned."""
    return lambda *overrides: _refused(tmp_path, *overrides)
