"""Behaviour cloning: fit a graph policy (the one ``Actor``: GNN + controller) to demonstrations.

The loss is the cross-entropy of the masked logits against the teacher's green plus
``value_coeff`` times the squared error of the value head against the recorded returns (PPO then
starts with a critic that already knows the scale of the returns, so its first advantages do not
undo the clone), divided by the training returns' variance when that exceeds 1: the value head
shares the controller's tokens, and returns of -86 +- 33 (Braunschweig) otherwise drown the
cross-entropy (the clone of a fixed cycle there got 10% of its choices right; 99% scaled). A held-out share of the samples picks the epoch: training stops after
``patience`` epochs without a better validation loss and the best epoch's weights are restored.
With the teacher's regrets (``Demonstrations.regrets``, ``weighting="regret"``) each decision's
cross-entropy is weighted by what a wrong green costs there (cost-sensitive imitation, AggreVaTe:
Ross & Bagnell 2014), so the clone spends its capacity where the choice matters; the validation
loss that stops training is weighted the same way. Samples whose teacher green is masked (none
for tj-rl's baselines, which respect the mask) are dropped and counted. Only the parameters passed are trained (the controller, and the GNN when it
is fine-tuned): a frozen encoder stays as it is.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tj_rl.control.actor import Actor
from tj_rl.imitation.config import CloneConfig
from tj_rl.imitation.demonstrations import Demonstrations

__all__ = ["CloneConfig", "CloneResult", "clone", "value_weight"]


@dataclass(frozen=True, kw_only=True)
class CloneResult:
    """What cloning reached: accuracy = share of samples where the clone's argmax is the
    teacher's green; a decision with one legal green is always right, so
    ``validation_choice_accuracy`` counts only those with a choice (NaN: none);
    ``best_epoch`` is the one whose weights were kept."""

    samples: int
    dropped: int
    epochs: int
    best_epoch: int
    train_accuracy: float
    validation_accuracy: float
    validation_choice_accuracy: float
    validation_loss: float


def _tensors(batch: dict[str, np.ndarray]) -> dict[str, Tensor]:
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in batch.items()}


def _losses(actor: Actor, batch: dict[str, Tensor],
            value_coeff: float) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """(total loss, weighted cross-entropy, per-sample bool: the clone chose the teacher's green)
    of one batch."""
    out = actor.forward(batch)
    ce = (F.cross_entropy(out.logits.float(), batch["actions"], reduction="none")
          * batch["weights"]).mean()  # fmt: skip
    value = F.mse_loss(out.value.float(), batch["returns"].float())
    correct = out.logits.argmax(-1) == batch["actions"]
    return ce + value_coeff * value, ce, correct


def value_weight(coeff: float, returns: np.ndarray) -> float:
    """The value loss's weight: ``coeff`` over the returns' variance when that exceeds 1 (the
    squared error then reads as the share of the returns' variance left unexplained, whatever
    the reward's scale), else ``coeff`` itself."""
    return coeff / max(float(np.var(returns)), 1.0) if len(returns) else coeff


def _take(demos: Demonstrations, rows: np.ndarray, weights: np.ndarray) -> dict[str, Tensor]:
    return _tensors(demos.take(rows) | {"weights": weights[rows]})


def _evaluate(actor: Actor, demos: Demonstrations, index: np.ndarray, batch: int,
              value_coeff: float, weights: np.ndarray) -> tuple[float, float, float]:  # fmt: skip
    """(mean cross-entropy, accuracy, accuracy on the decisions with more than one legal green)
    over ``index``, without gradients (NaN where there is nothing to count)."""
    if len(index) == 0:
        return math.nan, math.nan, math.nan
    ce_sum, correct, choices, right_choices = 0.0, 0, 0, 0
    with torch.no_grad():
        for start in range(0, len(index), batch):
            rows = index[start:start + batch]
            _, ce, right = _losses(actor, _take(demos, rows, weights), value_coeff)
            choice = torch.from_numpy(demos.obs["action_mask"][rows].astype(bool).sum(-1) > 1)
            ce_sum += float(ce) * len(rows)
            correct += int(right.sum())
            choices += int(choice.sum())
            right_choices += int((right & choice).sum())
    return (ce_sum / len(index), correct / len(index),
            right_choices / choices if choices else math.nan)  # fmt: skip


def clone(actor: Actor, modules: Sequence[nn.Module], demos: Demonstrations,
          config: CloneConfig | None = None, *,
          progress: Callable[[int, float, float], None] | None = None) -> CloneResult:  # fmt: skip
    """Train ``modules``' parameters (those of ``actor`` to fit: its controller, and its GNN when
    not frozen) on ``demos``; the best epoch's weights are left in them. ``progress(epoch,
    validation loss, validation accuracy)`` is called after each epoch."""
    cfg = config if config is not None else CloneConfig()
    params: list[nn.Parameter] = [p for m in modules for p in m.parameters() if p.requires_grad]
    if not params:
        raise ValueError("clone: the modules have no trainable parameters")
    rows = np.arange(len(demos))
    legal = demos.obs["action_mask"][rows, demos.actions].astype(bool)
    kept = rows[legal]
    if len(kept) < 2:
        raise ValueError(f"clone: {len(kept)} usable samples of {len(demos)}; need 2 or more")
    weights = demos.weights() if cfg.weighting == "regret" else np.ones(len(demos), np.float32)
    rng = np.random.default_rng(cfg.seed)
    kept = rng.permutation(kept)
    n_val = max(1, round(len(kept) * cfg.validation_fraction))
    val, train = kept[:n_val], kept[n_val:]
    value_coeff = value_weight(cfg.value_coeff, demos.returns[train])
    optimiser = torch.optim.Adam(params, lr=cfg.lr)
    best = (math.inf, 0, [copy.deepcopy(m.state_dict()) for m in modules])
    epoch = 0
    for epoch in range(1, cfg.epochs + 1):
        for m in modules:
            m.train()
        for start in range(0, len(train), cfg.batch):
            batch = _take(demos, train[start:start + cfg.batch], weights)
            loss, _, _ = _losses(actor, batch, value_coeff)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
        train = rng.permutation(train)
        for m in modules:
            m.eval()
        val_loss, val_acc, _ = _evaluate(actor, demos, val, cfg.batch, value_coeff, weights)
        if progress is not None:
            progress(epoch, val_loss, val_acc)
        if val_loss < best[0] - 1e-6:
            best = (val_loss, epoch, [copy.deepcopy(m.state_dict()) for m in modules])
        elif epoch - best[1] >= cfg.patience:
            break
    for m, state in zip(modules, best[2], strict=True):
        m.load_state_dict(state)
        m.eval()
    val_loss, val_acc, val_choice = _evaluate(actor, demos, val, cfg.batch, value_coeff, weights)
    _, train_acc, _ = _evaluate(actor, demos, train, cfg.batch, value_coeff, weights)
    return CloneResult(samples=len(kept), dropped=len(demos) - len(kept), epochs=epoch,
                       best_epoch=best[1], train_accuracy=train_acc,
                       validation_accuracy=val_acc, validation_choice_accuracy=val_choice,
                       validation_loss=val_loss)  # fmt: skip
