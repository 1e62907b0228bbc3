"""The imitation suite's measurement, run in a spawned child (``tj_monitor.run_in_child``): libsumo
holds one simulation per process and the look-ahead teacher forks the process running it, so
neither enters the runner.

The recipe is phase 2's own (``tj_hybrid.phase2.imitation``): the teacher drives
``phase2.imitation.episodes`` training episodes, the first clone drives ``dagger_rounds`` x
``dagger_episodes`` more that the teacher labels, and every clone is then fitted to the same
demonstrations, one per seed. ``SecondBest`` is the teacher with a share of its choices replaced
by its second-best green: what a clone's disagreement of that size would cost the teacher.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SecondBest", "measure"]


class SecondBest:
    """``teacher`` (a look-ahead policy: ``last_values`` per light) that, at each decision with
    two or more feasible greens, takes its second-best green with probability ``rate``."""

    def __init__(self, teacher: Any, rate: float, seed: int = 0) -> None:
        if not 0.0 < rate < 1.0:
            raise ValueError(f"SecondBest: rate={rate}, need 0 < rate < 1")
        self.teacher, self.rate, self.seed = teacher, float(rate), int(seed)
        self.rng = np.random.default_rng(seed)
        self.flipped = 0

    def reset(self, env: Any) -> None:
        self.teacher.reset(env)
        self.rng, self.flipped = np.random.default_rng(self.seed), 0

    def compute_actions(self, obs: Mapping[str, Any], infos: Mapping[str, Any]) -> dict[str, int]:
        out = dict(self.teacher.compute_actions(obs, infos))
        for agent, values in self.teacher.last_values.items():
            feasible = np.flatnonzero(np.isfinite(values))
            if len(feasible) < 2 or self.rng.random() >= self.rate:
                continue
            ranked = feasible[np.argsort(values[feasible], kind="stable")]
            out[agent] = int(next(g for g in ranked if g != out[agent]))
            self.flipped += 1
        return out


def _means(table: Mapping[str, Any]) -> dict[str, float]:
    return {p: float(m["avg_delay"]["mean"]) for p, m in table["summary"].items()}


def measure(profile: str, sets: Sequence[str], agent: Path, work: Path, teacher: str,
            seeds: Sequence[int], flips: Sequence[float]) -> dict[str, Any]:  # fmt: skip
    """Record the teacher once, clone it once per seed, and evaluate the teacher, the flipped
    teachers, the clones and the configured baselines on the held-out sets: ``{"teacher": label,
    "demonstrations", "agreement" (per DAgger round), "record_s", "accuracy": {seed: share}, "held_out" and
    "held_out_heavy": {policy: mean avg delay}, "labels": {policy: how it decides}}``."""
    import torch

    from tj_hybrid import (
        evaluate_policies,
        imitation_module,
        load_config,
        make_teacher,
        prepare_rl,
        record_teacher,
        scenario_data_dir,
    )
    from tj_rl.control import AgentPolicy
    from tj_rl.imitation import clone
    from tj_rl.rllib import export_agent

    torch.set_num_threads(1)  # small batches: a second thread only spins (as phase 2)
    cfg = load_config(profile=profile, overrides=list(sets)).config
    im = cfg.phase2.imitation
    setup = prepare_rl(cfg, agent_dir=agent, data_dir=scenario_data_dir(cfg),
                       temp_dir=work / "episodes")  # fmt: skip
    label, policy = make_teacher(cfg, teacher)
    t0 = time.perf_counter()
    demos = record_teacher(setup, policy, im.episodes, 0)
    clones: dict[str, Path] = {}
    accuracy: dict[int, float] = {}
    agreement: list[float] = []  # per DAgger round: the share of steps the clone drove as taught
    for i, seed in enumerate(seeds):
        torch.manual_seed(seed)
        module, _ = imitation_module(cfg, setup, agent)
        trained = [module.controller] + ([] if module.frozen_gnn else [module.gnn])
        clone_cfg = dataclasses.replace(im.clone, seed=seed)
        if i == 0:  # the first clone drives the DAgger episodes, as in phase 2
            for r in range(im.dagger_rounds):
                clone(module.actor, trained, demos, clone_cfg)
                driver = AgentPolicy(export_agent(module, agent, work / "dagger"))
                more = record_teacher(setup, policy, im.dagger_episodes,
                                      im.episodes + r * im.dagger_episodes, acting=driver)  # fmt: skip
                agreement.append(more.agreement)
                demos = demos + more
            record_s = time.perf_counter() - t0
            torch.manual_seed(seed)
            module, _ = imitation_module(cfg, setup, agent)
            trained = [module.controller] + ([] if module.frozen_gnn else [module.gnn])
        result = clone(module.actor, trained, demos, clone_cfg)
        accuracy[seed] = result.validation_accuracy
        clones[f"clone-s{seed}"] = export_agent(module, agent, work / f"clone-s{seed}")
    policies: dict[str, Any] = {"teacher": policy}
    if hasattr(policy, "last_values"):
        policies |= {f"second-best-{r:g}": SecondBest(policy, r) for r in flips}
    policies |= {name: AgentPolicy(path) for name, path in clones.items()}
    evaluation = evaluate_policies(cfg, setup, policies)
    return {"teacher": label, "demonstrations": len(demos), "agreement": agreement,
            "record_s": record_s, "accuracy": accuracy,
            "flips": hasattr(policy, "last_values"),
            "held_out": _means(evaluation["held_out"]),
            "held_out_heavy": _means(evaluation["held_out_heavy"]),
            "labels": dict(evaluation["held_out"]["labels"])}  # fmt: skip
