"""``AgentPolicy``: a trained tj-models agent directory run as a tj-rl ``Policy`` without Ray.

It loads the agent (``TrafficAgent.load``: checksum-verified safetensors) and, at every decision
step, stacks the padded observations of all lights into one batch and runs the GNN + controller in
one forward pass through the same code as the RLlib module (``graph_policy.py``), so the same
weights and observations give the same logits. Actions: the masked argmax (deterministic), or a
sample from the masked softmax (``sample=True``, reproducible from ``seed``); masked actions have
probability exactly 0, so an action outside ``action_mask`` is never chosen.

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

    from tj_models import ControllerOutput, TrafficAgent
    from tj_rl.env.core import TrafficSignalCore

__all__ = ["AgentPolicy", "check_agent_env"]


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

        if not isinstance(sample, bool):
            raise ValueError(f"AgentPolicy: sample={sample!r}, expected a bool")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"AgentPolicy: seed={seed!r}, expected an int")
        self.agent_dir = Path(agent_dir)
        self.agent: TrafficAgent = TrafficAgent.load(self.agent_dir, map_location=device)
        self.agent.eval()
        self.device = torch.device(device)
        self.sample = sample
        if shield_threshold is not None and not np.isfinite(shield_threshold):
            raise ValueError(f"AgentPolicy: shield_threshold={shield_threshold!r}, expected a "
                             "finite number or None")  # fmt: skip
        self.shield_threshold = shield_threshold
        self.generator = torch.Generator(device=self.device).manual_seed(seed)

    @property
    def max_actions(self) -> int:
        return self.agent.config.max_actions

    def check_env(self, env: TrafficSignalCore) -> None:
        """Raise ``ValueError`` unless every light of ``env`` shares one observation space that
        the agent can read (features, movements, at most ``max_actions`` actions)."""
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

    def forward(self, batch: Mapping[str, Tensor]) -> ControllerOutput:
        """GNN + controller on a padded batch (``batch()``), without gradients: masked logits
        ``[B, max_actions]``, values, cost values."""
        import dataclasses

        import torch

        from tj_rl.control.graph_policy import controller_inputs, graph_input, graph_policy

        with torch.no_grad():
            if self.shield_threshold is None:
                return graph_policy(self.agent.gnn, self.agent.controller, batch)
            encoded = self.agent.gnn(graph_input(self.agent.gnn, batch))
            shielded = self.agent.shielded_policy(self.shield_threshold)(
                encoded, batch["action_mask"].bool(),
                **controller_inputs(self.agent.controller, batch))  # fmt: skip
            return dataclasses.replace(shielded.controller, logits=shielded.logits,
                                       action_mask=shielded.mask)  # fmt: skip

    def actions(self, batch: Mapping[str, Tensor]) -> Tensor:
        """``[B]`` int64 actions: the masked argmax, or a seeded sample when ``sample``."""
        import torch

        logits = self.forward(batch).logits
        if not self.sample:
            return logits.argmax(-1)
        probs = torch.softmax(logits, -1)  # masked logits: probability exactly 0
        return torch.multinomial(probs, 1, generator=self.generator).squeeze(-1)


def check_agent_env(agent: TrafficAgent, env: TrafficSignalCore, who: str) -> None:
    """Raise ``ValueError`` (starting with ``who``) unless every light of ``env`` shares one
    observation space that ``agent`` can read: its node and edge features, at most its GNN's
    movement groups and at most its controller's ``max_actions`` actions. Reads the env's spaces
    only (SUMO need not run): ``AgentPolicy`` and ``RolloutCollector`` check before acting."""
    from tj_rl.control.graph_policy import check_features, check_spaces

    spaces = env.observation_spaces
    first = env.possible_agents[0]
    differ = [a for a in env.possible_agents if spaces[a] != spaces[first]]
    if differ:
        raise ValueError(
            f"{who}: lights {[first, *differ]} have different observation spaces; one "
            "forward pass needs one space: use the EnvConfig the policy was trained with "
            "(pad_to_scenario=True, or max_phases / max_lanes)"
        )
    n_actions, movements = check_spaces(spaces[first], env.action_spaces[first], who)
    gnn = agent.gnn.config
    check_features(gnn, spaces[first], who)
    max_actions = agent.config.max_actions
    if n_actions > max_actions:
        raise ValueError(
            f"{who}: the env has {n_actions} actions per light, the agent's controller "
            f"scores {max_actions} (EnvConfig.max_phases <= {max_actions})"
        )
    if movements > gnn.num_movements:
        raise ValueError(
            f"{who}: its GNN embeds {gnn.num_movements} movements, the env's observations "
            f"have up to {movements}; set EnvConfig.max_lanes <= {gnn.num_movements}"
        )
