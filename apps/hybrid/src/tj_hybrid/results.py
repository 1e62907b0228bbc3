"""A run's results, read back typed: what each phase wrote into its folder of the run directory.

For whoever reads finished runs (the benchmark runner, a notebook, the run's final report): they
name phases (``"1"``, ``"2"``, ``"3"``: the registry's names), never files. Phase 1 leaves a
summary (held-out world-model errors, throughput, data wait, wall times, memory); phases 2 and 3
leave held-out evaluations (per traffic set, per policy and metric, the spread over episodes, and
every episode's row); every phase leaves its ``PhaseResult`` and a per-step metrics log. A file
that is missing or malformed raises ``ResultsError`` naming it and what is wrong.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tj_hybrid.phase_api import PhaseResult
from tj_hybrid.phases import REGISTRY
from tj_hybrid.run_dir import PhaseDir, RunDir
from tj_rl.env.metrics import Spread  # one metric over episodes, as tj-rl's evaluation computes it

__all__ = [
    "Evaluation",
    "HeldOutSet",
    "Phase1Summary",
    "ResultsError",
    "Spread",
    "WorldModelErrors",
    "phase_dir",
    "read_evaluation",
    "read_metrics",
    "read_metrics_log",
    "read_phase1_summary",
    "read_result",
]

T = TypeVar("T")


class ResultsError(ValueError):
    """A phase's result file that is missing or malformed; the message starts with the file."""


@dataclass(frozen=True, kw_only=True)
class WorldModelErrors:
    """Held-out next-step position errors (m) of the world model and of constant velocity."""

    vehicles: int
    model_mae: float
    model_rmse: float
    cv_mae: float
    cv_rmse: float
    improvement: float  # 1 - model_mae / cv_mae


@dataclass(frozen=True, kw_only=True)
class Phase1Summary:
    """Phase 1's figures: held-out errors, data wait, throughput, wall times, memory."""

    eval: WorldModelErrors
    data_wait_fraction: float
    windows_per_s: float  # over all ranks
    steps: int
    wall_s: dict[str, float]  # "data" (recording or reuse), "train", "total"
    peak_tree_pss: float | None  # bytes
    budget_bytes: float


@dataclass(frozen=True, kw_only=True)
class HeldOutSet:
    """One held-out traffic set: policy -> metric -> spread over episodes, and every episode's
    row (policy, route file, SUMO seed, metrics)."""

    summary: dict[str, dict[str, Spread]]
    rows: list[dict[str, Any]]

    def means(self, metric: str) -> dict[str, float]:
        """Policy -> mean of ``metric`` (the policies that report it)."""
        return {p: m[metric].mean for p, m in self.summary.items() if metric in m}

    @classmethod
    def from_summary(cls, summary: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> HeldOutSet:
        """A set from the summary a phase holds in process (policy -> metric -> the spread as a
        dict, as ``eval.json`` keeps it), without rows: the phase's report reads it here too."""
        return cls(summary={p: {k: Spread(**s) for k, s in m.items()} for p, m in summary.items()},
                   rows=[])  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Evaluation:
    """A phase's held-out evaluation: the same protocol on normal and ~30% heavier traffic."""

    held_out: HeldOutSet
    held_out_heavy: HeldOutSet


def phase_dir(run: str | os.PathLike[str] | RunDir, phase: str) -> PhaseDir:
    """The folder of ``phase`` (a registry name: ``"1"``, ``"2"``, ``"3"``) in the run ``run``."""
    run_dir = run if isinstance(run, RunDir) else RunDir(path=Path(run))
    for spec in REGISTRY:
        if spec.name == phase:
            return run_dir.phase(spec.folder)
    raise ValueError(f"no phase {phase!r}; phases: {', '.join(s.name for s in REGISTRY)}")


def _read(path: Path, kind: type[T]) -> T:
    from pydantic import TypeAdapter, ValidationError

    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise ResultsError(f"{path}: not JSON ({exc})") from None
    try:
        return TypeAdapter(kind).validate_python(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "<top>"
        raise ResultsError(f"{path}: not {kind.__name__}: {where}: {err['msg']}") from None


def read_phase1_summary(run: str | os.PathLike[str] | RunDir) -> Phase1Summary:
    """Phase 1's summary (written when its training and held-out evaluation finished)."""
    return _read(phase_dir(run, "1").summary, Phase1Summary)


def read_result(run: str | os.PathLike[str] | RunDir, phase: str) -> PhaseResult:
    """What ``phase`` left when it finished: agent, report, headline and metrics (the metrics'
    keys are the phase's own: phase 2 and 3 name ``avg_delay`` per policy, memory, wall times)."""
    path = phase_dir(run, phase).result
    result = PhaseResult.load(path)
    if result is None:
        what = "not a phase result" if path.is_file() else "missing: the phase did not finish"
        raise ResultsError(f"{path}: {what}")
    return result


def read_evaluation(run: str | os.PathLike[str] | RunDir, phase: str) -> Evaluation:
    """The held-out evaluation of phase 2 or 3 (every policy it compared, baselines included)."""
    return _read(phase_dir(run, phase).eval, Evaluation)


def read_metrics_log(path: Path) -> list[dict[str, Any]]:
    """The rows of a metrics log (``step`` and the values logged at it), ``[]`` when nothing was
    logged; a torn last line (a killed run) is skipped."""
    if not path.is_file() or path.stat().st_size == 0:
        return []
    from tj_monitor import RunFormatError, load_run

    try:
        return load_run(path, skip_bad_lines=True).metrics
    except RunFormatError as exc:  # its message starts with the file
        raise ResultsError(str(exc)) from None


def read_metrics(run: str | os.PathLike[str] | RunDir, phase: str) -> list[dict[str, Any]]:
    """``phase``'s per-step (phase 1) or per-iteration (phases 2, 3) metrics log."""
    return read_metrics_log(phase_dir(run, phase).metrics)
