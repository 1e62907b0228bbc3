"""The run directory: one folder per run, one sub-folder per phase, every artefact in its place.

```
runs/<run>/              run.name, or <scenario name>-<timestamp>
  config.yaml            the merged, validated configuration of the last invocation
  phase1/
    checkpoints/         ckpt-<step>.pt + .done markers (tj_dist.save_checkpoint), newest k kept
    logs/                metrics.jsonl + TensorBoard event files (tj_monitor.MetricsLogger)
    memory.csv           the process-tree memory curve (tj_monitor.MemoryMonitor)
    agent/               the trained TrafficAgent (config.json + model.safetensors)
    eval.json            held-out evaluation numbers (phase 1: its summary.json adds wall times
                         and memory)
    report.md, *.png     the human-readable report and its plots
    result.json          written last: the phase finished (a resumed run skips it)
```
Reading them back, typed: ``tj_hybrid.results``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PhaseDir", "RunDir"]


@dataclass(frozen=True, kw_only=True)
class PhaseDir:
    """Paths of one phase's artefacts."""

    root: Path

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def metrics(self) -> Path:
        return self.logs / "metrics.jsonl"

    @property
    def memory(self) -> Path:
        return self.root / "memory.csv"

    @property
    def agent(self) -> Path:
        return self.root / "agent"

    @property
    def eval(self) -> Path:
        return self.root / "eval.json"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def report(self) -> Path:
        return self.root / "report.md"

    @property
    def result(self) -> Path:
        return self.root / "result.json"

    @property
    def finished(self) -> bool:
        """The phase finished: its result, written last, is there."""
        return self.result.is_file()

    def create(self) -> PhaseDir:
        for p in (self.root, self.checkpoints, self.logs):
            p.mkdir(parents=True, exist_ok=True)
        return self


@dataclass(frozen=True, kw_only=True)
class RunDir:
    """``<root>/<name>``; ``name=None`` picks a new name: ``<prefix>-<timestamp>`` (the
    scenario's name), or the timestamp alone."""

    path: Path

    @classmethod
    def resolve(cls, root: Path, name: str | None, prefix: str = "") -> RunDir:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return cls(path=Path(root) / (name or (f"{prefix}-{stamp}" if prefix else stamp)))

    @property
    def config(self) -> Path:
        return self.path / "config.yaml"

    def phase(self, folder: str) -> PhaseDir:
        return PhaseDir(root=self.path / folder)
