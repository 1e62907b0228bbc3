"""Held-out evaluation of a set of policies (the trained ones) next to the baselines users would
deploy (``phase2.eval``: tj-rl's, the scenario's own signal programs, SUMO's actuated control):
every policy on the same held-out route files (normal and ~30% heavier) x SUMO seeds never used
in training x the episode time windows, same env, with spread over episodes. With cost weights,
each episode's weighted safety cost (summed over steps and lights, as phase 3 trains on it) is
added to its row and to the table. Under each table: the windows and how each policy decides.
The same protocol on validation traffic (``evaluate_validation``) is what choices are made by."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tj_hybrid.config import HybridConfig
from tj_hybrid.rl_setup import RLSetup
from tj_monitor import atomic_write_json
from tj_rl.env import COST_NAMES

if TYPE_CHECKING:
    from tj_rl.eval import HeldOutTable

__all__ = [
    "EVAL_METRICS",
    "delays",
    "evaluate_policies",
    "evaluate_validation",
    "held_out_set",
    "row_cache",
    "save_evaluation",
    "validation_delays",
    "validation_table",
    "weighted_cost",
]

log = logging.getLogger(__name__)

SETS = ("held_out", "held_out_heavy")
# the table's columns when costs are weighted: tj-rl's held-out metrics, the weighted cost, vetoes
EVAL_METRICS = ("avg_delay", "avg_trip_time", "avg_waiting_time", "mean_queue", "throughput",
                "cost", *(f"cost_{c}" for c in COST_NAMES), "vetoes")  # fmt: skip


def weighted_cost(row: Mapping[str, Any], weights: Mapping[str, float]) -> float:
    """An episode's safety cost: the named costs of its row weighted as in training."""
    return float(sum(weights.get(c, 0.0) * row[f"cost_{c}"] for c in COST_NAMES))


def _env(setup: RLSetup, cost_weights: Mapping[str, float] | None) -> Any:
    """The evaluation env: the RL setup's, SUMO's metrics on, phase 3's cost weights if given."""
    env = dataclasses.replace(setup.env, metrics=True, route_files=())
    if cost_weights is not None:
        env = dataclasses.replace(env, cost_weights=dict(cost_weights))
    return env


def _workers(cfg: HybridConfig) -> int:
    """``phase2.eval.workers`` resolved on this machine and memory budget (said in the log)."""
    from tj_hybrid.rl_setup import eval_worker_count
    from tj_monitor import memory_limit

    asked = cfg.phase2.eval.workers
    n = eval_worker_count(asked, budget=cfg.memory.budget_bytes(memory_limit()))
    if asked == "auto":
        log.info("evaluation: up to %d worker process(es) (phase2.eval.workers=auto: CPUs and "
                 "memory budget), for a table whose rest would take over %g s here", n,
                 cfg.phase2.eval.spawn_after_s)  # fmt: skip
    return n


def row_cache(cfg: HybridConfig) -> Any:
    """Where evaluations keep their episodes' rows (``phase2.eval.reuse_rows``): a tj-rl
    ``RowCache`` in ``eval-rows/`` of the data root, shared by every scenario, run and phase
    (rows are keyed by policy, traffic, SUMO seed, env settings and code); None: every episode
    runs."""
    from tj_hybrid.data_paths import data_root
    from tj_rl.eval import RowCache

    return RowCache(data_root(cfg) / "eval-rows") if cfg.phase2.eval.reuse_rows else None


def _score(table: HeldOutTable, cost_weights: Mapping[str, float] | None) -> HeldOutTable:
    """Each row's weighted episode cost (``cost``), when there are weights."""
    if cost_weights is not None:
        for row in table.rows:
            row["cost"] = weighted_cost(row, cost_weights)
    return table


def evaluate_policies(cfg: HybridConfig, setup: RLSetup, policies: Mapping[str, Any], *,
                      cost_weights: Mapping[str, float] | None = None) -> dict[str, Any]:  # fmt: skip
    """``{set: {"markdown", "rows", "summary"}}`` of ``policies`` (name -> tj-rl policy) and the
    configured baselines on ``setup``'s held-out sets and ``phase2.eval.sumo_seeds``."""
    from tj_hybrid.training import torch_threads
    from tj_rl.eval import HELDOUT_METRICS, evaluate_heldout

    env = _env(setup, cost_weights)
    metrics = HELDOUT_METRICS if cost_weights is None else EVAL_METRICS
    named = {**policies, **cfg.phase2.eval.baseline_policies(setup.net_cache, setup.programs)}
    workers, cache = _workers(cfg), row_cache(cfg)
    out: dict[str, Any] = {}
    for label, demand in zip(SETS, (setup.held_out, setup.held_out_heavy), strict=True):
        with torch_threads(1):  # one small forward per decision (see training/threads.py)
            table = evaluate_heldout(setup.heldout_scenario, named, demand,
                                     cfg.phase2.eval.sumo_seeds, config=env,
                                     training_seeds=(), workers=workers,
                                     spawn_after_s=cfg.phase2.eval.spawn_after_s,
                                     progress=True, cache=cache)  # fmt: skip
        out[label] = held_out_set(_score(table, cost_weights), metrics,
                                  traffic=demand.describe())  # fmt: skip
    return out


