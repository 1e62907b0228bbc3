"""Demonstrations: every light's padded observation at every decision step, the teacher's green
there, and the discounted return from there.

``record_demonstrations`` runs whole episodes in a ``TrafficSignalCore``. The env is stepped by
``acting`` (default: the teacher itself); with another acting policy (the clone) the teacher only
labels the states that policy visits: DAgger (Ross et al., 2011), which corrects behaviour
cloning's drift away from the states the teacher shows. The return is that of the acting policy's
own reward stream (the env's reward, as PPO sees it), truncated at the episode's end: a warm start
for the value head, not an unbiased estimate. A teacher with a ``regrets()`` method (the
``lookahead`` teacher) also gives, per light and step, what each green would cost against its best
one: cloning then weighs a decision by what a wrong green there costs (AggreVaTe).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tj_rl.control.baselines import Policy
from tj_rl.env.core import TrafficSignalCore

__all__ = ["Demonstrations", "discounted_returns", "record_demonstrations"]


@dataclass(kw_only=True)
class Demonstrations:
    """``obs[key]`` [n, ...] (every key of the env's observation), ``actions`` [n] int64 (the
    teacher's),
    ``returns`` [n] float32, ``agreement``: the share of steps where the acting policy chose the
    teacher's green (1.0 when the teacher acts); ``regrets`` [n, actions] float32 or None: each
    green's cost against the teacher's best (NaN: not known, e.g. not feasible)."""

    obs: dict[str, np.ndarray]
    actions: np.ndarray
    returns: np.ndarray
    regrets: np.ndarray | None = None
    agreement: float = 1.0
    episodes: int = 0
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.actions)
        bad = [k for k, v in self.obs.items() if len(v) != n]
        if bad or len(self.returns) != n or "action_mask" not in self.obs:
            raise ValueError(f"Demonstrations: {n} actions but observation keys {bad}, the "
                             "returns or a missing action_mask differ")  # fmt: skip
        if self.regrets is not None and self.regrets.shape != self.obs["action_mask"].shape:
            raise ValueError(f"Demonstrations: regrets {self.regrets.shape}, need the action "
                             f"mask's shape {self.obs['action_mask'].shape}")  # fmt: skip

    def _regrets_or_nan(self) -> np.ndarray:
        if self.regrets is not None:
            return self.regrets
        return np.full(self.obs["action_mask"].shape, np.nan, np.float32)

    def __len__(self) -> int:
        return len(self.actions)

    def __add__(self, other: Demonstrations) -> Demonstrations:
        """Both sets, this one first (DAgger's aggregation)."""
        n, m = len(self), len(other)
        regrets = None
        if self.regrets is not None or other.regrets is not None:
            regrets = np.concatenate([self._regrets_or_nan(), other._regrets_or_nan()])
        return Demonstrations(
            obs={k: np.concatenate([v, other.obs[k]]) for k, v in self.obs.items()},
            actions=np.concatenate([self.actions, other.actions]),
            returns=np.concatenate([self.returns, other.returns]), regrets=regrets,
            agreement=(self.agreement * n + other.agreement * m) / max(n + m, 1),
            episodes=self.episodes + other.episodes, notes=[*self.notes, *other.notes],
        )  # fmt: skip

    def take(self, index: np.ndarray) -> dict[str, np.ndarray]:
        """Rows ``index`` as one batch: the observation keys plus ``actions`` and ``returns``."""
        out = {k: v[index] for k, v in self.obs.items()}
        return out | {"actions": self.actions[index], "returns": self.returns[index]}

    def weights(self) -> np.ndarray:
        """[n] float32, mean 1 over the decisions with a known choice: a decision's weight is the
        mean regret of the greens the teacher did not take (what a wrong green costs there); 1
        where no regret is known; 0 where every alternative costs the same as the best."""
        n = len(self)
        if self.regrets is None:
            return np.ones(n, np.float32)
        reg = np.where(self.obs["action_mask"].astype(bool), self.regrets, np.nan)
        reg[np.arange(n), self.actions] = np.nan  # the teacher's own green
        known = np.isfinite(reg).any(axis=1)
        out = np.ones(n, np.float32)
        if known.any():
            mean = np.nanmean(reg[known], axis=1)
            scale = float(mean.mean())
            out[known] = mean / scale if scale > 0 else 1.0
        return out


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """``G_t = r_t + gamma * G_{t+1}`` over a [T, L] reward array (T steps, L lights), 0 after
    the last step."""
    out = np.zeros_like(rewards, dtype=np.float64)
    running = np.zeros(rewards.shape[1:], dtype=np.float64)
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out.astype(np.float32)


def _episode(env: TrafficSignalCore, teacher: Policy, acting: Policy, seed: int, gamma: float
             ) -> tuple[list[Mapping[str, Any]], list[int], np.ndarray, int, list[np.ndarray]]:  # fmt: skip
    """One episode: (observations, teacher actions, returns, agreeing steps, the teacher's
    regrets if it gives them), time major."""
    obs, infos = env.reset(seed=seed)
    teacher.reset(env)
    if acting is not teacher:
        acting.reset(env)
    agents = list(env.possible_agents)
    seen: list[Mapping[str, Any]] = []
    labels: list[int] = []
    regrets: list[np.ndarray] = []
    rewards: list[list[float]] = []
    agree = 0
    regret_of = getattr(teacher, "regrets", None)
    while True:
        wanted = teacher.compute_actions(obs, infos)
        if callable(regret_of):
            known = regret_of()
            regrets += [known.get(a, np.full(len(obs[a]["action_mask"]), np.nan)) for a in agents]
        chosen = wanted if acting is teacher else acting.compute_actions(obs, infos)
        # copies: an env may reuse its observation buffers at the next step
        seen += [{k: np.array(v) for k, v in obs[a].items()} for a in agents]
        labels += [int(wanted[a]) for a in agents]
        agree += sum(int(wanted[a]) == int(chosen[a]) for a in agents)
        obs, rew, term, trunc, infos = env.step(chosen)
        rewards.append([float(rew.get(a, 0.0)) for a in agents])
        if trunc["__all__"] or term["__all__"]:  # term: a gridlock, when the env detects them
            break
    returns = discounted_returns(np.asarray(rewards, dtype=np.float64), gamma).reshape(-1)
    return seen, labels, returns, agree, regrets


def record_demonstrations(env: TrafficSignalCore, teacher: Policy, seeds: Sequence[int], *,
                          acting: Policy | None = None, gamma: float = 0.99) -> Demonstrations:  # fmt: skip
    """Run one episode per SUMO seed in ``seeds`` on ``env`` (its scenario and route files as
    built), labelled by ``teacher`` and stepped by ``acting`` (default: the teacher)."""
    if not seeds:
        raise ValueError("record_demonstrations: need one or more SUMO seeds")
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"record_demonstrations: gamma={gamma}, need 0 < gamma <= 1")
    actor = teacher if acting is None else acting
    seen: list[Mapping[str, Any]] = []
    labels: list[int] = []
    returns: list[np.ndarray] = []
    regrets: list[np.ndarray] = []
    agree = 0
    for seed in seeds:
        s, a, r, g, q = _episode(env, teacher, actor, int(seed), gamma)
        seen += s
        labels += a
        returns.append(r)
        regrets += q
        agree += g
    obs = {k: np.stack([o[k] for o in seen]) for k in seen[0]}
    return Demonstrations(obs=obs, actions=np.asarray(labels, dtype=np.int64),
                          returns=np.concatenate(returns), agreement=agree / max(len(labels), 1),
                          regrets=np.stack(regrets).astype(np.float32) if regrets else None,
                          episodes=len(seeds))  # fmt: skip
