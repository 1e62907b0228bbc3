"""Freeze/unfreeze submodules by name and wrap them in non-reentrant activation checkpointing.

Freezing changes which parameters get gradients, which DDP fixes at construction time: a phase
change (e.g. phase 3 freezing the world model) must freeze the *unwrapped* model, then rebuild the
DDP wrapper and the optimizer's param groups. `freeze` refuses a DDP-wrapped model for that reason.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable

from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    checkpoint_wrapper,
)
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    apply_activation_checkpointing as _apply_ac,
)
from torch.nn.parallel import DistributedDataParallel

__all__ = [
    "apply_activation_checkpointing",
    "freeze",
    "trainable_parameters",
    "unfreeze",
]

log = logging.getLogger(__name__)


def _submodules(model: nn.Module, names: list[str]) -> list[tuple[str, nn.Module]]:
    if isinstance(model, DistributedDataParallel):
        raise ValueError(
            "model is wrapped in DistributedDataParallel: change the unwrapped module "
            "(model.module) before wrapping, then rebuild the DDP wrapper and the optimizer"
        )
    found = []
    for name in names:
        try:
            found.append((name, model.get_submodule(name)))
        except AttributeError:
            children = ", ".join(n for n, _ in model.named_children()) or "(none)"
            raise KeyError(
                f"model has no submodule {name!r}; top-level children: {children}"
            ) from None
    return found


def _names(names: Iterable[str] | str) -> list[str]:
    return [names] if isinstance(names, str) else list(names)


def _set_requires_grad(model: nn.Module, names: Iterable[str] | str, flag: bool) -> list[str]:
    names = _names(names)
    changed = []
    for prefix, module in _submodules(model, names):
        for pname, param in module.named_parameters():
            if param.requires_grad != flag:
                param.requires_grad_(flag)
                changed.append(f"{prefix}.{pname}" if prefix else pname)
    log.info("%s %d parameters under %s", "unfroze" if flag else "froze", len(changed), list(names))
    return changed


def freeze(model: nn.Module, names: Iterable[str] | str) -> list[str]:
    """Stop gradients for every parameter under the named submodules ("" = whole model).

    Returns the names of the parameters that changed. Rebuild DDP and the optimizer afterwards.
    """
    return _set_requires_grad(model, names, False)


def unfreeze(model: nn.Module, names: Iterable[str] | str) -> list[str]:
    """Inverse of `freeze`; returns the parameters that changed."""
    return _set_requires_grad(model, names, True)


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Parameters with requires_grad, for rebuilding the optimizer after (un)freezing."""
    return [p for p in model.parameters() if p.requires_grad]


def apply_activation_checkpointing(model: nn.Module, names: Iterable[str] | str) -> int:
    """Recompute the named submodules' activations in backward instead of storing them.

    Uses torch's checkpoint wrapper in non-reentrant mode (works with DDP, keyword arguments and
    inputs that do not require grad); state_dict keys are unchanged. Apply before `wrap_ddp`.
    Returns how many modules were wrapped.
    """
    names = _names(names)
    targets = {id(module) for _, module in _submodules(model, names)}
    if id(model) in targets:
        raise ValueError("cannot checkpoint the root module itself; name its submodules")
    wrapper = functools.partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
    _apply_ac(model, checkpoint_wrapper_fn=wrapper, check_fn=lambda m: id(m) in targets)
    log.info("activation checkpointing (non-reentrant) on %s", list(names))
    return len(targets)
