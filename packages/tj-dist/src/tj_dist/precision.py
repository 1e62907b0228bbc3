"""Pick the training precision for a device and run autocast + GradScaler from one config.

bf16 only where it is native (compute capability >= 8.0, or CPU), fp16 + GradScaler on Volta and
Turing (the reference 2080 Ti is 7.5), fp32 otherwise. TF32 matmuls are enabled on Ampere+ only.
`Amp` counts skipped optimizer steps (inf/NaN gradients) and exposes the current loss scale.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "PRECISIONS",
    "Amp",
    "AmpConfig",
    "PrecisionChoice",
    "choose_precision",
    "enable_tf32",
]

log = logging.getLogger(__name__)

PRECISIONS = ("auto", "fp32", "fp16", "bf16")
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass(frozen=True, kw_only=True)
class PrecisionChoice:
    """The resolved precision for one device and why it was chosen."""

    precision: str  # "fp32" | "fp16" | "bf16"
    device_type: str
    capability: tuple[int, int] | None
    tf32: bool
    reason: str

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.precision]

    @property
    def needs_scaler(self) -> bool:
        return self.precision == "fp16"


def choose_precision(
    requested: str, device: torch.device | str, *, capability: tuple[int, int] | None = None
) -> PrecisionChoice:
    """Resolve "auto"|"fp32"|"fp16"|"bf16" for `device`; refuses bf16 where it is emulated.

    capability defaults to `torch.cuda.get_device_capability(device)` for CUDA devices.
    """
    if requested not in PRECISIONS:
        raise ValueError(f"precision={requested!r} is unknown; use one of {', '.join(PRECISIONS)}")
    device = torch.device(device)
    if device.type == "cuda" and capability is None:
        capability = torch.cuda.get_device_capability(device)
    if device.type != "cuda":
        capability = None
    ampere = capability is not None and capability >= (8, 0)
    tf32 = ampere
    if requested == "auto":
        if device.type == "cuda" and ampere:
            precision, reason = "bf16", f"compute capability {capability} >= 8.0: native bf16"
        elif device.type == "cuda" and capability is not None and capability >= (7, 0):
            precision, reason = "fp16", f"compute capability {capability}: fp16 tensor cores"
        elif device.type == "cuda":
            precision, reason = "fp32", f"compute capability {capability}: no fast half precision"
        else:
            precision, reason = "fp32", f"{device.type}: fp32 (ask for bf16 explicitly to use it)"
    else:
        precision, reason = requested, "requested"
        if precision == "bf16" and device.type == "cuda" and not ampere:
            raise ValueError(
                f"precision='bf16' on {device} (compute capability {capability}) is emulated, not "
                "native (needs >= 8.0); use 'fp16' (with GradScaler) or 'auto'"
            )
    return PrecisionChoice(
        precision=precision,
        device_type=device.type,
        capability=capability,
        tf32=tf32,
        reason=reason,
    )


def enable_tf32(choice: PrecisionChoice) -> bool:
    """Allow TF32 matmuls/convolutions when `choice.tf32` (Ampere+); returns what was set."""
    mode = "tf32" if choice.tf32 else "ieee"
    torch.backends.cuda.matmul.fp32_precision = mode
    torch.backends.cudnn.conv.fp32_precision = mode
    log.info("fp32 matmul/conv precision: %s", mode)
    return choice.tf32


@dataclass(frozen=True, kw_only=True)
class AmpConfig:
    """Mixed precision for one phase: dtype plus the GradScaler parameters the phase tunes."""

    precision: str = "fp32"
    device_type: str = "cuda"
    init_scale: float = 2.0**16
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000

    def __post_init__(self) -> None:
        if self.precision not in DTYPES:
            raise ValueError(
                f"AmpConfig.precision={self.precision!r}: use 'fp32', 'fp16' or 'bf16' "
                "(resolve 'auto' with choose_precision first)"
            )
        if self.device_type not in ("cuda", "cpu"):
            raise ValueError(f"AmpConfig.device_type={self.device_type!r}: use 'cuda' or 'cpu'")
        if self.init_scale <= 0:
            raise ValueError(f"AmpConfig.init_scale={self.init_scale} must be > 0")
        if self.growth_factor <= 1.0:
            raise ValueError(f"AmpConfig.growth_factor={self.growth_factor} must be > 1")
        if not 0.0 < self.backoff_factor < 1.0:
            raise ValueError(f"AmpConfig.backoff_factor={self.backoff_factor} must be in (0, 1)")
        if self.growth_interval < 1:
            raise ValueError(f"AmpConfig.growth_interval={self.growth_interval} must be >= 1")

    @classmethod
    def from_choice(cls, choice: PrecisionChoice, **scaler: Any) -> AmpConfig:
        return cls(precision=choice.precision, device_type=choice.device_type, **scaler)

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.precision]

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def make_scaler(self) -> torch.amp.GradScaler:
        """A GradScaler that is enabled only for fp16 (bf16 has fp32's range: no scaling)."""
        return torch.amp.GradScaler(
            self.device_type,
            init_scale=self.init_scale,
            growth_factor=self.growth_factor,
            backoff_factor=self.backoff_factor,
            growth_interval=self.growth_interval,
            enabled=self.precision == "fp16",
        )

    def build(self) -> Amp:
        return Amp(self)


class Amp:
    """Runtime half of `AmpConfig`: the scaler, autocast, and step/skip counters for monitoring."""

    def __init__(self, config: AmpConfig) -> None:
        self.config = config
        self.scaler = config.make_scaler()
        self.steps = 0
        self.skipped_steps = 0
        self.last_step_skipped = False

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        with self.config.autocast():
            yield

    @property
    def enabled(self) -> bool:
        return self.scaler.is_enabled()

    @property
    def scale(self) -> float:
        """Current loss scale (1.0 when no scaling is done)."""
        return float(self.scaler.get_scale()) if self.enabled else 1.0

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return self.scaler.scale(loss) if self.enabled else loss

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        if self.enabled:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """optimizer.step() through the scaler and update the scale; False when it was skipped.

        A step is skipped when the gradients held inf/NaN: GradScaler then lowers the scale, which
        is how the skip is detected without touching its private state.
        """
        self.steps += 1
        if not self.enabled:
            optimizer.step()
            self.last_step_skipped = False
            return True
        before = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        skipped = self.scaler.get_scale() < before
        self.last_step_skipped = skipped
        if skipped:
            self.skipped_steps += 1
            log.warning(
                "inf/NaN gradients: optimizer step skipped, loss scale %s -> %s", before, self.scale
            )
        return not skipped

    def state_dict(self) -> dict[str, Any]:
        return {
            "scaler": self.scaler.state_dict(),
            "steps": self.steps,
            "skipped_steps": self.skipped_steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])
        self.steps = int(state["steps"])
        self.skipped_steps = int(state["skipped_steps"])
