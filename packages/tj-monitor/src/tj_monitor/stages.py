"""Runs made of stages: one folder per stage (a trainer's phases), read, ordered and compared.

A stage is a direct subfolder of the run root that holds ``*.jsonl`` logs, directly or in its
``logs/`` subfolder (one level down, no deeper, so a Ray or checkpoint tree inside a stage is
never searched). Stages are named by their folder and ordered by the time of their first record,
then by name; tj-monitor gives them no meaning (it knows no "phase 1").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tj_monitor.analyze import (
    RunData,
    RunFormatError,
    RunSummary,
    _read_files,
    is_data_wait,
    summarize,
)

__all__ = [
    "LOG_SUBDIR",
    "StageRow",
    "StagedSummary",
    "load_stages",
    "stage_span",
    "summarize_stages",
]

LOG_SUBDIR = "logs"  # the one subfolder of a stage also searched for *.jsonl (MetricsLogger's)


def _jsonl_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.jsonl") if p.is_file())


def _stage_files(folder: Path) -> list[Path]:
    files = _jsonl_in(folder)
    if (folder / LOG_SUBDIR).is_dir():
        files += _jsonl_in(folder / LOG_SUBDIR)
    return files


def _is_num(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def stage_span(run: RunData) -> tuple[float, float] | None:
    """(first, last) record time of a run or stage, metrics and memory alike; None: no times."""
    times = [float(r["time"]) for r in (*run.metrics, *run.memory) if _is_num(r.get("time"))]
    return (min(times), max(times)) if times else None


def load_stages(root: str | Path, *, skip_bad_lines: bool = False) -> dict[str, RunData]:
    """Read every stage folder of ``root`` (see the module docstring), in stage order.

    A stage whose files hold no metrics or memory records is kept (empty, ordered last): a
    stage that has just started is still a stage. Malformed lines follow ``load_run``'s rule.
    Raises ``RunFormatError`` when ``root`` is not a directory or has no stage.
    """
    root = Path(root)
    if not root.is_dir():
        raise RunFormatError(root, None, "no such directory")
    try:
        folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError as exc:
        raise RunFormatError(root, None, f"cannot list ({exc})") from exc
    found: list[tuple[str, RunData]] = []
    for folder in folders:
        files = _stage_files(folder)
        if files:
            found.append((folder.name, _read_files(folder, files, skip_bad_lines)))
    if not found:
        raise RunFormatError(
            root,
            None,
            f"no *.jsonl files in this directory, nor in its subfolders or their {LOG_SUBDIR}/",
        )

    def order(item: tuple[str, RunData]) -> tuple[bool, float, str]:
        span = stage_span(item[1])
        return (span is None, span[0] if span else 0.0, item[0])

    return dict(sorted(found, key=order))


@dataclass(frozen=True, kw_only=True)
class StageRow:
    """One stage in the cross-stage table; seconds and bytes, ``None`` where there is no data."""

    name: str
    start_s: float | None  # its first record, in seconds after the run's first record
    wall_s: float | None  # its first to its last record
    steps: int  # distinct steps logged
    first_step: int | None
    last_step: int | None
    memory_samples: int
    peak_tree_pss: float | None
    data_wait_fraction: float | None  # mean of the finite values of its data-wait series


@dataclass(frozen=True, kw_only=True)
class StagedSummary:
    """What ``tj-monitor analyze`` reports on a staged run; ``to_dict()`` is its ``--json``."""

    source: str
    start_time: float | None  # time of the run's first record (epoch seconds as logged)
    duration_s: float | None  # the run's first to its last record, gaps between stages included
    stages: dict[str, RunSummary]
    table: list[StageRow]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _data_wait(run: RunData) -> float | None:
    vals = [float(v) for r in run.metrics for k, v in r.items() if is_data_wait(k) and _is_num(v)]
    return sum(vals) / len(vals) if vals else None


def _row(name: str, run: RunData, summary: RunSummary, t0: float | None) -> StageRow:
    span = stage_span(run)
    steps = {r["step"] for r in run.metrics}
    return StageRow(
        name=name,
        start_s=span[0] - t0 if span and t0 is not None else None,
        wall_s=span[1] - span[0] if span else None,
        steps=len(steps),
        first_step=min(steps) if steps else None,
        last_step=max(steps) if steps else None,
        memory_samples=len(run.memory),
        peak_tree_pss=summary.peak_memory.get("tree_pss"),
        data_wait_fraction=_data_wait(run),
    )


def summarize_stages(
    stages: Mapping[str, RunData], *, source: str | Path | None = None
) -> StagedSummary:
    """Each stage's ``summarize`` plus one ``StageRow`` per stage, in the mapping's order.

    ``source`` names the run (default: the folder holding the first stage).
    """
    spans = [s for s in map(stage_span, stages.values()) if s is not None]
    t0 = min(s[0] for s in spans) if spans else None
    summaries = {name: summarize(run) for name, run in stages.items()}
    if source is None:
        first = next(iter(stages.values()), None)
        source = first.source.parent if first is not None else ""
    return StagedSummary(
        source=str(source),
        start_time=t0,
        duration_s=max(s[1] for s in spans) - t0 if t0 is not None else None,
        stages=summaries,
        table=[_row(n, run, summaries[n], t0) for n, run in stages.items()],
    )
