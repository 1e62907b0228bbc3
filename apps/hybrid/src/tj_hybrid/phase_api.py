"""What a phase is to the runner: ``preflight(config)``, ``run(context) -> PhaseResult``.

A phase owns the heavy runtime it starts (process groups, loader workers, Ray) and releases it
before ``run`` returns, normally or not. Its result is written to ``<phase>/result.json`` when it
finishes; a resumed run skips every phase that has one (a finished phase never runs twice).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tj_hybrid.config import HybridConfig
from tj_hybrid.phases import PhaseSpec
from tj_hybrid.run_dir import PhaseDir, RunDir
from tj_monitor import atomic_write_json

__all__ = ["Phase", "PhaseContext", "PhaseResult"]


@dataclass(frozen=True, kw_only=True)
class PhaseContext:
    """What the runner hands a phase: the config, where to write, whether to resume, and the
    agent exported by the phase it starts from (``None`` for a phase that starts fresh)."""

    config: HybridConfig
    profile: str
    run_dir: RunDir
    spec: PhaseSpec
    resume: bool
    previous_agent: Path | None

    @property
    def phase_dir(self) -> PhaseDir:
        return self.run_dir.phase(self.spec.folder)


@dataclass(frozen=True, kw_only=True)
class PhaseResult:
    """What a finished phase leaves: its exported agent, headline numbers, report, one line."""

    name: str
    agent: Path
    report: Path
    headline: str
    metrics: dict[str, Any] = field(default_factory=dict)

    def save(self, path: Path) -> None:
        atomic_write_json(path, {**asdict(self), "agent": str(self.agent),
                                 "report": str(self.report)})  # fmt: skip

    @classmethod
    def load(cls, path: Path) -> PhaseResult | None:
        """The result saved at ``path``, or None when there is none (or it is unreadable)."""
        try:
            data = json.loads(path.read_text())
            return cls(**{**data, "agent": Path(data["agent"]), "report": Path(data["report"])})
        except (OSError, ValueError, TypeError, KeyError):
            return None


class Phase(Protocol):
    """A phase of the trainer (see ``tj_hybrid.phases.REGISTRY``)."""

    def preflight(self, config: HybridConfig) -> None:
        """Check this phase's inputs (files, paths) before anything starts; raise ConfigError."""

    def run(self, context: PhaseContext) -> PhaseResult:
        """Run (or, with ``context.resume``, continue) the phase; export its agent."""
