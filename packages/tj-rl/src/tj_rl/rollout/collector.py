"""``RolloutCollector``: one SUMO env and the current policy on the CPU, producing fragments.

The loop a phase-3 collector process runs (the process itself, its restart and its queue belong
to the trainer): act on all lights in one forward pass of the one ``Actor`` (GNN + controller,
optionally behind the learned shield; sampled with the collector's generator), step the env, and every ``fragment_steps`` decision steps emit a ``Fragment`` of
graph samples with reward and cost GAE (``rollout.py``) and the episodes that ended in it.

Weights arrive as a file (``publish_weights``: safetensors, written atomically, the policy version
in its metadata): the collector checks the file between fragments and loads a newer version, so
every fragment is produced by exactly one version, which it carries. No Ray, no CUDA; torch runs
with the threads the caller sets.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tj_models import TrafficAgent
from tj_rl.control.actor import Actor, ActorOutput
from tj_rl.control.dz_guard import DzGuard, DzGuardConfig
from tj_rl.control.fit import check_agent_env
from tj_rl.control.unpad import OBSERVATION_KEYS
from tj_rl.env.core import TrafficSignalCore
from tj_rl.rollout.samples import Transition, fragment_samples

__all__ = ["Fragment", "RolloutCollector", "publish_weights", "read_weights"]

TRAINED = ("controller.", "shield.")  # what phase 3 trains and publishes


def publish_weights(path: str | Path, agent: TrafficAgent, version: int) -> None:
    """Write the agent's controller and shield weights with ``version`` (atomic: temp + rename)."""
    from safetensors.torch import save_file

    from tj_monitor import atomic_write

    state = {k: v.detach().cpu().contiguous() for k, v in agent.state_dict().items()
             if k.startswith(TRAINED)}  # fmt: skip
    atomic_write(Path(path), lambda tmp: save_file(state, str(tmp),
                                                   metadata={"version": str(int(version))}))


