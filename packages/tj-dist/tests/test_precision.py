"""Precision choice per device, TF32 flags, AmpConfig validation, and the GradScaler skip/recover
path exercised for real on CPU (torch.amp.GradScaler("cpu") with fp16 autocast)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tj_dist
from tj_dist import AmpConfig


@pytest.mark.parametrize(
    ("requested", "device", "capability", "precision", "tf32"),
    [
        ("auto", "cuda:0", (7, 5), "fp16", False),  # RTX 2080 Ti (Turing)
        ("auto", "cuda:0", (7, 0), "fp16", False),  # V100
        ("auto", "cuda:0", (8, 6), "bf16", True),  # RTX 3090 (Ampere)
        ("auto", "cuda:0", (9, 0), "bf16", True),  # H100
        ("auto", "cuda:0", (6, 1), "fp32", False),  # Pascal
        ("auto", "cpu", None, "fp32", False),
        ("bf16", "cpu", None, "bf16", False),
        ("fp16", "cpu", None, "fp16", False),
        ("fp32", "cuda:1", (8, 0), "fp32", True),  # fp32 on Ampere still gets TF32 matmuls
        ("fp16", "cuda:0", (8, 0), "fp16", True),
    ],
)
def test_choose_precision(requested, device, capability, precision, tf32) -> None:
    choice = tj_dist.choose_precision(requested, device, capability=capability)
    assert (choice.precision, choice.tf32) == (precision, tf32)
    assert choice.needs_scaler == (precision == "fp16")
    assert (
        choice.dtype
        == {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    )


def test_bf16_refused_where_not_native() -> None:
    with pytest.raises(ValueError, match=r"bf16.*\(7, 5\).*emulated"):
        tj_dist.choose_precision("bf16", "cuda:0", capability=(7, 5))


@pytest.mark.parametrize("name", ["fp8", "half", "", "AUTO"])
def test_unknown_precision_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match=r"precision=.*unknown.*auto, fp32, fp16, bf16"):
        tj_dist.choose_precision(name, "cpu")


def test_enable_tf32_sets_and_clears_flags() -> None:
    before = torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision
    try:
        on = tj_dist.choose_precision("auto", "cuda:0", capability=(8, 6))
        assert tj_dist.enable_tf32(on) is True
        assert torch.backends.cuda.matmul.fp32_precision == "tf32"
        assert torch.backends.cudnn.conv.fp32_precision == "tf32"
        off = tj_dist.choose_precision("auto", "cuda:0", capability=(7, 5))
        assert tj_dist.enable_tf32(off) is False
        assert torch.backends.cuda.matmul.fp32_precision == "ieee"
    finally:
        torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision = before


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"precision": "auto"}, "resolve 'auto'"),
        ({"precision": "fp64"}, "precision='fp64'"),
        ({"device_type": "mps"}, "device_type='mps'"),
        ({"init_scale": 0.0}, "init_scale=0.0"),
        ({"growth_factor": 1.0}, "growth_factor=1.0"),
        ({"backoff_factor": 1.5}, "backoff_factor=1.5"),
        ({"growth_interval": 0}, "growth_interval=0"),
    ],
)
def test_amp_config_rejects_bad_values(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        AmpConfig(**kwargs)


def test_amp_config_builds_scaler_with_its_parameters() -> None:
    cfg = AmpConfig(
        precision="fp16",
        device_type="cpu",
        init_scale=1024.0,
        growth_factor=4.0,
        backoff_factor=0.25,
        growth_interval=7,
    )
    scaler = cfg.make_scaler()
    assert scaler.is_enabled()
    assert scaler.get_scale() == 1024.0
    assert scaler.get_growth_factor() == 4.0
    assert scaler.get_backoff_factor() == 0.25
    assert scaler.get_growth_interval() == 7
    assert not AmpConfig(precision="bf16", device_type="cpu").make_scaler().is_enabled()
    assert AmpConfig.from_choice(tj_dist.choose_precision("bf16", "cpu")).precision == "bf16"


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))


def test_fp16_scaler_skips_a_step_on_inf_and_recovers() -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    amp = AmpConfig(
        precision="fp16", device_type="cpu", init_scale=2.0**10, growth_interval=2
    ).build()
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    history = []
    for step in range(6):
        before = [p.detach().clone() for p in model.parameters()]
        with amp.autocast():
            out = model(x)
            assert out.dtype == torch.float16
            loss = F.mse_loss(out.float(), y)
            if step == 2:
                loss = loss * math.inf  # injected overflow
        amp.scale_loss(loss).backward()
        stepped = amp.step(opt)
        opt.zero_grad()
        changed = any(
            not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True)
        )
        history.append((stepped, changed, amp.scale))
    assert [h[0] for h in history] == [True, True, False, True, True, True]
    assert [h[1] for h in history] == [True, True, False, True, True, True]
    scales = [h[2] for h in history]
    assert scales[1] == 2.0**11  # grew after growth_interval=2 clean steps
    assert scales[2] == 2.0**10  # backed off by 0.5 on the inf
    assert scales[4] == 2.0**11  # and recovered
    assert amp.skipped_steps == 1 and amp.steps == 6 and not amp.last_step_skipped


def test_bf16_autocast_path_trains_without_scaling() -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    amp = AmpConfig(precision="bf16", device_type="cpu").build()
    assert not amp.enabled and amp.scale == 1.0
    x = torch.randn(64, 4)
    y = x.sum(dim=1, keepdim=True)
    losses = []
    for _ in range(20):
        with amp.autocast():
            out = model(x)
            assert out.dtype == torch.bfloat16
            loss = F.mse_loss(out.float(), y)
        amp.scale_loss(loss).backward()
        assert amp.step(opt)
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    assert amp.skipped_steps == 0


def test_accumulated_group_with_inf_is_skipped_whole_and_training_goes_on() -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    amp = AmpConfig(precision="fp16", device_type="cpu", init_scale=2.0**8).build()
    acc = tj_dist.GradAccumulator(model, opt, steps=3, amp=amp, clip_grad_norm=1.0)
    batches = [torch.randn(8, 5) for _ in range(9)]
    outcomes = []
    for mb in acc.micro_batches(batches):
        with mb:
            loss = F.mse_loss(model(mb.data[:, :4]).float(), mb.data[:, 4:])
            if mb.index == 4:  # middle of the second group
                loss = loss * math.inf  # inf gradients (adding inf would not reach them)
            mb.backward(loss)
        if mb.sync:
            outcomes.append((mb.stepped, mb.skipped))
    assert outcomes == [(True, False), (False, True), (True, False)]
    assert acc.optimizer_steps == 3 and acc.skipped_steps == 1 and amp.skipped_steps == 1
    assert amp.scale == 2.0**7
    assert all(torch.isfinite(p).all() for p in model.parameters())
