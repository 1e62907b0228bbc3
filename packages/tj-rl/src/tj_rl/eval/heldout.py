"""Held-out evaluation: every policy on the same unseen route files x SUMO seeds, with spread.

A policy is only compared on traffic it never trained on (DESIGN §10): route files from
``DemandPool.held_out`` (route seeds disjoint from training) and SUMO seeds outside training's.
Each (time window, route file, SUMO seed) episode is run once per policy with one ``EnvConfig``
(metrics on), and the table gives, per policy, mean, std, min and max over those episodes. Every
row names its window (a scenario with ``windows`` is evaluated in each of them), and the table
keeps how each policy decides (``labels``, ``legend``).

A row is a function of (policy, window, route file, SUMO seed, env settings) only, never of the
episodes before it: policies of one scenario share an env, so nothing of the env's own
per-episode draws may apply. The config's ``route_files`` (a training pool, one file drawn per
episode by the env's episode count) are dropped: each episode runs the route file its row names.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tj_rl.control.baselines import Policy, describe_policy, make_policy
from tj_rl.env.config import COST_NAMES, EnvConfig
from tj_rl.env.metrics import Spread, spread
from tj_rl.env.scenario import Scenario
from tj_rl.eval.episodes import policy_scenario
from tj_rl.eval.jobs import EpisodeJob, run_jobs
from tj_rl.eval.row_cache import RowCache
from tj_rl.traffic.demand import DemandSet

__all__ = ["HELDOUT_METRICS", "PEDESTRIAN_METRICS", "HeldOutTable", "evaluate_heldout"]

log = logging.getLogger(__name__)

# The table's columns: traffic metrics from SUMO's outputs, then every named safety cost (summed
# over the episode's steps and lights).
HELDOUT_METRICS: tuple[str, ...] = (
    "avg_delay",
    "avg_trip_time",
    "avg_waiting_time",
    "mean_queue",
    "throughput",
    *(f"cost_{c}" for c in COST_NAMES),
)
# shown after them when some episode had pedestrians: their mean wait (a controller that starves
# a crossing shows here, not in the vehicles' delay)
PEDESTRIAN_METRICS: tuple[str, ...] = ("persons", "avg_ped_waiting")


@dataclass(kw_only=True)
class HeldOutTable:
    """One row per (policy, route file, SUMO seed) episode; ``summary`` spreads them per policy."""

    name: str = "held-out"
    policies: tuple[str, ...] = ()
    rows: list[dict[str, Any]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)  # policy -> how it decides
    windows: tuple[str, ...] = ()  # the time windows evaluated, in words

    def summary(self, metrics: Sequence[str] = HELDOUT_METRICS) -> dict[str, dict[str, Spread]]:
        """``{policy: {metric: Spread(mean, std, min, max, n)}}`` over the policy's episodes."""
        out: dict[str, dict[str, Spread]] = {}
        for pol in self.policies:
            rows = [r for r in self.rows if r["policy"] == pol]
            out[pol] = {m: spread(r.get(m, math.nan) for r in rows) for m in metrics}
        return out

    @property
    def has_pedestrians(self) -> bool:
        return any(r.get("persons", 0) > 0 for r in self.rows)

    def columns(self, metrics: Sequence[str] = HELDOUT_METRICS) -> tuple[str, ...]:
        """``metrics``, then ``PEDESTRIAN_METRICS`` (those not already there) when the traffic
        had pedestrians: the columns a report shows."""
        extra = PEDESTRIAN_METRICS if self.has_pedestrians else ()
        return (*metrics, *(m for m in extra if m not in metrics))

    def to_markdown(self, metrics: Sequence[str] | None = None, digits: int = 2) -> str:
        """Policies as rows, metrics as columns: ``mean ± std [min, max]`` per cell (default:
        ``columns()``)."""
        if metrics is None:
            metrics = self.columns()
        head = ["policy", "episodes", *metrics]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for pol, cols in self.summary(metrics).items():
            n = sum(r["policy"] == pol for r in self.rows)
            cells = [
                f"{s.mean:.{digits}f} ± {s.std:.{digits}f} [{s.min:.{digits}f}, {s.max:.{digits}f}]"
                for s in cols.values()
            ]
            lines.append("| " + " | ".join([pol, str(n), *cells]) + " |")
        return "\n".join(lines)

    def worse_than(self, reference: str = "fixed-time",
                   metric: str = "avg_delay") -> dict[str, tuple[int, int]]:  # fmt: skip
        """Per policy: (episodes with a higher ``metric`` than ``reference`` on the same window,
        route file and SUMO seed, episodes compared). A deployable controller has 0 of them
        against fixed-time: one gridlocked episode is a failure whatever the mean (NaN rows,
        e.g. no vehicle finished, count as worse)."""
        ref = {k: r[metric] for r in self.rows
               if r["policy"] == reference and (k := _episode_key(r)) is not None}  # fmt: skip
        out: dict[str, tuple[int, int]] = {}
        for pol in self.policies:
            if pol == reference:
                continue
            pairs = [(r[metric], ref[k]) for r in self.rows
                     if r["policy"] == pol and (k := _episode_key(r)) is not None and k in ref]  # fmt: skip
            worse = sum(not (v <= base) for v, base in pairs)  # NaN: not better, so worse
            out[pol] = (worse, len(pairs))
        return out

    def legend(self) -> str:
        """Markdown lines under the table: the windows evaluated, how each policy decides and,
        when fixed-time ran, how many episodes each policy lost to it on the same traffic."""
        lines = [f"Time windows: {'; '.join(self.windows)}."] if self.windows else []
        lines += [f"- `{p}`: {self.labels[p]}" for p in self.policies if p in self.labels]
        lost = self.worse_than() if "fixed-time" in self.policies else {}
        if any(n for _, n in lost.values()):  # rows that name their traffic were compared
            losses = ", ".join(f"{p} {w}/{n}" for p, (w, n) in lost.items())
            lines.append(f"Episodes with a higher avg delay than `fixed-time` on the same "
                         f"traffic and SUMO seed: {losses}.")  # fmt: skip
        return "\n".join(lines)


