"""Any trained RLlib ``TorchRLModule`` of this package (graph or lane MLP) as a baseline-style
``Policy`` for ``evaluate`` / ``evaluate_heldout``: all lights of a step in one forward pass,
masked argmax of ``action_dist_inputs`` (deterministic).

For the graph policy prefer ``AgentPolicy`` on the exported tj-models agent (no RLlib at all);
this adapter evaluates modules that have no tj-models form, e.g. the lane-MLP baseline, loaded
with ``load_module(checkpoint)`` (imports RLlib, starts no Ray).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tj_models import masked_logits
from tj_rl.control.actor import choose

__all__ = ["ModulePolicy", "load_module"]


def load_module(path: str | Path) -> Any:
    """The RLModule saved at ``path`` (an RLlib module folder, e.g. a checkpoint's
    ``learner_group/learner/rl_module/shared``), in eval mode on the CPU."""
    from ray.rllib.core.rl_module.rl_module import RLModule

    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"no RLModule folder at {path}")
    module = RLModule.from_checkpoint(str(path))
    module.eval()
    return module


class ModulePolicy:
    """``reset(env)`` / ``compute_actions(obs, infos)`` over a module's masked logits."""

    def __init__(self, module: Any) -> None:
        self.module = module

    def reset(self, env: Any) -> None:
        pass

    def compute_actions(
        self, obs: Mapping[str, Mapping[str, np.ndarray]], infos: Mapping[str, Any]
    ) -> dict[str, int]:
        agents = list(obs)
        batch = {k: torch.from_numpy(np.stack([obs[a][k] for a in agents]))
                 for k in obs[agents[0]]}  # fmt: skip
        with torch.no_grad():
            out = self.module.forward_inference({"obs": batch})
        # re-masked with the one constant (a module's own masking is not trusted), then chosen
        # as every caller chooses (``tj_rl.control.actor.choose``)
        logits = masked_logits(out["action_dist_inputs"], batch["action_mask"].bool())
        best, _ = choose(logits, sample=False)
        return {a: int(i) for a, i in zip(agents, best.tolist(), strict=True)}
