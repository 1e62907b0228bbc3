"""``AgentPolicy``: a trained tj-models agent directory run as a tj-rl ``Policy`` without Ray.

It loads the agent (``TrafficAgent.load``: checksum-verified safetensors) and, at every decision
step, stacks the padded observations of all lights into one batch and acts on it in one forward
pass through the one ``Actor`` (``actor.py``, as the RLlib module and phase 3 do), so the same
weights and observations give the same logits and actions. Actions: the masked argmax
(deterministic), or a draw from the masked softmax (``sample=True``, reproducible from ``seed``);
masked actions have probability exactly 0, so an action outside ``action_mask`` is never chosen.

Runs under ``torch.no_grad()`` in eval mode, on the CPU by default; ``torch.set_num_threads`` is
the caller's. Importing this module loads neither torch nor tj-models (they load when an
``AgentPolicy`` is made), and never Ray: evaluation processes stay small.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from torch import Tensor

    from tj_models import TrafficAgent
    from tj_rl.control.actor import ActorOutput
    from tj_rl.env.core import TrafficSignalCore

__all__ = ["AgentPolicy"]


class AgentPolicy:
    """A tj-models agent directory as a ``Policy`` (``reset(env)``, ``compute_actions``).

    ``agent_dir``: a ``TrafficAgent`` directory (e.g. ``export_agent``'s). ``sample``: draw from
    the masked policy instead of taking its argmax; ``seed`` seeds those draws (one generator for
    the policy's lifetime, as tj-rl's random baseline). ``device``: where the networks run.
    ``shield_threshold``: act behind the agent's learned shield (an allowed green whose predicted
    safety cost exceeds it is vetoed; ``tj_models.ShieldedPolicy``); None: the env's mask only.
    """

    def __init__(
        self,
        agent_dir: str | Path,
        *,
        sample: bool = False,
        seed: int = 0,
        device: str = "cpu",
        shield_threshold: float | None = None,
    ) -> None:
        import torch

        from tj_models import TrafficAgent
        from tj_rl.control.actor import Actor

        if not isinstance(sample, bool):
            raise ValueError(f"AgentPolicy: sample={sample!r}, expected a bool")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"AgentPolicy: seed={seed!r}, expected an int")
        self.agent_dir = Path(agent_dir)
        self._options = {"sample": sample, "seed": seed, "device": str(device),
                         "shield_threshold": shield_threshold}  # fmt: skip
        self.agent: TrafficAgent = TrafficAgent.load(self.agent_dir, map_location=device)
        self._files = _folder_digests(self.agent_dir)  # what was loaded, for ``fingerprint``
        self.agent.eval()
        self.device = torch.device(device)
        self.sample = sample
        self.shield_threshold = shield_threshold
        self.actor = Actor.from_agent(self.agent, shield_threshold=shield_threshold)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its folder and options (``evaluate_heldout(workers=)`` sends policies to
        worker processes): loaded and verified again where it lands; draws restart at ``seed``."""
        return (_load_again, (self.agent_dir, self._options))

    def fingerprint(self) -> str | None:
        """The agent folder's files (names and bytes) and the options that change its actions
        (``tj_rl.eval.row_cache``); None when it samples (its draws carry over between
        episodes, so a row depends on the episodes before it)."""
        if self.sample:
            return None
        options = {k: self._options[k] for k in ("device", "shield_threshold")}
        return f"AgentPolicy({self._files!r}, {options!r})"

    @property
    def max_actions(self) -> int:
        return self.agent.config.max_actions

    def check_env(self, env: TrafficSignalCore) -> None:
        """Raise ``ValueError`` unless every light of ``env`` shares one observation space that
        the agent can read (features, movements, at most ``max_actions`` actions)."""
        from tj_rl.control.fit import check_agent_env

        check_agent_env(self.agent, env, f"AgentPolicy({self.agent_dir})")

    # ------------------------------------------------------------------ Policy protocol
    def reset(self, env: TrafficSignalCore) -> None:
        self.check_env(env)

    def compute_actions(
        self, obs: Mapping[str, Mapping[str, np.ndarray]], infos: Mapping[str, Any]
    ) -> dict[str, int]:
        """One action per light of ``obs``, all lights in one forward pass."""
        agents = list(obs)
        if not agents:
            return {}
        actions = self.actions(self.batch([obs[a] for a in agents]))
        return dict(zip(agents, actions.tolist(), strict=True))

    # ------------------------------------------------------------------ tensors
    def batch(self, observations: list[Mapping[str, np.ndarray]]) -> dict[str, Tensor]:
        """The padded observations stacked into tensors with a leading batch axis (the keys the
        graph policy reads), on the policy's device."""
        import torch

        from tj_rl.control.unpad import OBSERVATION_KEYS

        return {
            k: torch.from_numpy(np.stack([o[k] for o in observations])).to(self.device)
            for k in OBSERVATION_KEYS
        }

    def forward(self, batch: Mapping[str, Tensor]) -> ActorOutput:
        """The actor on a padded batch (``batch()``), without gradients: masked logits
        ``[B, max_actions]``, the mask used, values, cost values."""
        import torch

        with torch.no_grad():
            return self.actor.forward(batch)

    def actions(self, batch: Mapping[str, Tensor]) -> Tensor:
        """``[B]`` int64 actions: the masked argmax, or a seeded draw when ``sample``."""
        return self.actor.act(batch, sample=self.sample, generator=self.generator).action


def _folder_digests(folder: Path) -> list[tuple[str, str]]:
    from tj_rl.eval.row_cache import file_digest

    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return [(p.relative_to(folder).as_posix(), file_digest(p)) for p in files]


def _load_again(agent_dir: Path, options: dict[str, Any]) -> AgentPolicy:
    return AgentPolicy(agent_dir, **options)