def _episode_key(row: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """The traffic of a row: (window, route file, SUMO seed); None for a row without its seed
    (e.g. a table built by hand), which is not compared."""
    if "seed" not in row:
        return None
    return int(row.get("window_index", 0)), int(row.get("route_index", 0)), int(row["seed"])


def _named(policies: Mapping[str, Policy | str] | Sequence[Policy | str] | str) -> dict[str, Any]:
    if isinstance(policies, Mapping):
        items = [(str(k), v) for k, v in policies.items()]
    else:
        seq = [policies] if isinstance(policies, str) else list(policies)
        items = [(p if isinstance(p, str) else type(p).__name__, p) for p in seq]
    names = [k for k, _ in items]
    if not items or len(set(names)) != len(names):
        raise ValueError(f"evaluate_heldout: need one or more uniquely named policies, got {names}")
    for name, pol in items:
        if isinstance(pol, str):
            make_policy(pol)  # an unknown name fails here, before any SUMO run
        elif not (hasattr(pol, "reset") and hasattr(pol, "compute_actions")):
            raise TypeError(f"evaluate_heldout: policy {name!r} lacks reset / compute_actions")
    return dict(items)


def evaluate_heldout(
    scenario: Scenario,
    policies: Mapping[str, Policy | str] | Sequence[Policy | str] | str,
    route_files: Sequence[str | Path] | DemandSet,
    seeds: Sequence[int],
    *,
    config: EnvConfig | None = None,
    training_seeds: Collection[int] = (),
    name: str | None = None,
    workers: int = 1,
    spawn_after_s: float = 0.0,
    progress: bool = False,
    cache: RowCache | None = None,
) -> HeldOutTable:
    """Run every policy on every time window x route file x SUMO seed of ``scenario``; one row
    each (``window``: its ``[begin, end]``).

    ``policies``: baseline names, objects with the ``Policy`` interface, or a name -> policy
    mapping. A baseline given by name is made afresh for every episode (its result does not
    depend on the order); an object is reset at each episode's start. A policy with its own
    scenario (``scenario_for``: e.g. ``sumo-actuated``'s net) runs in an env built on it; its
    scenario is made before any SUMO run. ``config``: the env settings (e.g. training's); its
    ``route_files`` do not apply, every episode runs its own route file. ``training_seeds``: the
    SUMO seeds used in training; an overlap with ``seeds`` is an error. ``workers`` > 1: the
    episodes of each (window, route file, SUMO seed) run in up to that many spawned processes
    (``tj_rl.eval.jobs``; policy objects must pickle), with the same rows in the same order;
    ``spawn_after_s`` > 0: only when the rest would take longer than that here, judged by the
    first (window, file, seed) (``run_jobs``). ``progress``: a bar over the episodes, with an
    ETA (tj-monitor's; it needs its ``report`` extra, rich). ``cache``: rows kept from earlier
    evaluations are taken from it and new ones put there (``tj_rl.eval.row_cache``: keyed by
    policy, traffic, SUMO seed, env settings and code; a policy without a fingerprint always
    runs); the table is the one a run without it gives."""
    if isinstance(route_files, DemandSet):
        name = route_files.name if name is None else name
        route_files = route_files.files
    files = [Path(p) for p in route_files]
    seeds = [int(s) for s in seeds]
    if not files or not seeds:
        raise ValueError("evaluate_heldout: need one or more route files and SUMO seeds")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"evaluate_heldout: SUMO seeds {seeds}: each at most once (a repeated "
                         "seed is the same episode again)")  # fmt: skip
    clash = sorted(set(seeds) & {int(s) for s in training_seeds})
    if clash:
        raise ValueError(f"evaluate_heldout: SUMO seed(s) {clash} were used in training")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"evaluate_heldout: workers={workers!r}, need an int >= 1")
    named = _named(policies)
    cfg = config if config is not None else EnvConfig()
    if cfg.metrics is False:
        raise ValueError("evaluate_heldout needs EnvConfig(metrics=True or None): SUMO's outputs")
    # the traffic is ``files``, not a pool draw; a gridlocked episode runs to its end (its delay)
    cfg = replace(cfg, metrics=True, route_files=(), gridlock=None)
    made = {k: make_policy(p) if isinstance(p, str) else p for k, p in named.items()}
    own = {k: policy_scenario(p, scenario) for k, p in made.items()}  # nets converted here
    table = HeldOutTable(name=name or "held-out", policies=tuple(named),
                         labels={k: describe_policy(p) for k, p in made.items()},
                         windows=tuple(w.describe_windows() for w in scenario.each_window()))  # fmt: skip
    slots = _slots(scenario, own, named, files, seeds, cfg, cache)
    jobs = _jobs(slots, named, cfg, per_seed=workers > 1)
    if cache is not None:
        log.info("evaluation: %s: %d of %d episode(s) from the row cache (%s)", table.name,
                 len(slots) - sum(j.episodes for j in jobs), len(slots), cache.directory)  # fmt: skip
    bar = f"evaluating: {table.name}" if progress else None
    ran = iter(row for rows in run_jobs(jobs, workers, spawn_after_s=spawn_after_s, progress=bar)
               for row in rows)  # fmt: skip
    for i, slot in enumerate(slots):
        row = slot.row
        if row is None:  # jobs run the missing slots in the slots' order
            row = next(ran)
            assert row["policy"] == slot.policy and row["seed"] == slot.seed
            if cache is not None:
                cache.put(slot.key, _episode_part(row))
        else:  # the keys in a run row's order
            row = {"policy": slot.policy, **slot.meta, "episode": i, **row}
        table.rows.append({**row, "episode": i})
    return table


