"""Several simulations per env runner, stepped at once: ``ParallelVectorEnv`` and
``ParallelEnvRunner``.

The graph module's forward on one decision costs far more than the env's step (per-op overhead of
a small network: ~2-3 ms at batch 1, ~0.4 ms per decision at batch 8, one core), and RLlib's
per-step bookkeeping is paid per env step, not per agent. With ``num_envs_per_env_runner=k`` the
env runner batches the k sub-envs' agents into one forward; ``ProcessTrafficSignalEnv`` lets k
libsumo simulations live beside each other (one per child process), and this vector env sends
every child its step before it reads any reply, so the simulations advance on all cores while
this process waits. Results are RLlib's ``SyncVectorMultiAgentEnv``'s (same auto-reset rule),
not copied again: every reply is a new object.

``ParallelEnvRunner`` is RLlib's ``MultiAgentEnvRunner`` whose vector env is this one; it also
gives each sub-env its own route stream (RLlib builds them all from one ``EnvContext``, so they
would draw the demand pool's files in the same order). Configure::

    config.environment(ProcessTrafficSignalEnv, env_config=...)
    config.env_runners(num_envs_per_env_runner=k, env_runner_cls=ParallelEnvRunner)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
from ray.rllib.env.vector.sync_vector_multi_agent_env import SyncVectorMultiAgentEnv

from tj_rl.rllib.env import ProcessTrafficSignalEnv

__all__ = ["ParallelEnvRunner", "ParallelVectorEnv"]


class ParallelVectorEnv(SyncVectorMultiAgentEnv):
    """A vector of ``ProcessTrafficSignalEnv`` (gym-wrapped as RLlib makes them) that resets and
    steps all of them at once; sub-env ``i`` draws the routes of stream ``stream_base + i``."""

    def __init__(self, envs: Sequence[Any], *, stream_base: int = 0) -> None:
        inner = [e.unwrapped for e in envs]
        wrong = [type(e).__name__ for e in inner if not isinstance(e, ProcessTrafficSignalEnv)]
        if wrong:
            self.closed = True  # nothing to close: no __del__ complaint about a half-built env
            raise TypeError(f"ParallelVectorEnv steps ProcessTrafficSignalEnv only, got {wrong} "
                            "(config.environment(ProcessTrafficSignalEnv, ...))")  # fmt: skip
        super().__init__([lambda e=e: e for e in envs], copy=False)
        self._procs: list[ProcessTrafficSignalEnv] = inner
        for i, env in enumerate(inner):
            env.set_route_stream(stream_base + i)

    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[list, list]:  # fmt: skip
        seeds = _seeds(seed, self.num_envs)
        self._autoreset_envs = np.zeros((self.num_envs,), dtype=np.bool_)
        for env, s in zip(self._procs, seeds, strict=True):
            env.send_reset(seed=s, options=options)
        for i, env in enumerate(self._procs):
            self._observations[i], self._infos[i] = env.receive()
        return list(self._observations), list(self._infos)

    def step(self, actions: list[dict[Any, Any]]):
        resets = self._autoreset_envs.copy()
        for i, (env, action) in enumerate(zip(self._procs, actions, strict=True)):
            if resets[i]:  # "next_step" auto-reset: this step resets the finished sub-env
                env.send_reset()
            else:
                env.send_step(action)
        for i, env in enumerate(self._procs):
            if resets[i]:
                self._observations[i], self._infos[i] = env.receive()
                agents = env.possible_agents
                self._rewards[i] = dict.fromkeys(agents, 0.0)
                self._terminations[i] = dict.fromkeys(agents, False) | {"__all__": False}
                self._truncations[i] = dict.fromkeys(agents, False) | {"__all__": False}
            else:
                (self._observations[i], self._rewards[i], self._terminations[i],
                 self._truncations[i], self._infos[i]) = env.receive()  # fmt: skip
        self._autoreset_envs = np.logical_or(
            np.array([t["__all__"] for t in self._terminations]),
            np.array([t.get("__all__", False) for t in self._truncations]),
        )
        return (list(self._observations), np.copy(self._rewards), np.copy(self._terminations),
                np.copy(self._truncations), np.copy(self._infos))  # fmt: skip


def _seeds(seed: int | Sequence[int | None] | None, n: int) -> list[int | None]:
    """Per sub-env seeds as ``SyncVectorMultiAgentEnv.reset`` makes them."""
    if seed is None:
        return [None] * n
    if isinstance(seed, int):
        return [seed + i for i in range(n)]
    if len(seed) != n:
        raise ValueError(f"{len(seed)} seeds for {n} sub-envs")
    return list(seed)


class ParallelEnvRunner(MultiAgentEnvRunner):
    """RLlib's multi-agent env runner with ``ParallelVectorEnv`` as its vector env (sub-env ``i``
    of env runner ``w``: route stream ``1000 w + i``, as ``TrafficSignalEnv`` numbers them)."""

    def make_env(self) -> None:
        super().make_env()
        built = self.env
        vector = ParallelVectorEnv(built.envs, stream_base=1000 * int(self.worker_index or 0))
        vector.spec = built.unwrapped.spec
        built.envs, built.closed = [], True  # its sub-envs live on in ``vector``
        self.env = vector
