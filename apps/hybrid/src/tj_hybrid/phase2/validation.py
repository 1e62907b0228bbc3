"""Choosing by validation, reporting on held-out (DESIGN §10): the validation traffic
(``phase2.validation``: route seeds never trained on and never reported on, SUMO seeds outside
evaluation's) scores the teacher candidates and every phase-2 checkpoint.

``CheckpointSelector`` exports each checkpoint's policy, scores it on validation and keeps the
best one's agent folder (``select: best``): the exported policy is the best checkpoint on
validation (early stopping), never one chosen on held-out traffic. Its state lives in the phase
folder (``validation.json``), so ``--resume`` keeps the best of before the interruption.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
from pathlib import Path

from tj_hybrid.config import HybridConfig
from tj_hybrid.rl_setup import RLSetup
from tj_monitor import atomic_write_text, publish_dir

__all__ = ["CheckpointSelector"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(kw_only=True)
class CheckpointSelector:
    """Scores checkpoints on validation and keeps the best one's exported agent in ``folder``
    (``best-agent``); ``history`` holds ``(iteration, mean delay)`` of every scored one."""

    cfg: HybridConfig
    setup: RLSetup
    folder: Path
    base: Path | None
    history: list[tuple[int, float]] = dataclasses.field(default_factory=list)
    best: tuple[int, float] | None = None

    @property
    def state_file(self) -> Path:
        return self.folder / "validation.json"

    @property
    def best_agent(self) -> Path:
        return self.folder / "best-agent"

    def load(self) -> CheckpointSelector:
        """The state a resumed run left (nothing when there is none)."""
        if self.state_file.is_file() and self.best_agent.is_dir():
            data = json.loads(self.state_file.read_text())
            self.history = [(int(i), float(d)) for i, d in data["history"]]
            self.best = (int(data["best"][0]), float(data["best"][1]))
        return self

    def start_from(self, agent: Path, delay: float) -> None:
        """Count the policy PPO starts from (the teacher's clone) as iteration 0: a checkpoint is
        exported only when it beats its own start on validation. A resumed run keeps its state."""
        if self.best is not None:
            return
        tmp = self.folder / ".candidate"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(agent, tmp)
        publish_dir(tmp, self.best_agent)
        self.history, self.best = [(0, delay)], (0, delay)
        self._save()

    def _save(self) -> None:
        atomic_write_text(self.state_file,
                          json.dumps({"history": self.history, "best": self.best}) + "\n")

    def lines(self) -> list[str]:
        """The report's lines on the checkpoints scored and the one kept."""
        if not self.history or self.best is None:
            return []
        seen = ", ".join(f"{i}: {d:.2f}" for i, d in self.history)
        return [f"- validation avg delay per checkpoint (iteration: s): {seen}; best at "
                f"iteration {self.best[0]} ({self.best[1]:.2f} s)"]  # fmt: skip

    def score(self, checkpoint: Path, iteration: int) -> float:
        """Export ``checkpoint``'s policy, score it on validation, keep it when it is the best
        so far; returns its mean validation delay."""
        from tj_hybrid.evaluation import validation_delays
        from tj_hybrid.phase2.evaluate import trained_policy
        from tj_hybrid.phase2.train import export_policy

        p2 = self.cfg.phase2
        scratch = self.folder / ".candidate"
        shutil.rmtree(scratch, ignore_errors=True)
        export_policy(checkpoint, scratch, base=self.base, preset=self.cfg.model.preset,
                      policy=p2.policy)  # fmt: skip
        policy = {"policy": trained_policy(self.cfg, scratch)}
        mean, worst = validation_delays(self.cfg, self.setup, policy, backend="traci")["policy"]
        self.history.append((iteration, mean))
        if math.isfinite(mean) and (self.best is None or mean < self.best[1]):
            self.best = (iteration, mean)
            publish_dir(scratch, self.best_agent)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
        self._save()
        log.info("validation at iteration %d: avg delay %.2f s (worst episode %.2f s); best %.2f s "
                 "at iteration %d", iteration, mean, worst, self.best[1] if self.best else math.nan,
                 self.best[0] if self.best else -1)  # fmt: skip
        return mean
