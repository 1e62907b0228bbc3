"""The typed hand-off between phases: the agent one phase exports is what the next one loads.

Every phase ends by exporting a tj-models ``TrafficAgent`` (``config.json`` +
``model.safetensors``, loadable without Ray). A phase that starts from another loads it here,
checksum-verified, and freezes it per the seeds' table (``tj_models.PHASE_COMPONENTS``): phase 2
trains the controller, phase 3 the controller and the shield's critic.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from tj_hybrid.config import ConfigError
from tj_hybrid.phases import PhaseSpec

if TYPE_CHECKING:
    from tj_models import TrafficAgent

__all__ = ["HandoffError", "load_handoff"]


class HandoffError(ConfigError):
    """The previous phase's agent is missing, corrupt or does not fit: names the file."""


def load_handoff(
    path: Path, spec: PhaseSpec, *, map_location: str | torch.device = "cpu"
) -> TrafficAgent:
    """The agent at ``path`` (exported by ``spec.starts_from``), frozen for ``spec``."""
    from tj_models import CheckpointError, TrafficAgent

    try:
        agent = TrafficAgent.load(path, map_location=map_location)
    except CheckpointError as exc:
        raise HandoffError(
            f"phase {spec.name} starts from phase {spec.starts_from}'s agent: {exc}"
        ) from None
    agent.freeze_for_phase(spec.trains)
    return agent
