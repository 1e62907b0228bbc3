"""``CloneConfig``: how a behaviour clone trains (``cloning.py``). Its own module, free of torch,
so that configuration code (the trainer's YAML sections) can hold one without loading torch."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

__all__ = ["CloneConfig"]


@dataclass(kw_only=True)
class CloneConfig:
    """How the clone trains: ``epochs`` at most, minibatches of ``batch`` samples, Adam at
    ``lr``, the value loss weighted by ``value_coeff`` (over the returns' variance when that
    exceeds 1: ``cloning.value_weight``), ``validation_fraction`` of the samples
    held out to stop after ``patience`` epochs without improvement; ``seed`` orders the data;
    ``weighting``: ``regret`` weighs each decision by the teacher's regrets where the
    demonstrations have them (cost-sensitive), ``none`` counts every decision alike."""

    epochs: int = 30
    batch: int = 256
    lr: float = 1e-3
    value_coeff: float = 0.5
    validation_fraction: float = 0.1
    patience: int = 4
    seed: int = 0
    weighting: Literal["regret", "none"] = "regret"

    def __post_init__(self) -> None:
        if self.weighting not in ("regret", "none"):
            raise ValueError(f"CloneConfig.weighting={self.weighting!r}: 'regret' or 'none'")
        for name in ("epochs", "batch", "patience"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"CloneConfig.{name}={value!r}: need an int >= 1")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"CloneConfig.lr={self.lr}: need a number > 0")
        if not (math.isfinite(self.value_coeff) and self.value_coeff >= 0):
            raise ValueError(f"CloneConfig.value_coeff={self.value_coeff}: need a number >= 0")
        if not 0.0 < self.validation_fraction < 0.5:
            raise ValueError(
                f"CloneConfig.validation_fraction={self.validation_fraction}: need 0 < f < 0.5"
            )
