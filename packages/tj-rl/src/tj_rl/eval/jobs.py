"""Held-out episodes as jobs, run here or in worker processes (``evaluate_heldout(workers=)``).

Why: an evaluation is many independent whole episodes (policies x windows x route files x SUMO
seeds), each one SUMO run on one core; run one after another they leave the other cores idle (a
real city's table took over 30 min on 2 cores). A job is one (window, route file) and some SUMO
seeds, every policy on each: the envs it builds serve all its episodes, as in a serial run.

Workers are spawned, never forked (libsumo and torch hold threads and state a fork would copy),
ignore Ctrl-C (the parent stops: the pool is terminated when anything raises there, a Ctrl-C
included) and run torch on one thread. A job carries its policies pickled and each worker
rebuilds them, so its rows are the rows a serial run gives (a row is a function of the policy,
window, route file, SUMO seed and settings only; tested), except for a policy that draws at
random across episodes (``AgentPolicy(sample=True)``): its draws restart in every job. The
standard library's ``multiprocessing.Pool`` is enough here: jobs are independent, few (tens)
and long, and results come back in submission order; Ray is the trainer's engine, not tj-rl's.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import pickle
import signal
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tj_monitor import progress_bar
from tj_rl.control.baselines import make_policy
from tj_rl.env.config import EnvConfig
from tj_rl.env.core import TrafficSignalCore
from tj_rl.env.scenario import Scenario
from tj_rl.eval.episodes import run_episode

__all__ = ["EpisodeJob", "run_job", "run_jobs"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class EpisodeJob:
    """Every policy on one (window, route file) for ``seeds``. ``scenarios``: each policy's
    scenario (window and routes applied); ``policies``: name -> baseline name or policy object;
    ``first``: the table's episode index of the job's first row; ``meta``: what every row of the
    job carries (route file, window and their indices)."""

    scenarios: Mapping[str, Scenario]
    policies: Mapping[str, Any]
    config: EnvConfig
    seeds: tuple[int, ...]
    first: int
    meta: Mapping[str, Any]

    def __post_init__(self) -> None:
        if set(self.scenarios) != set(self.policies):
            raise ValueError("EpisodeJob: one scenario per policy")
        if not self.seeds:
            raise ValueError("EpisodeJob: no SUMO seeds")

    @property
    def episodes(self) -> int:
        return len(self.seeds) * len(self.policies)


def run_job(job: EpisodeJob) -> list[dict[str, Any]]:
    """The job's rows: for each seed, each policy (a name is made afresh for every episode, an
    object is reset by ``run_episode``), on an env per distinct policy scenario."""
    envs: dict[Scenario, TrafficSignalCore] = {}
    rows: list[dict[str, Any]] = []
    try:
        for sc in job.scenarios.values():
            if sc not in envs:
                envs[sc] = TrafficSignalCore(job.config, scenario=sc)
        for seed in job.seeds:
            for name, pol in job.policies.items():
                policy = make_policy(pol) if isinstance(pol, str) else pol
                row = run_episode(envs[job.scenarios[name]], policy, job.first + len(rows), seed)
                rows.append({"policy": name, **job.meta, **row})
    finally:
        for env in envs.values():
            env.close()
    return rows


def _init_worker(filters: list[Any]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    warnings.filters[:] = filters  # the caller's (a trainer silences library deprecations)


def _run_in_worker(job: EpisodeJob) -> list[dict[str, Any]]:
    torch = sys.modules.get("torch")  # loaded by a policy (AgentPolicy) when the job unpickled
    if torch is not None:
        torch.set_num_threads(1)  # one small forward per decision; the other cores run jobs
    return run_job(job)


def _travels(policies: Mapping[str, Any]) -> bool:
    try:
        pickle.dumps(policies)
    except Exception as exc:  # whatever stops a policy from travelling
        log.warning("evaluation: a policy cannot be sent to worker processes (%s: %s); "
                    "running the episodes here", type(exc).__name__, exc)  # fmt: skip
        return False
    return True


def run_jobs(
    jobs: Sequence[EpisodeJob],
    workers: int = 1,
    *,
    spawn_after_s: float = 0.0,
    clock: Callable[[], float] = time.perf_counter,
    progress: str | None = None,
) -> list[list[dict[str, Any]]]:
    """Each job's rows, in the order of ``jobs``: here when ``workers`` is 1 (or there is one
    job, or a policy does not pickle: said in a warning), else in up to ``workers`` spawned
    processes. ``spawn_after_s`` > 0: the first job runs here, and the rest go to workers only
    when, at its pace (``clock``), they would take longer than that here: a worker takes seconds
    to start (python, torch and the agent), more than a few short episodes are worth.
    ``progress``: a bar of that name over the episodes (tj-monitor's, with an ETA); None: none."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"run_jobs: workers={workers!r}, need an int >= 1")
    if not (spawn_after_s >= 0.0 and math.isfinite(spawn_after_s)):
        raise ValueError(f"run_jobs: spawn_after_s={spawn_after_s!r}, need a finite value >= 0")
    parallel = workers > 1 and len(jobs) > 1 and _travels(jobs[0].policies)
    done: list[list[dict[str, Any]]] = []
    total = sum(job.episodes for job in jobs)
    with progress_bar(transient=True, disable=progress is None) as bar:
        task = bar.add_task(progress or "", total=total, info="")

        def here(job: EpisodeJob) -> None:
            done.append(run_job(job))
            bar.advance(task, job.episodes)

        if not parallel:
            for job in jobs:
                here(job)
            return done
        if spawn_after_s > 0.0:
            t0 = clock()
            here(jobs[0])
            rest = (clock() - t0) * (len(jobs) - 1)
            if rest <= spawn_after_s or len(jobs) == 2:
                for job in jobs[1:]:
                    here(job)
                return done
            log.info("evaluation: %d more job(s), ~%.0f s here: %d worker processes",
                     len(jobs) - 1, rest, min(workers, len(jobs) - 1))  # fmt: skip
        todo = jobs[len(done) :]
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(min(workers, len(todo)), initializer=_init_worker,
                      initargs=(list(warnings.filters),)) as pool:  # fmt: skip
            for job, rows in zip(todo, pool.imap(_run_in_worker, todo), strict=True):
                done.append(rows)  # leaving the block (or an error) terminates the pool
                bar.advance(task, job.episodes)
    return done