def validation_table(cfg: HybridConfig, setup: RLSetup, policies: Mapping[str, Any], *,
                     cost_weights: Mapping[str, float] | None = None,
                     backend: str | None = None, parallel: bool = False) -> HeldOutTable:  # fmt: skip
    """tj-rl's table of ``policies`` on validation traffic (``phase2.validation``: route and SUMO
    seeds never trained or reported on, in its ``windows``): every choice made on validation runs
    through here, so each (policy, episode) is one row-cache entry whoever asks. ``backend``: the
    env's SUMO backend (``traci`` while PPO runs: the driver's own env runner holds this process's
    libsumo); ``parallel``: episodes in ``phase2.eval.workers`` processes, with a progress bar."""
    from tj_hybrid.training import torch_threads
    from tj_rl.eval import evaluate_heldout

    if setup.validation is None:
        raise ValueError("validation: the RL setup has no validation traffic")
    env = _env(setup, cost_weights)
    if backend is not None:
        env = dataclasses.replace(env, backend=backend)
    spread = {"workers": _workers(cfg), "spawn_after_s": cfg.phase2.eval.spawn_after_s,
              "progress": True} if parallel else {}  # fmt: skip
    with torch_threads(1):  # one small forward per decision (see training/threads.py)
        table = evaluate_heldout(setup.validation_scenario, dict(policies), setup.validation,
                                 cfg.phase2.validation.sumo_seeds, config=env, name="validation",
                                 cache=row_cache(cfg), **spread)  # fmt: skip
    return _score(table, cost_weights)


def delays(table: HeldOutTable) -> dict[str, tuple[float, float]]:
    """``{policy: (mean, worst)}`` average delay over ``table``'s episodes."""
    return {p: (c["avg_delay"].mean, c["avg_delay"].max)
            for p, c in table.summary(("avg_delay",)).items()}  # fmt: skip


def validation_delays(cfg: HybridConfig, setup: RLSetup, policies: Mapping[str, Any], *,
                      backend: str | None = None) -> dict[str, tuple[float, float]]:  # fmt: skip
    """``{policy: (mean, worst)}`` average delay over the validation episodes (every window of
    ``phase2.validation.windows`` x validation route file x validation SUMO seed)."""
    return delays(validation_table(cfg, setup, policies, backend=backend))


def evaluate_validation(cfg: HybridConfig, setup: RLSetup, policies: Mapping[str, Any], *,
                        cost_weights: Mapping[str, float],
                        baselines: bool = True) -> dict[str, Any]:  # fmt: skip
    """One set, ``{"markdown", "rows", "summary"}``, of ``policies`` and (``baselines``) the
    configured baselines on validation traffic, each episode's weighted cost added: what a
    choice is made by."""
    named = dict(policies)
    if baselines:
        named |= cfg.phase2.eval.baseline_policies(setup.net_cache, setup.programs)
    table = validation_table(cfg, setup, named, cost_weights=cost_weights, parallel=True)
    return held_out_set(table, EVAL_METRICS, traffic=setup.validation.describe())


def held_out_set(table: HeldOutTable, metrics: Sequence[str], *,
                 traffic: str = "") -> dict[str, Any]:  # fmt: skip
    """One set as a phase keeps it: tj-rl's markdown table with its legend (the traffic and time
    windows, how each policy decides), every episode's row (with its window), the labels, and
    per policy and metric the spread over episodes (``tj_hybrid.results.HeldOutSet`` reads it
    back). Traffic with pedestrians adds their count and mean wait (``HeldOutTable.columns``)."""
    metrics = table.columns(metrics)
    legend = (f"Traffic: {traffic}.\n" if traffic else "") + table.legend()
    markdown = table.to_markdown(metrics) + (f"\n\n{legend}" if legend else "")
    return {"markdown": markdown, "rows": table.rows, "labels": dict(table.labels),
            "windows": list(table.windows),
            "summary": {p: {m: s._asdict() for m, s in ms.items()}
                        for p, ms in table.summary(metrics).items()}}  # fmt: skip


def save_evaluation(path: Path, evaluation: Mapping[str, Any]) -> None:
    """Write ``evaluation`` (summary and rows of each set) to a phase's ``eval.json``."""
    atomic_write_json(path, {k: {"summary": v["summary"], "rows": v["rows"]}
                             for k, v in evaluation.items()})  # fmt: skip
