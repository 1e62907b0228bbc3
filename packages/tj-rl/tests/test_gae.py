"""tj_rl.rollout.advantages: hand-computed cases, the lam/gamma limits, termination vs truncation, no carry across
episode ends, [T, L] vs per-light calls, and off-by-one variants that must fail the same checks."""

from __future__ import annotations

import numpy as np
import pytest

from tj_rl.rollout import gae


def _no_ends(n: int) -> dict[str, np.ndarray]:
    return {"terminated": np.zeros(n, bool), "episode_end": np.zeros(n, bool)}


def _random_fragment(rng: np.random.Generator, shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    end = rng.random(shape) < 0.2
    return {
        "rewards": rng.normal(size=shape),
        "values": rng.normal(size=shape),
        "next_values": rng.normal(size=shape),
        "terminated": end & (rng.random(shape) < 0.5),
        "episode_end": end,
    }


def _reference(rewards, values, next_values, terminated, episode_end, gamma, lam) -> np.ndarray:
    """A_t as the explicit sum over the rest of t's episode (within the fragment), [T] only."""
    t_len = len(rewards)
    delta = [
        rewards[t] + gamma * (0.0 if terminated[t] else next_values[t]) - values[t]
        for t in range(t_len)
    ]
    adv = np.zeros(t_len)
    for t in range(t_len):
        k = t
        while True:
            adv[t] += (gamma * lam) ** (k - t) * delta[k]
            if episode_end[k] or k == t_len - 1:
                break
            k += 1
    return adv


def test_hand_computed_three_steps() -> None:
    # delta = [1 + .9*1 - .5, 2 + .9*1.5 - 1, 3 + .9*2 - 1.5] = [1.4, 2.35, 3.3]; gamma*lam = .72
    # A2 = 3.3; A1 = 2.35 + .72*3.3 = 4.726; A0 = 1.4 + .72*4.726 = 4.80272
    adv, ret = gae(
        np.array([1.0, 2.0, 3.0]),
        np.array([0.5, 1.0, 1.5]),
        np.array([1.0, 1.5, 2.0]),
        **_no_ends(3),
        gamma=0.9,
        lam=0.8,
    )
    assert adv.dtype == np.float32 and ret.dtype == np.float32 and adv.shape == (3,)
    np.testing.assert_allclose(adv, [4.80272, 4.726, 3.3], rtol=1e-6)
    np.testing.assert_allclose(ret, [5.30272, 5.726, 4.8], rtol=1e-6)


def test_lam_zero_is_one_step_td() -> None:
    rng = np.random.default_rng(0)
    f = _random_fragment(rng, (50,))
    adv, ret = gae(**f, gamma=0.97, lam=0.0)
    nv = np.where(f["terminated"], 0.0, f["next_values"])
    td = f["rewards"] + 0.97 * nv - f["values"]
    np.testing.assert_allclose(adv, td, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ret, f["rewards"] + 0.97 * nv, rtol=1e-5, atol=1e-6)


def test_lam_one_gamma_one_without_bootstrap_is_reward_to_go_minus_value() -> None:
    rng = np.random.default_rng(1)
    t_len = 20
    r, v = rng.normal(size=t_len), rng.normal(size=t_len)
    nv = np.append(v[1:], 123.0)  # consistent bootstraps; the last one is ignored (terminated)
    term = np.zeros(t_len, bool)
    term[-1] = True
    adv, ret = gae(r, v, nv, terminated=term, episode_end=term.copy(), gamma=1.0, lam=1.0)
    to_go = np.cumsum(r[::-1])[::-1]
    np.testing.assert_allclose(adv, to_go - v, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, to_go, rtol=1e-5, atol=1e-5)


# An episode ends after step 0; gamma = lam = 0.5 (gamma*lam = 0.25).
# Steps 1-2 (next episode): delta2 = 3 + .5*2 - 1.5 = 2.5, A2 = 2.5;
#                           delta1 = 2 + .5*1.5 - 1 = 1.75, A1 = 1.75 + .25*2.5 = 2.375.
# Step 0 truncated:  delta0 = 1 + .5*4 - .5 = 2.5 -> A0 = 2.5  (bootstraps, no carry)
# Step 0 terminated: delta0 = 1 - .5 = 0.5        -> A0 = 0.5  (no bootstrap, no carry)
_BOUNDARY = {
    "rewards": np.array([1.0, 2.0, 3.0]),
    "values": np.array([0.5, 1.0, 1.5]),
    "next_values": np.array([4.0, 1.5, 2.0]),
}


def test_truncation_bootstraps_termination_does_not() -> None:
    end = np.array([True, False, False])
    trunc, _ = gae(**_BOUNDARY, terminated=np.zeros(3, bool), episode_end=end, gamma=0.5, lam=0.5)
    term, _ = gae(**_BOUNDARY, terminated=end.copy(), episode_end=end, gamma=0.5, lam=0.5)
    np.testing.assert_allclose(trunc, [2.5, 2.375, 2.5], rtol=1e-6)
    np.testing.assert_allclose(term, [0.5, 2.375, 2.5], rtol=1e-6)


def test_no_carry_across_episode_end() -> None:
    rng = np.random.default_rng(2)
    f = _random_fragment(rng, (30,))
    f["episode_end"][:] = False
    f["terminated"][:] = False
    f["episode_end"][9] = True
    adv, _ = gae(**f, gamma=0.99, lam=0.95)
    later = dict(f, rewards=f["rewards"].copy(), values=f["values"].copy())
    later["rewards"][10:] += 100.0
    later["values"][10:] -= 7.0
    adv2, _ = gae(**later, gamma=0.99, lam=0.95)
    np.testing.assert_array_equal(adv[:10], adv2[:10])  # the first episode never sees the second
    assert not np.allclose(adv[10:], adv2[10:])
    without_end = dict(later, episode_end=np.zeros(30, bool))
    adv3, _ = gae(**without_end, gamma=0.99, lam=0.95)
    assert not np.allclose(adv3[:10], adv2[:10])  # ...which it would without the flag


def test_many_lights_equal_separate_calls() -> None:
    rng = np.random.default_rng(3)
    f = _random_fragment(rng, (40, 5))
    adv, ret = gae(**f, gamma=0.95, lam=0.9)
    assert adv.shape == ret.shape == (40, 5)
    for light in range(5):
        one = {k: v[:, light] for k, v in f.items()}
        a, r = gae(**one, gamma=0.95, lam=0.9)
        np.testing.assert_array_equal(adv[:, light], a)
        np.testing.assert_array_equal(ret[:, light], r)


def test_matches_the_explicit_sum_on_random_fragments() -> None:
    rng = np.random.default_rng(4)
    for _ in range(20):
        f = _random_fragment(rng, (int(rng.integers(1, 25)),))
        adv, _ = gae(**f, gamma=0.9, lam=0.7)
        ref = _reference(**f, gamma=0.9, lam=0.7)
        np.testing.assert_allclose(adv, ref, rtol=1e-5, atol=1e-5)


# Off-by-one variants a collector could plausibly write; the checks above must reject each.
def _flag_as_episode_start(rewards, values, next_values, terminated, episode_end, gamma, lam):
    """Reads the flags one step late (as if they marked the first step of the next episode)."""
    shifted_end = np.append(False, episode_end[:-1])
    shifted_term = np.append(False, terminated[:-1])
    return gae(
        rewards,
        values,
        next_values,
        terminated=shifted_term,
        episode_end=shifted_end,
        gamma=gamma,
        lam=lam,
    )[0]


def _bootstrap_from_next_row(rewards, values, next_values, terminated, episode_end, gamma, lam):
    """Bootstraps from values[t + 1] (the next row, which after an end is the next episode)."""
    nv = np.append(values[1:], next_values[-1])
    return gae(
        rewards, values, nv, terminated=terminated, episode_end=episode_end, gamma=gamma, lam=lam
    )[0]


@pytest.mark.parametrize("variant", [_flag_as_episode_start, _bootstrap_from_next_row])
def test_off_by_one_variants_fail_the_hand_computed_boundary(variant) -> None:
    end = np.array([True, False, False])
    kwargs = {"terminated": np.zeros(3, bool), "episode_end": end, "gamma": 0.5, "lam": 0.5}
    expected = [2.5, 2.375, 2.5]  # test_truncation_bootstraps_termination_does_not
    np.testing.assert_allclose(gae(**_BOUNDARY, **kwargs)[0], expected, rtol=1e-6)
    assert not np.allclose(variant(**_BOUNDARY, **kwargs), expected)
    rng = np.random.default_rng(5)
    f = _random_fragment(rng, (30,))
    ref = _reference(**f, gamma=0.9, lam=0.7)
    assert not np.allclose(variant(**f, gamma=0.9, lam=0.7), ref, atol=1e-4)


def test_empty_fragment() -> None:
    adv, ret = gae(np.zeros(0), np.zeros(0), np.zeros(0), **_no_ends(0), gamma=0.9, lam=0.9)
    assert adv.shape == ret.shape == (0,) and adv.dtype == np.float32


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"values": np.zeros(4)}, "values has shape"),
        ({"next_values": np.zeros((3, 1))}, "next_values has shape"),
        ({"terminated": np.zeros(3, np.int8)}, "terminated must be a bool array"),
        ({"episode_end": np.zeros(2, bool)}, "episode_end has shape"),
        ({"rewards": np.zeros(3, bool)}, "rewards must be a real"),
        ({"rewards": np.array(["a", "b", "c"])}, "rewards must be a real"),
        ({"values": np.array([0.0, np.nan, 0.0])}, r"non-finite value at index \[1\]"),
        ({"terminated": np.array([True, False, False])}, "terminated implies episode_end"),
        ({"gamma": 1.5}, r"gamma must be in \[0, 1\]"),
        ({"lam": -0.1}, r"lam must be in \[0, 1\]"),
        ({"lam": float("nan")}, r"lam must be in \[0, 1\]"),
        ({"gamma": True}, "gamma must be a number"),
    ],
)
def test_bad_inputs_are_rejected(change, match) -> None:
    args = {
        "rewards": np.zeros(3),
        "values": np.zeros(3),
        "next_values": np.zeros(3),
        **_no_ends(3),
        "gamma": 0.9,
        "lam": 0.9,
        **change,
    }
    with pytest.raises(ValueError, match=match):
        gae(**args)


def test_three_dimensional_rewards_are_rejected() -> None:
    z = np.zeros((2, 2, 2))
    with pytest.raises(ValueError, match=r"\[T\] or \[T, L\]"):
        gae(z, z, z, terminated=z > 0, episode_end=z > 0, gamma=0.9, lam=0.9)


def test_top_level_name_is_the_function_and_needs_no_torch(fresh_python) -> None:
    """``from tj_rl.rollout import gae`` is the function even after ``import
    tj_rl.rollout.advantages`` (its module has another name), and loads no torch."""
    code = (
        "import sys, types\n"
        "import tj_rl.rollout.advantages\n"
        "from tj_rl.rollout import gae\n"
        "import tj_rl.rollout\n"
        "print(isinstance(gae, types.FunctionType) and tj_rl.rollout.gae is gae,"
        " 'torch' in sys.modules)\n"
    )
    assert fresh_python(code, timeout=120) == "True False"
