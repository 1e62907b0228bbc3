"""tj_models.ppo: the surrogate at ratio 1, the clipped region's zero gradient, entropy and gradients
with masked actions, the Lagrangian advantage, normalisation, and a bandit that must learn the
cost-aware action only when lambda is large enough."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tj_models import (
    MASK_FILL,
    PPOLoss,
    lagrangian_advantage,
    masked_logits,
    normalize_advantages,
    ppo_lagrangian_loss,
)


def _batch(b: int = 6, a: int = 4, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, a, generator=g)
    actions = torch.randint(0, a, (b,), generator=g)
    return {
        "logits": logits,
        "actions": actions,
        "old_logp": F.log_softmax(logits, -1).gather(1, actions[:, None]).squeeze(1),
        "advantages": torch.randn(b, generator=g),
        "value": torch.randn(b, generator=g),
        "returns": torch.randn(b, generator=g),
        "cost_value": torch.randn(b, generator=g),
        "cost_returns": torch.randn(b, generator=g),
    }


def test_ratio_one_gives_minus_mean_advantage() -> None:
    batch = _batch()
    out = ppo_lagrangian_loss(**batch, entropy_coeff=0.0)
    assert isinstance(out, PPOLoss)
    torch.testing.assert_close(out.policy, -batch["advantages"].mean())
    assert out.approx_kl.abs().item() < 1e-6 and out.clip_fraction.item() == 0.0
    torch.testing.assert_close(out.value, (batch["value"] - batch["returns"]).pow(2).mean())
    mse_c = (batch["cost_value"] - batch["cost_returns"]).pow(2).mean()
    torch.testing.assert_close(out.cost_value, mse_c)
    torch.testing.assert_close(out.total, out.policy + 0.5 * out.value + 0.5 * mse_c)


def test_total_combines_the_parts_with_their_coefficients() -> None:
    out = ppo_lagrangian_loss(**_batch(seed=1), vf_coeff=0.3, cost_vf_coeff=0.7, entropy_coeff=0.05)
    expected = out.policy + 0.3 * out.value + 0.7 * out.cost_value - 0.05 * out.entropy
    torch.testing.assert_close(out.total, expected)


def test_clipped_region_has_zero_policy_gradient() -> None:
    # sample 0: A > 0 and ratio e^0.5 ~ 1.65 > 1.2 (clipped: no gradient);
    # sample 1: A > 0 and ratio 1 (inside: gradient).
    logits = torch.zeros(2, 3, requires_grad=True)
    logp = math.log(1 / 3)
    old_logp = torch.tensor([logp - 0.5, logp])
    out = ppo_lagrangian_loss(
        logits,
        torch.tensor([0, 0]),
        old_logp,
        torch.tensor([1.0, 1.0]),
        *(torch.zeros(2),) * 4,
        entropy_coeff=0.0,
    )
    out.policy.backward()
    assert logits.grad is not None
    assert torch.equal(logits.grad[0], torch.zeros(3))
    assert logits.grad[1].abs().sum() > 0.1
    assert out.clip_fraction.item() == 0.5
    # the clipped sample's surrogate is (1 + clip) * A; the other ratio * A = A
    torch.testing.assert_close(out.policy, -torch.tensor((1.2 + 1.0) / 2))


def test_negative_advantage_above_the_clip_keeps_its_gradient() -> None:
    """min() keeps the unclipped, more pessimistic term: ratio > 1 + clip with A < 0 still learns."""
    logits = torch.zeros(1, 3, requires_grad=True)
    old = torch.tensor([math.log(1 / 3) - 0.5])
    out = ppo_lagrangian_loss(
        logits, torch.tensor([0]), old, torch.tensor([-1.0]), *(torch.zeros(1),) * 4
    )
    out.policy.backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0.1


@pytest.mark.parametrize("fill", [MASK_FILL, float("-inf")])
def test_entropy_with_masked_actions_is_the_entropy_over_the_allowed_ones(fill: float) -> None:
    g = torch.Generator().manual_seed(3)
    raw = torch.randn(5, 6, generator=g, requires_grad=True)
    mask = torch.tensor(
        [
            [1, 1, 0, 0, 0, 0],
            [1, 0, 1, 0, 1, 0],
            [0, 0, 0, 0, 0, 1],
            [1, 1, 1, 1, 1, 1],
            [0, 1, 1, 0, 0, 0],
        ],
        dtype=torch.bool,
    )
    logits = raw.masked_fill(~mask, fill)
    actions = torch.tensor([1, 2, 5, 3, 1])
    b = len(actions)
    out = ppo_lagrangian_loss(
        logits,
        actions,
        torch.full((b,), -1.0),
        torch.randn(b, generator=g),
        *(torch.zeros(b),) * 4,
    )
    expected = []
    for row, m in zip(raw.detach(), mask, strict=True):
        p = torch.softmax(row[m], -1)
        expected.append(-(p * p.log()).sum())
    assert torch.isfinite(out.entropy)
    torch.testing.assert_close(out.entropy, torch.stack(expected).mean())
    out.total.backward()
    assert raw.grad is not None and torch.isfinite(raw.grad).all()
    assert torch.equal(raw.grad[~mask], torch.zeros(int((~mask).sum())))  # masked: exactly 0
    assert raw.grad[mask].abs().sum() > 0


def test_masked_logits_from_the_controller_give_zero_gradient_on_masked_entries() -> None:
    raw = torch.randn(3, 4, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 1], [0, 1, 1, 1]], dtype=torch.bool)
    logits = masked_logits(raw, mask)
    out = ppo_lagrangian_loss(
        logits,
        torch.tensor([0, 3, 2]),
        torch.full((3,), -1.0),
        torch.ones(3),
        *(torch.zeros(3),) * 4,
    )
    out.total.backward()
    assert raw.grad is not None and torch.isfinite(raw.grad).all()
    assert torch.equal(raw.grad[~mask], torch.zeros(int((~mask).sum())))


def test_a_taken_action_that_is_now_masked_stays_finite() -> None:
    """The collector's policy allowed action 2; the current mask forbids it (log-prob ~ -1e4):
    the ratio must not overflow to inf (loss and gradients finite)."""
    raw = torch.randn(2, 3, requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    for adv in (1.0, -1.0):
        raw.grad = None
        out = ppo_lagrangian_loss(
            masked_logits(raw, mask),
            torch.tensor([2, 0]),
            torch.tensor([-1.0, -1.0]),
            torch.tensor([adv, adv]),
            *(torch.zeros(2),) * 4,
        )
        out.total.backward()
        assert torch.isfinite(out.total) and raw.grad is not None
        assert torch.isfinite(raw.grad).all()
    # and an old log-prob at the fill with a now-allowed action: ratio exp(+1e4) would be inf
    out = ppo_lagrangian_loss(
        raw.detach().clone().requires_grad_(),
        torch.tensor([2, 0]),
        torch.tensor([MASK_FILL, -1.0]),
        torch.tensor([-1.0, -1.0]),
        *(torch.zeros(2),) * 4,
    )
    assert torch.isfinite(out.total)


def test_vf_clip_clamps_each_squared_error() -> None:
    value = torch.tensor([0.0, 0.0, 0.0])
    returns = torch.tensor([0.5, 3.0, -10.0])  # squared errors 0.25, 9, 100
    out = ppo_lagrangian_loss(
        torch.zeros(3, 2),
        torch.zeros(3, dtype=torch.long),
        torch.full((3,), math.log(0.5)),
        torch.zeros(3),
        value,
        returns,
        value,
        returns * 2,  # 1, 36, 400
        vf_clip=4.0,
    )
    torch.testing.assert_close(out.value, torch.tensor((0.25 + 4 + 4) / 3))
    torch.testing.assert_close(out.cost_value, torch.tensor((1 + 4 + 4) / 3))


def test_lagrangian_advantage() -> None:
    adv_r, adv_c = torch.tensor([1.0, -2.0, 0.5]), torch.tensor([3.0, 0.0, -1.0])
    assert torch.equal(lagrangian_advantage(adv_r, adv_c, 0.0), adv_r)  # lam=0: plain PPO
    torch.testing.assert_close(lagrangian_advantage(adv_r, adv_c, 2.0), (adv_r - 2 * adv_c) / 3)
    with pytest.raises(ValueError, match="lam must be"):
        lagrangian_advantage(adv_r, adv_c, -0.1)
    with pytest.raises(ValueError, match="same shape"):
        lagrangian_advantage(adv_r, adv_c[:2], 1.0)


def test_normalize_advantages_standardises_rewards_and_only_centres_costs() -> None:
    g = torch.Generator().manual_seed(4)
    adv_r = torch.randn(1000, generator=g) * 5 + 3
    adv_c = torch.randn(1000, generator=g) * 7 - 2
    r, c = normalize_advantages(adv_r, adv_c)
    assert abs(r.mean().item()) < 1e-5 and abs(r.std(unbiased=False).item() - 1) < 1e-5
    assert abs(c.mean().item()) < 1e-4
    torch.testing.assert_close(c.std(), adv_c.std())  # scale kept: lambda keeps its meaning
    r1, c1 = normalize_advantages(torch.tensor([4.0]), torch.tensor([2.0]))  # one sample: 0, no NaN
    assert r1.item() == 0.0 and c1.item() == 0.0
    with pytest.raises(ValueError, match="at least one"):
        normalize_advantages(torch.zeros(0), torch.zeros(0))


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"logits": torch.zeros(6)}, r"logits must be a float \[B, A\]"),
        ({"logits": torch.zeros(6, 4, dtype=torch.long)}, r"logits must be a float \[B, A\]"),
        ({"logits": torch.zeros(0, 4)}, "non-empty"),
        ({"actions": torch.zeros(5, dtype=torch.long)}, r"actions must be an integer \[B=6\]"),
        ({"actions": torch.zeros(6)}, r"actions must be an integer \[B=6\]"),
        ({"actions": torch.full((6,), 4)}, r"actions must lie in \[0, A=4\)"),
        ({"old_logp": torch.zeros(6, 1)}, r"old_logp must be \[B=6\]"),
        ({"advantages": torch.zeros(7)}, r"advantages must be \[B=6\]"),
        ({"returns": torch.zeros(5)}, r"returns must be \[B=6\]"),
        ({"cost_returns": torch.zeros(6, 2)}, r"cost_returns must be \[B=6\]"),
        ({"clip": 0.0}, r"clip must be in \(0, 1\)"),
        ({"entropy_coeff": -1.0}, "entropy_coeff must be"),
        ({"vf_clip": 0.0}, "vf_clip must be"),
    ],
)
def test_bad_inputs_are_rejected(change, match) -> None:
    with pytest.raises(ValueError, match=match):
        ppo_lagrangian_loss(**{**_batch(), **change})


def _train_bandit(lam: float, *, normalise: bool, iterations: int = 60, seed: int = 0) -> float:
    """2-action contextual bandit: action 0 gives reward 1 and cost 1, action 1 reward 0.6 and
    cost 0. A linear policy + linear reward/cost critics on a random context, trained with
    ``ppo_lagrangian_loss`` on ``lagrangian_advantage(adv_r, adv_c, lam)`` (4 Adam steps per
    collected batch: 240 steps). Returns the final mean probability of action 0."""
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 4)  # 2 logits, value, cost value
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    reward, cost = torch.tensor([1.0, 0.6]), torch.tensor([1.0, 0.0])
    for _ in range(iterations):
        x = torch.randn(256, 4)
        with torch.no_grad():
            out = model(x)
            dist = torch.distributions.Categorical(logits=out[:, :2])
            actions = dist.sample()
            old_logp = dist.log_prob(actions)
            r, c = reward[actions], cost[actions]
            adv_r, adv_c = r - out[:, 2], c - out[:, 3]  # one-step episodes: delta = r - V
            if normalise:
                adv_r, adv_c = normalize_advantages(adv_r, adv_c)
            adv = lagrangian_advantage(adv_r, adv_c, lam)
        for _ in range(4):
            out = model(x)
            loss = ppo_lagrangian_loss(
                out[:, :2], actions, old_logp, adv, out[:, 2], r, out[:, 3], c
            )
            opt.zero_grad()
            loss.total.backward()
            opt.step()
    with torch.no_grad():
        return torch.softmax(model(torch.randn(2048, 4))[:, :2], -1)[:, 0].mean().item()


def test_bandit_learns_the_reward_action_without_penalty_and_the_safe_one_with_it() -> None:
    # r - lam * c: lam = 0 -> action 0 (1 > 0.6); lam = 2 -> action 1 (0.6 > 1 - 2)
    assert _train_bandit(0.0, normalise=False) > 0.95
    assert _train_bandit(2.0, normalise=False) < 0.05


def test_bandit_under_omnisafe_normalisation_needs_a_larger_lambda() -> None:
    """With reward advantages standardised and cost advantages only centred, lambda is measured in
    reward standard deviations: lam = 2 never prefers the safe action (the combined advantage of
    action 0 is (1 - p0) * (1 / sqrt(p0 (1 - p0)) - lam) >= 0 for lam <= 2); lam = 5 settles at
    the mixed point sqrt(p0 (1 - p0)) = 1 / 5, p0 ~ 0.042, not at 0."""
    assert _train_bandit(0.0, normalise=True) > 0.95
    assert _train_bandit(2.0, normalise=True) > 0.95
    assert 0.01 < _train_bandit(5.0, normalise=True) < 0.1
