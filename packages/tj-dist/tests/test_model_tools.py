"""freeze/unfreeze by submodule name and non-reentrant activation checkpointing."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tj_dist


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.encoder = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8))
        self.block = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Dropout(0.1), nn.Linear(8, 8))
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.encoder(x)))


def test_freeze_and_unfreeze_by_name() -> None:
    net = Net()
    frozen = tj_dist.freeze(net, ["encoder", "block.3"])
    assert frozen == [
        "encoder.0.weight",
        "encoder.0.bias",
        "encoder.2.weight",
        "encoder.2.bias",
        "block.3.weight",
        "block.3.bias",
    ]
    assert not any(p.requires_grad for p in net.encoder.parameters())
    assert net.block[0].weight.requires_grad and net.head.weight.requires_grad
    assert tj_dist.freeze(net, "encoder") == []  # already frozen: nothing changes
    trainable = tj_dist.trainable_parameters(net)
    assert len(trainable) == sum(1 for p in net.parameters()) - 6
    net(torch.randn(2, 4)).sum().backward()
    assert net.encoder[0].weight.grad is None and net.head.weight.grad is not None
    assert tj_dist.unfreeze(net, "encoder") == frozen[:4]
    assert tj_dist.freeze(net, "") and not tj_dist.trainable_parameters(net)  # "" = whole model


def test_unknown_submodule_names_the_children() -> None:
    with pytest.raises(KeyError, match=r"no submodule 'decoder'.*encoder, block, head"):
        tj_dist.freeze(Net(), "decoder")


def test_activation_checkpointing_recomputes_and_keeps_gradients_and_keys() -> None:
    plain, ckpt = Net(), Net()
    keys = list(plain.state_dict())
    assert tj_dist.apply_activation_checkpointing(ckpt, ["block"]) == 1
    assert list(ckpt.state_dict()) == keys  # checkpoints stay interchangeable
    calls = {"n": 0}
    inner = ckpt.block._checkpoint_wrapped_module
    # a pre-hook: non-reentrant recomputation stops early, so post-forward hooks may not rerun
    inner.register_forward_pre_hook(lambda *_: calls.__setitem__("n", calls["n"] + 1))
    x = torch.randn(16, 4, requires_grad=False)  # non-reentrant works with no-grad inputs
    for model in (plain, ckpt):
        torch.manual_seed(5)  # same dropout mask: recomputation must replay the RNG
        model(x).pow(2).mean().backward()
    assert calls["n"] == 2  # forward, then recomputed in backward
    for (name, a), b in zip(plain.named_parameters(), ckpt.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-7), name
    ckpt.load_state_dict(plain.state_dict())


def test_activation_checkpointing_refuses_root_and_unknown() -> None:
    with pytest.raises(ValueError, match="root module"):
        tj_dist.apply_activation_checkpointing(Net(), "")
    with pytest.raises(KeyError, match="no submodule 'mlp'"):
        tj_dist.apply_activation_checkpointing(Net(), ["mlp"])
