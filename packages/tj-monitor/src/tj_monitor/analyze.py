"""Run analysis: read a run's JSONL logs, summarise them and plot the curves.

A run is a directory (every ``*.jsonl`` directly inside it) or one JSONL file. Records with a
``step`` are metrics (MetricsLogger); records with ``container_used``/``tree_pss`` and no step are
memory samples (MemoryMonitor's ``jsonl_path``); other JSON objects are counted and ignored. A
malformed line is an error naming the file and line, unless ``skip_bad_lines`` is set, which
skips and counts it (a run killed mid-write usually leaves one torn last line). A run made of
stages, one folder each (a trainer's phases), is read by ``tj_monitor.stages.load_stages``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RunData", "RunFormatError", "RunSummary", "SeriesSummary", "load_run", "summarize"]

MEMORY_KEYS = ("container_used", "tree_pss")
_NOT_PEAKS = frozenset(
    (
        "time",
        "sys_total",
        "swap_total",
        "shm_total",
        "tree_processes",
        "warn_threshold",
        "cleanup_threshold",
    )
)


class RunFormatError(ValueError):
    """A run log that cannot be read; the message starts with ``file:line:``."""

    def __init__(self, path: Path, line: int | None, what: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {what}")
        self.path, self.line = path, line


@dataclass(kw_only=True)
class RunData:
    """Parsed records of one run, in file order."""

    source: Path
    files: list[Path] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)
    ignored_records: int = 0
    skipped_lines: list[str] = field(default_factory=list)


def _read_file(path: Path, run: RunData, skip_bad_lines: bool) -> None:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RunFormatError(path, None, f"cannot read ({exc})") from exc
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
            step = rec.get("step")
            if "step" in rec and (isinstance(step, bool) or not isinstance(step, int)):
                raise ValueError(f"'step' must be an integer, got {step!r}")
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            if not skip_bad_lines:
                raise RunFormatError(path, lineno, f"malformed line ({exc})") from exc
            run.skipped_lines.append(f"{path}:{lineno}")
            continue
        if "step" in rec:
            run.metrics.append(rec)
        elif any(k in rec for k in MEMORY_KEYS):
            run.memory.append(rec)
        else:
            run.ignored_records += 1


def _read_files(source: Path, files: list[Path], skip_bad_lines: bool) -> RunData:
    """Parse ``files`` in order into one ``RunData`` (no check that records were found)."""
    run = RunData(source=source, files=list(files))
    for f in files:
        _read_file(f, run, skip_bad_lines)
    return run


def load_run(path: str | Path, *, skip_bad_lines: bool = False) -> RunData:
    """Read a run directory or JSONL file (see the module docstring for what counts)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.glob("*.jsonl") if p.is_file())
        if not files:
            raise RunFormatError(path, None, "no *.jsonl files in this directory")
    elif path.is_file():
        files = [path]
    else:
        raise RunFormatError(path, None, "no such file or directory")
    run = _read_files(path, files, skip_bad_lines)
    if not run.metrics and not run.memory:
        raise RunFormatError(path, None, "no metrics or memory records found")
    return run


# ---- classification ------------------------------------------------------------------------
def _leaf(key: str) -> str:
    return key.rsplit("/", 1)[-1].lower()


def is_loss(key: str) -> bool:
    return "loss" in _leaf(key)


def is_lr(key: str) -> bool:
    leaf = _leaf(key)
    return leaf in ("lr", "learning_rate") or leaf.startswith("lr_") or leaf.endswith("_lr")


def is_throughput(key: str) -> bool:
    leaf = _leaf(key)
    return "throughput" in leaf or leaf.endswith(("_per_s", "_per_sec", "_per_second"))


def is_data_wait(key: str) -> bool:
    return _leaf(key) == "data_wait_fraction"


# ---- summary -------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class SeriesSummary:
    """One metric over the run; min/max/mean over finite values; ``nonfinite`` counts NaN/inf."""

    name: str
    count: int
    nonfinite: int
    first_nonfinite_step: int | None
    min: float | None
    max: float | None
    mean: float | None
    first: float | None
    last: float | None
    last_step: int


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """What ``tj-monitor analyze`` prints; ``to_dict()`` is its ``--json`` output."""

    source: str
    records: int
    first_step: int | None
    last_step: int | None
    duration_s: float | None
    series: dict[str, SeriesSummary]
    loss: list[str]
    lr: list[str]
    throughput: list[str]
    data_wait: list[str]
    memory_samples: int
    peak_memory: dict[str, float]
    skipped_lines: list[str]
    ignored_records: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _series(metrics: list[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for rec in metrics:
        for key, value in rec.items():
            if key in ("step", "time") or isinstance(value, bool):
                continue
            if isinstance(value, int | float):
                out.setdefault(key, []).append((rec["step"], float(value)))
    return out


def _summarize_series(name: str, points: list[tuple[int, float]]) -> SeriesSummary:
    finite = [v for _, v in points if math.isfinite(v)]
    bad = [s for s, v in points if not math.isfinite(v)]
    return SeriesSummary(
        name=name,
        count=len(points),
        nonfinite=len(bad),
        first_nonfinite_step=bad[0] if bad else None,
        min=min(finite) if finite else None,
        max=max(finite) if finite else None,
        mean=sum(finite) / len(finite) if finite else None,
        first=points[0][1],
        last=points[-1][1],
        last_step=points[-1][0],
    )


def _peak_memory(memory: list[dict[str, Any]]) -> dict[str, float]:
    peaks: dict[str, float] = {}
    for rec in memory:
        for key, value in rec.items():
            if key in _NOT_PEAKS:
                continue
            if isinstance(value, int | float) and not isinstance(value, bool):
                if key == "sys_available":
                    peaks[key] = min(peaks.get(key, value), value)
                else:
                    peaks[key] = max(peaks.get(key, value), value)
    return peaks


def summarize(run: RunData) -> RunSummary:
    """Per-metric statistics, the loss/lr/throughput/data-wait groups and peak memory."""
    series = {k: _summarize_series(k, v) for k, v in _series(run.metrics).items()}
    steps = [r["step"] for r in run.metrics]
    times = [r["time"] for r in run.metrics if isinstance(r.get("time"), int | float)]
    times += [r["time"] for r in run.memory if isinstance(r.get("time"), int | float)]
    names = sorted(series)
    return RunSummary(
        source=str(run.source),
        records=len(run.metrics) + len(run.memory),
        first_step=min(steps) if steps else None,
        last_step=max(steps) if steps else None,
        duration_s=(max(times) - min(times)) if len(times) > 1 else None,
        series=series,
        loss=[k for k in names if is_loss(k)],
        lr=[k for k in names if is_lr(k)],
        throughput=[k for k in names if is_throughput(k)],
        data_wait=[k for k in names if is_data_wait(k)],
        memory_samples=len(run.memory),
        peak_memory=_peak_memory(run.memory),
        skipped_lines=list(run.skipped_lines),
        ignored_records=run.ignored_records,
    )
