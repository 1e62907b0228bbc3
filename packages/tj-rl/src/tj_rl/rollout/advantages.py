"""Generalised advantage estimation (Schulman et al. 2016) over collected fragments, numpy only.

Phase 3's collectors compute advantages and returns here, in the env process, before streaming
samples to the learner: no torch in the collector's GAE path. Time is axis 0; an optional axis 1
holds lights stepping together. Terminated and truncated episode ends differ: a terminated step
has no future (its next value counts as 0); a truncated one bootstraps from the value of its final
observation. Neither lets the recursion carry into the next episode.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["gae"]


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    *,
    terminated: np.ndarray,
    episode_end: np.ndarray,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """``(advantages, returns)``, float32, shaped like ``rewards`` ([T] or [T, L]).

    ``next_values[t]`` is the value of the observation after step t (the bootstrap);
    ``terminated[t]``: the episode terminated after step t (no bootstrap); ``episode_end[t]``:
    an episode ended after step t, terminated or truncated (no carry across t).

    ``delta_t = r_t + gamma * (1 - terminated_t) * next_values_t - values_t``,
    ``A_t = delta_t + gamma * lam * (1 - episode_end_t) * A_{t+1}`` with ``A_T = 0`` (the
    fragment's end bootstraps through ``next_values[T-1]``), ``returns = A + values``.
    Computed in float64, returned as float32.
    """
    gamma = _unit_interval("gamma", gamma)
    lam = _unit_interval("lam", lam)
    r = _real("rewards", rewards)
    shape = r.shape
    if r.ndim not in (1, 2):
        raise ValueError(f"gae: rewards must be [T] or [T, L]; got shape {shape}")
    v = _real("values", values, shape)
    nv = _real("next_values", next_values, shape)
    term = _flags("terminated", terminated, shape)
    end = _flags("episode_end", episode_end, shape)
    if bool((term & ~end).any()):
        first = np.argwhere(term & ~end)[0].tolist()
        raise ValueError(
            f"gae: terminated implies episode_end, but terminated is set without episode_end "
            f"at index {first}"
        )

    delta = r + gamma * np.where(term, 0.0, nv) - v
    carry = gamma * lam * (~end)
    adv = np.empty_like(delta)
    running = np.zeros(shape[1:], dtype=np.float64)
    for t in range(shape[0] - 1, -1, -1):
        running = delta[t] + carry[t] * running
        adv[t] = running
    return adv.astype(np.float32), (adv + v).astype(np.float32)


def _unit_interval(name: str, x: float) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float | np.floating | np.integer):
        raise ValueError(f"gae: {name} must be a number in [0, 1]; got {x!r}")
    x = float(x)
    if not (math.isfinite(x) and 0.0 <= x <= 1.0):
        raise ValueError(f"gae: {name} must be in [0, 1]; got {x}")
    return x


def _real(name: str, a: np.ndarray, shape: tuple[int, ...] | None = None) -> np.ndarray:
    arr = np.asarray(a)
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iuf":
        raise ValueError(f"gae: {name} must be a real (int or float) array; got dtype {arr.dtype}")
    if shape is not None and arr.shape != shape:
        raise ValueError(f"gae: {name} has shape {arr.shape}, rewards have {shape}")
    arr = arr.astype(np.float64, copy=False)
    if not np.isfinite(arr).all():
        first = np.argwhere(~np.isfinite(arr))[0].tolist()
        raise ValueError(f"gae: {name} holds a non-finite value at index {first}")
    return arr


def _flags(name: str, a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    arr = np.asarray(a)
    if arr.dtype != np.bool_:
        raise ValueError(f"gae: {name} must be a bool array; got dtype {arr.dtype}")
    if arr.shape != shape:
        raise ValueError(f"gae: {name} has shape {arr.shape}, rewards have {shape}")
    return arr
