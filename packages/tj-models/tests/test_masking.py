"""Masked actions get exactly zero probability in every precision; the shield never empties a row."""

from __future__ import annotations

import pytest
import torch

from tj_models import MASK_FILL, InvalidGraphError, TrafficAgent, masked_logits


def _mask(b: int, a: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(b, a, generator=g) > 0.5
    mask[:, 0] |= ~mask.any(-1)  # at least one valid action per row
    return mask


def _check_zero_probability(logits: torch.Tensor, mask: torch.Tensor) -> None:
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        lg = logits.to(dtype)
        assert torch.isfinite(lg).all(), dtype
        p = torch.softmax(lg.float() if dtype is torch.float16 else lg, -1)
        assert torch.all(p[~mask] == 0), dtype
        logp = torch.log_softmax(lg.float(), -1)
        entropy = -(p.float() * logp).sum(-1)
        assert torch.isfinite(entropy).all(), dtype


def test_masked_actions_have_zero_probability(tiny_agent: TrafficAgent, make_batch) -> None:
    batch = make_batch([6, 0, 9, 4])
    mask = _mask(4, 8)
    out = tiny_agent.policy(batch, mask)
    assert out.logits.dtype == torch.float32
    _check_zero_probability(out.logits, mask)
    assert torch.equal(out.action_mask, mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out16 = tiny_agent.policy(batch, mask)
    _check_zero_probability(out16.logits, mask)
    assert torch.tensor(MASK_FILL, dtype=torch.float16).isfinite()


def test_mask_defaults_to_phase_count_and_pads_narrow_masks(
    tiny_agent: TrafficAgent, make_batch
) -> None:
    batch = make_batch([3, 4, 5], phases=[2, 4, 3])
    out = tiny_agent.policy(batch)  # intersections with 2, 4 and 3 phases
    assert out.action_mask.sum(-1).tolist() == [2, 4, 3]
    assert torch.all(torch.softmax(out.logits, -1)[~out.action_mask] == 0)
    narrow = torch.tensor([[True, False, True]] * 3)
    out = tiny_agent.policy(batch, narrow)
    assert out.action_mask.shape == (3, 8) and out.action_mask.sum().item() == 6


def test_row_without_valid_action(tiny_agent: TrafficAgent, make_batch) -> None:
    batch = make_batch([3, 2])
    mask = torch.tensor([[True] + [False] * 7, [False] * 8])
    out = tiny_agent.policy(batch, mask)
    p = torch.softmax(out.logits, -1)
    assert torch.allclose(p[1], torch.full((8,), 1 / 8))  # uniform and finite, no NaN
    debug = TrafficAgent.preset("tiny", debug=True)
    with pytest.raises(InvalidGraphError, match=r"rows \[1\] allow no action"):
        debug.policy(batch, mask)
    with pytest.raises(InvalidGraphError, match="action_mask"):
        tiny_agent.policy(batch, torch.ones(3, 8, dtype=torch.bool))
    with pytest.raises(InvalidGraphError, match="action_mask"):
        tiny_agent.policy(batch, torch.ones(2, 9, dtype=torch.bool))


def test_masked_logits_helper() -> None:
    logits = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float16)
    out = masked_logits(logits, torch.tensor([[True, False, True]]))
    assert out.dtype == torch.float32 and out[0, 1] == MASK_FILL


def test_shielded_policy_vetoes_by_cost_but_never_empties(
    tiny_agent: TrafficAgent, make_batch
) -> None:
    batch = make_batch([5, 7, 0, 3])
    rule = _mask(4, 8, seed=2)
    enc = tiny_agent.encode(batch)
    cost = tiny_agent.shield(enc).detach()
    # threshold above every cost: the env's rule mask alone
    loose = tiny_agent.shielded_policy(float(cost.max()) + 1)(enc, rule)
    assert torch.equal(loose.mask, rule) and not loose.vetoed.any() and not loose.fallback.any()
    # threshold below every cost: fall back to the cheapest allowed action(s)
    strict = tiny_agent.shielded_policy(float(cost.min()) - 1)(enc, rule)
    assert strict.fallback.all()
    cheapest = cost.masked_fill(~rule, float("inf")).argmin(-1)
    assert torch.all(strict.mask[torch.arange(4), cheapest])
    assert torch.all(strict.mask.sum(-1) >= 1) and not torch.any(strict.mask & ~rule)
    # a threshold between: allowed actions over it are vetoed, the others stay
    mid = float(cost[rule].median())
    out = tiny_agent.shielded_policy(mid)(enc, rule)
    keep = rule & (cost <= mid)
    rows = keep.any(-1)
    assert torch.equal(out.mask[rows], keep[rows])
    assert torch.equal(out.vetoed, rule & ~out.mask)
    assert torch.all(torch.softmax(out.logits, -1)[~out.mask] == 0)
    with pytest.raises(ValueError, match="finite"):
        tiny_agent.shielded_policy(float("nan"))
