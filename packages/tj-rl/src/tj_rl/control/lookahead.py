"""``lookahead``: a privileged teacher that looks ahead in the simulation itself (not deployable).

At every decision, each light's feasible greens are tried in copies of the running simulation
while every other light follows a base baseline (default ``max-occupancy``), and the copies run
``horizon_s`` further under the base; each light takes the green whose copy had the fewest halting
vehicles summed over the look-ahead (the env's system queue: waiting vehicle-seconds / delta_time).
This is one step of policy improvement by rollout (Bertsekas, "Rollout, Policy Iteration, and
Distributed Reinforcement Learning", 2020): with SUMO's seeded randomness the copy of the base's
own choice reproduces the base exactly, so a light only leaves the base where the look-ahead
saw less waiting.

The copies are ``os.fork()`` children of the process that runs the env: libsumo runs SUMO
in-process, so a fork is an exact copy of the simulation and of the env (shields, readers, the
base's state) at the price of copy-on-write pages, with nothing to save or reload. Hence libsumo
only, and Linux (WSL2 included: a copy reads /proc to find its files). A child writes no file:
before it steps, every descriptor it inherited that is open for writing a regular file (SUMO's
outputs) is pointed at ``/dev/null``, and it stops before the episode's end (which would close
SUMO's outputs) and leaves with ``os._exit``.

``cost_weights`` (named costs of ``info["costs"]``, each in halting vehicles per decision
interval: 10 means one vehicle of that cost weighs as ten vehicles halting for one interval)
adds the look-ahead's weighted safety costs to its queue, so the teacher ends a green in front of
the dilemma zone only where the waiting it saves is worth it, and its clone leaves a dilemma-zone
guard less to override (issue 28). The shared counters (emergency braking, teleports,
collisions) are in every light's costs, so the look-ahead counts them once per light.
Empty (the default): queue only.

The teacher sees the future (the arrivals of the look-ahead) and costs ``horizon_s`` of
simulation per candidate: phase 2 imitates it (``phase2.imitation.teacher``); it is never a
baseline a controller is judged against.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from tj_rl.env.core import TrafficSignalCore

__all__ = ["LookaheadPolicy", "lookahead_unsupported"]

_TIE = 1e-9


def lookahead_unsupported(backend: str) -> str | None:
    """Why the look-ahead cannot run with ``backend`` here, in words, or None when it can: it
    forks the process running SUMO (libsumo only) and reads /proc (Linux, WSL2 included)."""
    if backend != "libsumo":
        return f"backend={backend}"
    if not os.path.isdir("/proc/self/fd"):
        return "this is not Linux"
    return None


def _silence_file_outputs() -> None:
    """In a fork child: every inherited descriptor writing a regular file goes to /dev/null."""
    null = os.open(os.devnull, os.O_WRONLY)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd <= 2 or fd == null:
            continue
        try:
            if not os.path.isfile(os.readlink(f"/proc/self/fd/{fd}")):
                continue
            with open(f"/proc/self/fdinfo/{fd}") as fh:
                flags = next(int(line.split()[1], 8) for line in fh if line.startswith("flags"))
        except (OSError, StopIteration, ValueError):
            continue
        if flags & (os.O_WRONLY | os.O_RDWR):
            os.dup2(null, fd)


def _prune(keep: set[str]) -> None:
    """In a fork child: remove every vehicle not in ``keep`` (what the lights observed at the
    fork), so the look-ahead plays out only what a controller could have seen."""
    import libsumo

    for vid in libsumo.vehicle.getIDList():
        if vid not in keep:
            libsumo.vehicle.remove(vid)


class LookaheadPolicy:
    """Look-ahead teacher over ``base`` (see the module docstring); ``workers`` copies at once."""

    def __init__(self, base: str = "max-occupancy", horizon_s: float = 40.0, workers: int = 2,
                 sees: str = "all", cost_weights: Mapping[str, float] | None = None,
                 **base_kwargs: Any) -> None:  # fmt: skip
        from tj_rl.control.baselines import POLICIES, make_policy
        from tj_rl.env.config import COST_NAMES

        if base not in POLICIES or base in ("lookahead", "scenario-program", "sumo-actuated"):
            raise ValueError(f"lookahead: base {base!r} must pick greens through the env")
        if not (math.isfinite(horizon_s) and horizon_s > 0):
            raise ValueError(f"lookahead: horizon_s={horizon_s}, need a finite number > 0")
        if workers < 1:
            raise ValueError(f"lookahead: workers={workers}, need >= 1")
        if sees not in ("all", "observed"):
            raise ValueError(f"lookahead: sees={sees!r}, expected 'all' or 'observed'")
        weights = dict(cost_weights or {})
        unknown = sorted(set(weights) - set(COST_NAMES))
        if unknown:
            raise ValueError(f"lookahead: unknown cost(s) {unknown}; known {list(COST_NAMES)}")
        if not all(math.isfinite(float(w)) and float(w) >= 0 for w in weights.values()):
            raise ValueError(f"lookahead: cost_weights must be finite and >= 0, got {weights}")
        self.cost_weights = {k: float(v) for k, v in weights.items()}
        self._weights = np.array([self.cost_weights.get(n, 0.0) for n in COST_NAMES])
        self.sees = sees
        self.base_name, self.horizon_s, self.workers = base, float(horizon_s), int(workers)
        self.base = make_policy(base, **base_kwargs)
        self.env: TrafficSignalCore | None = None
        self.copies = 0  # simulation copies run this episode
        self.changed = 0  # decisions where a light left the base's choice
        self.last_values: dict[str, np.ndarray] = {}  # per light: look-ahead queue per green
        self._pending: dict[int, int] = {}  # running copies: pid -> the read end of its pipe

    def __getstate__(self) -> dict[str, Any]:
        """Without the env (the running SUMO is not data) and without running copies: an unpickled
        teacher is reset on its own env, as every policy is (held-out workers, a saved run)."""
        if self._pending:
            raise RuntimeError("lookahead: cannot pickle while simulation copies are running")
        return self.__dict__ | {"env": None, "_pending": {}}

    def reset(self, env: TrafficSignalCore) -> None:
        why = lookahead_unsupported(env.config.backend)
        if why is not None:
            raise ValueError("lookahead: needs the libsumo backend on Linux (it forks the process "
                             f"running SUMO and reads /proc), but {why}")  # fmt: skip
        self.base.reset(env)
        self.env, self.copies, self.changed, self.last_values = env, 0, 0, {}

    def _value(self, actions: Mapping[str, int], steps: int) -> int:
        """Fork a copy that applies ``actions`` then the base for ``steps - 1`` more decisions;
        the pid (its result arrives on the returned pipe via ``_collect``)."""
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the copy
            code = 1
            try:
                os.close(read)
                _silence_file_outputs()
                env = self.env
                assert env is not None
                keep = {i for f in env.last_frames.values() for i in f.ids}
                total = 0.0
                act = dict(actions)
                for k in range(steps):
                    if self.sees == "observed":
                        _prune(keep)
                    obs, _r, _te, _tr, infos = env.step(act)
                    total += float(next(iter(infos.values()))["system"]["queue"])
                    if self.cost_weights:
                        total += sum(float(i["costs"] @ self._weights) for i in infos.values())
                    if k + 1 < steps:
                        act = self.base.compute_actions(obs, infos)
                os.write(write, struct.pack("d", total))
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        self._pending[pid] = read
        return pid

    def _collect(self, pid: int) -> float:
        read = self._pending.pop(pid)
        try:
            data = os.read(read, 8)
        finally:
            os.close(read)
        _, status = os.waitpid(pid, 0)
        if len(data) != 8 or os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"lookahead: a simulation copy (pid {pid}) failed "
                               f"(exit {os.waitstatus_to_exitcode(status)})")  # fmt: skip
        return struct.unpack("d", data)[0]

    def _values(self, joint: list[dict[str, int]], steps: int) -> list[float]:
        """Each joint action's look-ahead queue, ``workers`` copies at a time."""
        out: list[float] = []
        for i in range(0, len(joint), self.workers):
            pids = [self._value(a, steps) for a in joint[i : i + self.workers]]
            out += [self._collect(p) for p in pids]
        self.copies += len(joint)
        return out

    def compute_actions(self, obs, infos):
        env = self.env
        assert env is not None, "lookahead: reset(env) first"
        base = {a: int(v) for a, v in self.base.compute_actions(obs, infos).items()}
        self.last_values = {}
        remaining = int((env.episode_end - env.sim_time) / env.config.delta_time + 1e-6)
        steps = min(max(round(self.horizon_s / env.config.delta_time), 1), remaining - 1)
        # one copy for the base's joint choice, one per other feasible green of each light
        trials = [(a, g) for a, o in obs.items() for g in np.flatnonzero(o["action_mask"])
                  if int(g) != base[a]]  # fmt: skip
        if steps < 1 or not trials:
            return base
        values = self._values([base] + [base | {a: int(g)} for a, g in trials], steps)
        best = dict.fromkeys(base, values[0])
        out = dict(base)
        for (agent, green), v in zip(trials, values[1:], strict=True):
            if agent not in self.last_values:
                row = np.full(len(obs[agent]["action_mask"]), np.nan)
                row[base[agent]] = values[0]
                self.last_values[agent] = row
            self.last_values[agent][green] = v
            if v < best[agent] - _TIE:
                best[agent], out[agent] = v, green
        self.changed += sum(out[a] != base[a] for a in base)
        return out

    def regrets(self) -> dict[str, np.ndarray]:
        """Per light with a choice at the last decision: each green's look-ahead queue above the
        best one's (0 for the green taken, NaN for greens not feasible): what choosing it would
        cost, the weights of cost-sensitive cloning (AggreVaTe, Ross & Bagnell 2014)."""
        return {a: v - np.nanmin(v) for a, v in self.last_values.items()}

    def describe(self) -> str:
        costs = ", ".join(f"{w:g} x {n}" for n, w in self.cost_weights.items() if w)
        value = "halting vehicles" + (f" + {costs}" if costs else "")
        return (
            f"privileged look-ahead teacher: each light's feasible greens tried in forked copies "
            f"of the simulation for {self.horizon_s:g} s under {self.base_name}, scored by "
            f"{value}; not deployable"
        )