def read_weights(path: str | Path) -> tuple[dict[str, torch.Tensor], int]:
    """(controller + shield state, version) from ``publish_weights``' file."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        version = int(f.metadata()["version"])
        return {k: f.get_tensor(k) for k in f.keys()}, version  # noqa: SIM118


@dataclass(kw_only=True)
class Fragment:
    """Samples of ``steps`` decision steps of one policy ``version``, and the episodes that ended
    in them (``return`` mean over lights, ``cost`` summed over lights, named ``costs``)."""

    samples: list[dict[str, np.ndarray]]
    version: int
    steps: int
    episodes: list[dict[str, Any]] = field(default_factory=list)


class RolloutCollector:
    """Run the env with the policy and yield ``Fragment``s (``fragments()`` never ends).

    ``env_config``: the env's config mapping (``EnvConfig`` fields + ``scenario``); ``agent_dir``:
    the agent to act with (its GNN stays as loaded); ``weights``: a ``publish_weights`` file that
    overrides its controller and shield once it exists. ``shield_threshold``: act behind the
    learned shield's veto (None: the env's rule mask only). ``seed`` seeds SUMO, the route order
    and the action draws. ``dz_guard``: the lights act behind a dilemma-zone guard
    (``tj_rl.control.dz_guard``): the env runs the guarded greens while the samples keep the
    policy's own action and its log-probability, so the guard is part of the env the policy
    learns in (on-policy, as any shield). ``cost_scale`` multiplies the per-step cost the critics learn (the
    samples' ``cost``, its advantages and returns; episode summaries keep the env's units).
    Options and the agent's fit to the env's spaces are checked here, before SUMO starts.
    """

    def __init__(self, env_config: Mapping[str, Any], agent_dir: str | Path, *,
                 weights: str | Path | None = None, seed: int = 0, fragment_steps: int = 64,
                 gamma: float = 0.99, lam: float = 0.95, cost_scale: float = 1.0,
                 shield_threshold: float | None = None,
                 dz_guard: DzGuardConfig | None = None) -> None:  # fmt: skip
        if fragment_steps < 1:
            raise ValueError(f"fragment_steps={fragment_steps}: expected >= 1")
        if not cost_scale > 0:
            raise ValueError(f"cost_scale={cost_scale}: expected > 0")
        cfg = {**env_config, "route_stream": int(seed) % (2**31)}
        self.env = TrafficSignalCore(cfg)
        self.agent = TrafficAgent.load(agent_dir).eval()
        check_agent_env(self.agent, self.env, f"RolloutCollector({agent_dir})")
        self.actor = Actor.from_agent(self.agent, shield_threshold=shield_threshold)
        self.weights = Path(weights) if weights is not None else None
        self.version = 0
        self._seen: tuple[int, int] | None = None
        self.seed, self.fragment_steps, self.gamma, self.lam = seed, fragment_steps, gamma, lam
        self.shield_threshold, self.cost_scale = shield_threshold, float(cost_scale)
        self.generator = torch.Generator().manual_seed(int(seed))
        self.guard = DzGuard(dz_guard) if dz_guard is not None else None
        self._episodes = 0

    # ------------------------------------------------------------------ weights
    def refresh(self) -> bool:
        """Load the published weights if the file changed since the last look; True if loaded."""
        if self.weights is None:
            return False
        try:
            st = os.stat(self.weights)
        except FileNotFoundError:
            return False
        key = (st.st_ino, st.st_mtime_ns)
        if key == self._seen:
            return False
        state, version = read_weights(self.weights)
        self._check_fits(state)  # before loading: a refused file leaves the agent as it was
        self.agent.load_state_dict(state, strict=False)
        self._seen, self.version = key, version
        return True

    def _check_fits(self, state: Mapping[str, torch.Tensor]) -> None:
        """``ValueError`` naming the file unless ``state`` holds exactly the agent's trained
        tensors (controller and shield), each of the agent's shape."""
        own = self.agent.state_dict()
        unexpected = sorted(k for k in state if k not in own)
        missing = sorted(k for k in own if k.startswith(TRAINED) and k not in state)
        shapes = [f"{k} {tuple(v.shape)} != {tuple(own[k].shape)}" for k, v in sorted(state.items())
                  if k in own and v.shape != own[k].shape]  # fmt: skip
        if unexpected or missing or shapes:
            raise ValueError(f"{self.weights}: weights do not fit the agent (unexpected "
                             f"{unexpected[:3]}, missing {missing[:3]}, shapes {shapes[:3]})")

    # ------------------------------------------------------------------ acting
    @torch.no_grad()
    def forward(self, obs: Mapping[str, Mapping[str, np.ndarray]]) -> ActorOutput:
        """The actor on every light of ``obs``: masked logits, the mask used, values."""
        agents = list(obs)
        batch = {k: torch.from_numpy(np.stack([obs[a][k] for a in agents]))
                 for k in OBSERVATION_KEYS}  # fmt: skip
        return self.actor.forward(batch)

    def _reset(self) -> dict[str, Any]:
        self._episodes += 1
        # SUMO takes a 32-bit seed: one per (collector seed, episode)
        obs, _ = self.env.reset(seed=(int(self.seed) * 100_003 + self._episodes) % (2**31 - 1))
        if self.guard is not None:
            self.guard.reset(self.env)
        return obs

    def fragments(self) -> Iterator[Fragment]:
        """Endless fragments; weights are refreshed between fragments (one version each)."""
        self.refresh()
        obs = self._reset()
        out = self.forward(obs)
        steps: list[Transition] = []
        episodes: list[dict[str, Any]] = []
        ep = _Episode(len(obs))
        while True:
            agents = list(obs)
            chosen = Actor.chosen(out, sample=True, generator=self.generator)
            action, logp = chosen.action.numpy(), chosen.logp.numpy()
            acting = dict(zip(agents, action.tolist(), strict=True))
            if self.guard is not None:  # the env runs the guarded greens; samples keep the policy's
                acting = self.guard.apply(obs, acting)
            nobs, rewards, terminated, truncated, infos = self.env.step(acting)
            reward = np.array([rewards[a] for a in agents], np.float32)
            cost = np.array([infos[a]["cost"] for a in agents], np.float32)
            ep.add(reward, cost, np.sum([infos[a]["costs"] for a in agents], axis=0))
            ended = bool(truncated["__all__"] or terminated["__all__"])
            nxt = self.forward(nobs)
            mask = out.mask.numpy().astype(np.int8)  # the mask the action was drawn under
            observations = [{**obs[a], "action_mask": mask[i]} for i, a in enumerate(agents)]
            steps.append(Transition(
                observations=observations, action=action, logp=logp, value=out.value.numpy(),
                cost_value=out.cost_value.numpy(), reward=reward, cost=cost * self.cost_scale,
                next_value=nxt.value.numpy(), next_cost_value=nxt.cost_value.numpy(),
                terminated=bool(terminated["__all__"]), episode_end=ended,
            ))  # fmt: skip
            if ended:
                info = next(iter(infos.values()))
                episodes.append(ep.summary(self.version, info))
                obs = self._reset()
                ep = _Episode(len(obs))
                nxt = self.forward(obs)
            else:
                obs = nobs
            out = nxt
            if len(steps) >= self.fragment_steps:
                samples = fragment_samples(steps, version=self.version, gamma=self.gamma,
                                           lam=self.lam)  # fmt: skip
                yield Fragment(samples=samples, version=self.version, steps=len(steps),
                               episodes=episodes)  # fmt: skip
                steps, episodes = [], []
                if self.refresh():
                    out = self.forward(obs)  # act with the new version from here on

    def close(self) -> None:
        self.env.close()


class _Episode:
    """Running sums of one episode."""

    def __init__(self, lights: int) -> None:
        self.lights, self.ret, self.cost, self.length = lights, 0.0, 0.0, 0
        self.costs: np.ndarray | None = None

    def add(self, reward: np.ndarray, cost: np.ndarray, named: np.ndarray) -> None:
        self.ret += float(reward.mean())
        self.cost += float(cost.sum())
        self.costs = named if self.costs is None else self.costs + named
        self.length += 1

    def summary(self, version: int, last_info: dict[str, Any]) -> dict[str, Any]:
        """The episode's sums, and how it ended (from its last step's info)."""
        from tj_rl.env.config import COST_NAMES

        named = self.costs if self.costs is not None else np.zeros(len(COST_NAMES))
        died = str(last_info.get("truncated_reason", "")).startswith("sumo_died")
        return {"return": self.ret, "cost": self.cost, "length": self.length,
                "version": version, "sumo_died": died,
                "gridlock": last_info.get("failure") == "gridlock",
                "costs": {c: float(v) for c, v in zip(COST_NAMES, named, strict=True)}}  # fmt: skip
