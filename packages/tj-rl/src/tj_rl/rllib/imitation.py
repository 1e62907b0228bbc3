"""PPO with a decaying imitation term: RLlib's PPO loss plus ``coeff(t) * KL(prior || policy)``
on the training batch's observations, where the prior is a frozen copy of a behaviour-cloned
policy (``tj_rl.imitation``) and ``coeff`` falls linearly from ``coeff`` to 0 over
``decay_env_steps`` sampled env steps (DemoLight's "imitate first, then improve", as a soft
constraint that fades: early updates on a fresh critic cannot wreck the clone, later ones are
free to beat it).

Configure with ``imitation_learner(config, agent_dir=..., coeff=..., decay_env_steps=...)``; the
settings travel in RLlib's ``learner_config_dict`` under ``IMITATION_KEY``. The coefficient is a
function of RLlib's lifetime env-step counter as of the learner's last update; the counter is
part of the learner's state, so a restored checkpoint continues the schedule where it stopped
(its first update does not start over at the full coefficient).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

__all__ = ["IMITATION_KEY", "ImitationPPOLearner", "imitation_coeff", "imitation_learner"]

IMITATION_KEY = "tj_imitation"
_STEPS_STATE = "tj_imitation_env_steps"  # the learner state's key of the schedule's counter


def imitation_coeff(coeff: float, decay_env_steps: int, env_steps: int) -> float:
    """The imitation weight after ``env_steps``: linear from ``coeff`` to 0 at
    ``decay_env_steps``, 0 after."""
    if decay_env_steps <= 0:
        return 0.0
    return max(0.0, coeff * (1.0 - env_steps / decay_env_steps))


def imitation_learner(config: Any, *, agent_dir: str, coeff: float,
                      decay_env_steps: int) -> Any:  # fmt: skip
    """``config`` (a ``PPOConfig``) with ``ImitationPPOLearner`` and its settings."""
    if not (math.isfinite(coeff) and coeff >= 0):
        raise ValueError(f"imitation: coeff={coeff}, need a number >= 0")
    if decay_env_steps < 0:
        raise ValueError(f"imitation: decay_env_steps={decay_env_steps}, need >= 0")
    settings = {"agent_dir": str(agent_dir), "coeff": float(coeff),
                "decay_env_steps": int(decay_env_steps)}  # fmt: skip
    return config.learners(learner_class=ImitationPPOLearner,
                           learner_config_dict={IMITATION_KEY: settings})


class ImitationPPOLearner(PPOTorchLearner):
    """``PPOTorchLearner`` + the decaying KL to a frozen behaviour-cloned prior."""

    def build(self) -> None:
        super().build()
        from tj_models import TrafficAgent
        from tj_rl.control.actor import Actor

        settings = self.config.learner_config_dict[IMITATION_KEY]
        agent = TrafficAgent.load(settings["agent_dir"], map_location=self._device)
        agent.eval()
        agent.requires_grad_(False)
        self._prior = Actor(agent.gnn, agent.controller, frozen_gnn=True)
        self._prior_agent = agent  # keeps the networks alive
        self._coeff0 = float(settings["coeff"])
        self._decay = int(settings["decay_env_steps"])
        self._env_steps = 0

    def current_coeff(self) -> float:
        return imitation_coeff(self._coeff0, self._decay, self._env_steps)

    def compute_loss_for_module(self, *, module_id: Any, config: Any, batch: dict[str, Any],
                                fwd_out: dict[str, Any]) -> Any:  # fmt: skip
        loss = super().compute_loss_for_module(module_id=module_id, config=config, batch=batch,
                                               fwd_out=fwd_out)  # fmt: skip
        coeff = self.current_coeff()
        if coeff <= 0.0:
            self.metrics.log_value((module_id, "imitation_coeff"), 0.0, window=1)
            return loss
        with torch.no_grad():
            prior = torch.log_softmax(self._prior.forward(batch[Columns.OBS]).logits.float(), -1)
        logp = torch.log_softmax(fwd_out[Columns.ACTION_DIST_INPUTS].float(), -1)
        kl = (prior.exp() * (prior - logp)).sum(-1)
        if Columns.LOSS_MASK in batch:
            mask = batch[Columns.LOSS_MASK]
            mean_kl = kl[mask].sum() / mask.sum().clamp(min=1)
        else:
            mean_kl = kl.mean()
        self.metrics.log_dict({"imitation_kl": mean_kl.detach(), "imitation_coeff": coeff},
                              key=module_id, window=1)  # fmt: skip
        return loss + coeff * mean_kl

    def after_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        super().after_gradient_based_update(timesteps=timesteps)
        self._env_steps = int(timesteps.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0))

    def get_state(self, components: Any = None, *, not_components: Any = None,
                  **kwargs: Any) -> dict[str, Any]:  # fmt: skip
        state = super().get_state(components, not_components=not_components, **kwargs)
        state[_STEPS_STATE] = self._env_steps
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        if _STEPS_STATE in state:
            self._env_steps = int(state[_STEPS_STATE])