@dataclass(kw_only=True)
class _Slot:
    """One (window, route file, SUMO seed, policy) episode of a table: its row when the cache
    had it, else None (a job runs it)."""

    meta: dict[str, Any]
    scenarios: dict[str, Scenario]  # every policy's, for the job
    seed: int
    policy: str
    key: str | None
    row: dict[str, Any] | None


def _slots(scenario: Scenario, own: Mapping[str, Scenario], named: Mapping[str, Any],
           files: Sequence[Path], seeds: Sequence[int], cfg: EnvConfig,
           cache: RowCache | None) -> list[_Slot]:  # fmt: skip
    """Every episode of the table in its order (window, route file, SUMO seed, policy), each
    looked up in ``cache`` (the policy's own scenario cut to the window, with the route file)."""
    slots = []
    for w, window in enumerate(scenario.each_window()):
        begin, seconds = window.begin, window.end - window.begin
        for i, path in enumerate(files):
            scs = {k: sc.window(begin, seconds).with_routes(path) for k, sc in own.items()}
            meta = {"routes": path.name, "route_index": i, "window": [begin, window.end],
                    "window_index": w}  # fmt: skip
            for seed in seeds:
                for name, pol in named.items():
                    key = cache.key(pol, scs[name], cfg, seed) if cache is not None else None
                    row = cache.get(key) if cache is not None else None
                    slots.append(_Slot(meta=meta, scenarios=scs, seed=seed, policy=name,
                                       key=key, row=row))  # fmt: skip
    return slots


def _jobs(slots: Sequence[_Slot], named: Mapping[str, Any], cfg: EnvConfig, *,
          per_seed: bool) -> list[EpisodeJob]:  # fmt: skip
    """Jobs for the slots without a row, in the slots' order: serially one per (window, route
    file) and set of missing policies, its envs reused over its seeds; for workers one per
    SUMO seed, so that a few route files still fill the cores."""
    jobs: list[EpisodeJob] = []
    pending: dict[tuple[int, int], dict[int, list[str]]] = {}  # (window, file) -> seed -> names
    for s in slots:
        if s.row is None:
            at = (s.meta["window_index"], s.meta["route_index"])
            pending.setdefault(at, {}).setdefault(s.seed, []).append(s.policy)
    first = {(s.meta["window_index"], s.meta["route_index"]): s for s in slots}
    for at, by_seed in pending.items():
        groups: list[tuple[tuple[str, ...], list[int]]] = []
        for seed, names in by_seed.items():
            if not per_seed and groups and groups[-1][0] == tuple(names):
                groups[-1][1].append(seed)
            else:
                groups.append((tuple(names), [seed]))
        slot = first[at]
        for names, part in groups:
            jobs.append(EpisodeJob(scenarios={k: slot.scenarios[k] for k in names},
                                   policies={k: named[k] for k in names}, config=cfg,
                                   seeds=tuple(part), first=0, meta=slot.meta))  # fmt: skip
    return jobs


def _episode_part(row: Mapping[str, Any]) -> dict[str, Any]:
    """What the cache keeps of a row: the episode's own results, not where the table put it."""
    where = {"policy", "episode", "routes", "route_index", "window", "window_index"}
    return {k: v for k, v in row.items() if k not in where}
