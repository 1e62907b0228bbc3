"""The PPO-Lagrangian loss of phase 3 (pure functions on tensors, no model inside).

The policy maximises the clipped surrogate of one advantage that already combines reward and cost
(``lagrangian_advantage``: OmniSafe's PPOLag, ``(A_r - lam * A_c) / (1 + lam)``); a reward critic
and a cost critic regress their returns. Log-probabilities come from ``log_softmax`` on the fp32
masked logits (masked entries at ``MASK_FILL``): a masked action has probability exactly 0,
contributes exactly 0 to the entropy and receives exactly 0 gradient.

Reference: OmniSafe, repository PKU-Alignment/omnisafe, omnisafe/algorithms/on_policy/
naive_lagrange/ppo_lag.py (advantage surrogate) and omnisafe/common/buffer/onpolicy_buffer.py
(advantage normalisation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "LOG_RATIO_LIMIT",
    "PPOLoss",
    "lagrangian_advantage",
    "normalize_advantages",
    "ppo_lagrangian_loss",
]

# |log pi - log pi_old| is clamped here before exp: a sample whose action the current mask forbids
# (log-prob ~ MASK_FILL) must give a finite ratio and gradient, not exp(1e4) = inf. Real PPO updates
# stay orders of magnitude inside it (the clip range is log(1.2) ~ 0.18).
LOG_RATIO_LIMIT = 20.0


@dataclass(frozen=True, slots=True)
class PPOLoss:
    total: Tensor  # scalar to backprop
    policy: Tensor  # clipped surrogate (scalar)
    value: Tensor  # reward-value loss (scalar, before its coefficient)
    cost_value: Tensor  # cost-value loss (scalar, before its coefficient)
    entropy: Tensor  # mean entropy of the masked policy
    approx_kl: Tensor  # mean (old_logp - logp), detached
    clip_fraction: Tensor  # fraction of samples whose ratio left [1-clip, 1+clip], detached


def lagrangian_advantage(adv_r: Tensor, adv_c: Tensor, lam: float) -> Tensor:
    """``(adv_r - lam * adv_c) / (1 + lam)`` (OmniSafe PPOLag; ``lam >= 0``).

    Dividing by ``1 + lam`` keeps the combined advantage on the reward advantage's scale as lambda
    grows, so the policy's step size does not grow with the penalty.
    """
    if adv_r.shape != adv_c.shape:
        raise ValueError(
            f"adv_r and adv_c must have the same shape; got {tuple(adv_r.shape)} and "
            f"{tuple(adv_c.shape)}"
        )
    lam = float(lam)
    if not (math.isfinite(lam) and lam >= 0.0):
        raise ValueError(f"lam must be a finite number >= 0; got {lam}")
    return (adv_r - lam * adv_c) / (1.0 + lam)


def normalize_advantages(adv_r: Tensor, adv_c: Tensor, eps: float = 1e-8) -> tuple[Tensor, Tensor]:
    """OmniSafe's convention: reward advantages standardised (mean 0, std 1), cost advantages
    centred only (mean 0), so lambda keeps its scale.

    The std is the population std (``unbiased=False``, one sample gives 0, not NaN) and ``eps`` is
    added to it, as OmniSafe does. Statistics are over the tensors given (one rank's batch); a DDP
    trainer that wants global statistics reduces them itself. Note: a fixed lambda then weighs a
    cost advantage in cost units against a reward advantage in standard deviations.
    """
    if adv_r.numel() == 0 or adv_c.numel() == 0:
        raise ValueError("normalize_advantages needs at least one advantage of each kind")
    r = adv_r.float()
    c = adv_c.float()
    mean, std = r.mean(), r.std(unbiased=False)
    return (r - mean) / (std + eps), c - c.mean()


def ppo_lagrangian_loss(
    logits: Tensor,
    actions: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    value: Tensor,
    returns: Tensor,
    cost_value: Tensor,
    cost_returns: Tensor,
    *,
    clip: float = 0.2,
    vf_coeff: float = 0.5,
    cost_vf_coeff: float = 0.5,
    entropy_coeff: float = 0.01,
    vf_clip: float | None = None,
) -> PPOLoss:
    """Clipped-surrogate PPO loss with a reward and a cost critic.

    ``logits`` [B, A] masked (``tj_models.masked_logits``); ``actions`` [B] int; ``old_logp``,
    ``advantages`` (combined and normalised), ``value`` / ``returns``, ``cost_value`` /
    ``cost_returns`` [B]. ``policy = -mean(min(ratio * A, clip(ratio, 1 - clip, 1 + clip) * A))``;
    value losses are MSE, each squared error clamped at ``vf_clip`` when given (RLlib's
    ``vf_clip_param``); ``total = policy + vf_coeff * value + cost_vf_coeff * cost_value -
    entropy_coeff * entropy``. Checks shapes and that actions lie in [0, A) (one device sync).
    """
    _check_coefficients(clip, vf_coeff, cost_vf_coeff, entropy_coeff, vf_clip)
    _check_shapes(logits, actions, old_logp, advantages, value, returns, cost_value, cost_returns)

    logp_all = F.log_softmax(logits.float(), dim=-1)
    logp = logp_all.gather(1, actions.long()[:, None]).squeeze(1)
    old = old_logp.float()
    adv = advantages.float()
    log_ratio = (logp - old).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    ratio = torch.exp(log_ratio)
    surrogate = torch.min(ratio * adv, ratio.clamp(1.0 - clip, 1.0 + clip) * adv)
    policy = -surrogate.mean()

    value_loss = _squared_error(value, returns, vf_clip)
    cost_value_loss = _squared_error(cost_value, cost_returns, vf_clip)
    entropy = _entropy(logp_all).mean()
    total = policy + vf_coeff * value_loss + cost_vf_coeff * cost_value_loss
    total = total - entropy_coeff * entropy
    with torch.no_grad():
        approx_kl = (old - logp).mean()
        clip_fraction = ((ratio - 1.0).abs() > clip).float().mean()
    return PPOLoss(
        total=total,
        policy=policy,
        value=value_loss,
        cost_value=cost_value_loss,
        entropy=entropy,
        approx_kl=approx_kl,
        clip_fraction=clip_fraction,
    )


def _entropy(logp_all: Tensor) -> Tensor:
    """Per-row entropy; entries of probability 0 (masked) contribute exactly 0, also to the
    gradient, even for ``-inf`` logits (no ``0 * -inf`` anywhere, forward or backward)."""
    p = logp_all.exp()
    safe_logp = torch.where(p > 0, logp_all, torch.zeros_like(logp_all))
    return -(p * safe_logp).sum(-1)


def _squared_error(pred: Tensor, target: Tensor, vf_clip: float | None) -> Tensor:
    err = (pred.float() - target.float()).pow(2)
    if vf_clip is not None:
        err = err.clamp(max=vf_clip)
    return err.mean()


def _check_coefficients(
    clip: float, vf_coeff: float, cost_vf_coeff: float, entropy_coeff: float, vf_clip: float | None
) -> None:
    if not (math.isfinite(clip) and 0.0 < clip < 1.0):
        raise ValueError(f"clip must be in (0, 1); got {clip}")
    for name, c in (
        ("vf_coeff", vf_coeff),
        ("cost_vf_coeff", cost_vf_coeff),
        ("entropy_coeff", entropy_coeff),
    ):
        if not (math.isfinite(c) and c >= 0.0):
            raise ValueError(f"{name} must be a finite number >= 0; got {c}")
    if vf_clip is not None and not (math.isfinite(vf_clip) and vf_clip > 0.0):
        raise ValueError(f"vf_clip must be None or a finite number > 0; got {vf_clip}")


def _check_shapes(
    logits: Tensor,
    actions: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    value: Tensor,
    returns: Tensor,
    cost_value: Tensor,
    cost_returns: Tensor,
) -> None:
    if logits.dim() != 2 or not logits.is_floating_point():
        raise ValueError(
            f"logits must be a float [B, A] tensor; got {tuple(logits.shape)}, {logits.dtype}"
        )
    b, a = logits.shape
    if b == 0 or a == 0:
        raise ValueError(f"logits must be non-empty [B, A]; got {tuple(logits.shape)}")
    if actions.shape != (b,) or actions.is_floating_point() or actions.dtype == torch.bool:
        raise ValueError(
            f"actions must be an integer [B={b}] tensor; got {tuple(actions.shape)}, {actions.dtype}"
        )
    for name, t in (
        ("old_logp", old_logp),
        ("advantages", advantages),
        ("value", value),
        ("returns", returns),
        ("cost_value", cost_value),
        ("cost_returns", cost_returns),
    ):
        if t.shape != (b,):
            raise ValueError(f"{name} must be [B={b}] like logits [B, A]; got {tuple(t.shape)}")
    if bool(((actions < 0) | (actions >= a)).any()):
        raise ValueError(f"actions must lie in [0, A={a})")
