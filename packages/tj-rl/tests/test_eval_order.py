"""Evaluation order: a held-out row depends only on (policy, traffic, SUMO seed, env settings),
never on the episodes that ran before it in the process (issue 27, item 6).

Given the training env config (``route_files``: the demand pool an env draws a file from per
episode, by its episode count), ``evaluate_heldout`` used to run each episode on the pool file of
that count instead of the held-out file its row names: the same baseline on the same held-out
file and SUMO seed gave other numbers after an ``AgentPolicy`` episode. Real SUMO, a tiny agent
with untrained weights, 2-minute episodes."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from tj_rl.control import MaxOccupancyPolicy
from tj_rl.control.agent_policy import AgentPolicy
from tj_rl.env import EnvConfig, Scenario, SumoStartError
from tj_rl.eval.heldout import HELDOUT_METRICS, evaluate_heldout
from tj_rl.eval.jobs import EpisodeJob, run_jobs
from tj_rl.traffic.demand import DemandPool

# what a row says about its episode besides who ran it and when
_OUTCOME = ("routes", "seed", "window", "status", "return", *HELDOUT_METRICS)


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory, default_sc: Scenario):
    """(training config with a 3-file pool, one held-out route file)."""
    pool = DemandPool.for_scenario(default_sc, tmp_path_factory.mktemp("pool"), seeds=(1, 2, 3),
                                   rates=(900,))  # fmt: skip
    held, _heavy = pool.held_out((10,))
    config = EnvConfig(route_files=tuple(str(f) for f in pool.build()))
    return config, held.files[0]


def _outcome(row: dict) -> dict:
    return {k: row[k] for k in _OUTCOME}


def test_a_baseline_gives_the_same_row_before_and_after_an_agent_episode(
    traffic, default_agent: Path, default_sc: Scenario
) -> None:
    config, held = traffic
    policies = {"before": "max-pressure", "agent": AgentPolicy(default_agent), "after": "max-pressure"}
    table = evaluate_heldout(default_sc, policies, [held], seeds=[7], config=config)
    rows = {r["policy"]: r for r in table.rows}
    assert [r["policy"] for r in table.rows] == ["before", "agent", "after"]  # one env, in order
    assert _outcome(rows["before"]) == _outcome(rows["after"])
    # and each is the episode its row names: the held-out file, whatever the config's pool
    alone = evaluate_heldout(default_sc, ["max-pressure"], [held], seeds=[7],
                             config=replace(config, route_files=()))  # fmt: skip
    assert _outcome(rows["after"]) == _outcome(alone.rows[0])
    assert rows["after"]["routes"] == held.name and rows["after"]["throughput"] > 0


def test_workers_give_the_rows_a_serial_run_gives(
    traffic, default_agent: Path, default_sc: Scenario, caplog: pytest.LogCaptureFixture
) -> None:
    """``workers=2``: the same rows, in the same order, episode indices included; the agent and a
    policy object travel pickled to spawned processes and are rebuilt there."""
    config, held = traffic
    sc = default_sc.replace(end=90.0)
    policies = {"mp": "max-pressure", "agent": AgentPolicy(default_agent), "mo": MaxOccupancyPolicy()}
    serial = evaluate_heldout(sc, policies, [held], seeds=[7, 8], config=config)
    parallel = evaluate_heldout(sc, policies, [held], seeds=[7, 8], config=config, workers=2,
                                progress=True)
    assert [r["policy"] for r in parallel.rows] == ["mp", "agent", "mo"] * 2
    assert parallel.rows == serial.rows
    assert parallel.labels == serial.labels
    assert "cannot be sent" not in caplog.text  # they ran in the workers
    with pytest.raises(ValueError, match="workers=0"):
        evaluate_heldout(sc, policies, [held], seeds=[7], workers=0)


def test_a_failure_in_a_worker_reaches_the_caller(tmp_path: Path, default_sc: Scenario) -> None:
    bad = tmp_path / "bad.rou.xml"
    bad.write_text('<routes><vehicle id="v0" depart="0"><route edges="no_such_edge"/></vehicle>'
                   "</routes>")  # fmt: skip
    with pytest.raises(SumoStartError, match="no_such_edge"):
        evaluate_heldout(default_sc.replace(end=60.0), ["max-pressure"], [bad], seeds=[1, 2],
                         workers=2)  # fmt: skip


_STOPPED_SCRIPT = """
import sys
from tj_rl.env import Scenario
from tj_rl.eval.heldout import evaluate_heldout
sc = Scenario(net_file=sys.argv[1], route_files=(sys.argv[2],), end=3600.0)
evaluate_heldout(sc, ["fixed-time"], [sys.argv[2]], seeds=range(1, 41), workers=2)  # minutes
"""


def test_ctrl_c_stops_the_workers(traffic, default_sc: Scenario, tmp_path: Path) -> None:
    """Ctrl-C in the caller: it stops, and no worker process (nor its SUMO) is left behind."""
    _config, held = traffic
    script = tmp_path / "run.py"
    script.write_text(_STOPPED_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), str(default_sc.net_file), str(held)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    parent = psutil.Process(proc.pid)
    workers: list[psutil.Process] = []
    for _ in range(600):  # the workers are spawned once the jobs are made (up to 60 s)
        workers = parent.children(recursive=True)
        if len(workers) >= 2 or proc.poll() is not None:
            break
        time.sleep(0.1)
    assert len(workers) >= 2, proc.communicate()
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    _gone, alive = psutil.wait_procs(workers, timeout=30)
    assert not alive, alive


class _Unpicklable:
    """A policy holding a lambda: it cannot travel to a worker process."""

    def __init__(self) -> None:
        self.base, self.hook = MaxOccupancyPolicy(), lambda: None

    def reset(self, env) -> None:
        self.base.reset(env)

    def compute_actions(self, obs, infos):
        return self.base.compute_actions(obs, infos)


def test_a_policy_that_cannot_travel_runs_here(
    traffic, default_sc: Scenario, caplog: pytest.LogCaptureFixture
) -> None:
    _config, held = traffic
    sc = default_sc.replace(end=60.0)
    table = evaluate_heldout(sc, {"mo": _Unpicklable()}, [held], seeds=[1, 2], workers=2)
    assert len(table.rows) == 2 and "cannot be sent to worker processes" in caplog.text


def test_workers_start_only_when_the_rest_is_worth_it(
    traffic, default_sc: Scenario, caplog: pytest.LogCaptureFixture
) -> None:
    """``spawn_after_s``: the first job runs here and times the rest (an injected clock): short
    work stays here, long work goes to the workers; the rows are the same either way."""
    _config, held = traffic
    sc = default_sc.replace(end=60.0)

    def clock(first_job_s: float):
        ticks = iter([0.0, first_job_s])
        return lambda: next(ticks)

    def jobs() -> list[EpisodeJob]:
        scs = {"mp": sc.with_routes(held)}
        return [EpisodeJob(scenarios=scs, policies={"mp": "max-pressure"}, config=EnvConfig(metrics=True),
                           seeds=(s,), first=k, meta={"routes": held.name})
                for k, s in enumerate((1, 2, 3))]  # fmt: skip

    caplog.set_level(logging.INFO, logger="tj_rl.eval.jobs")
    here = run_jobs(jobs(), 2, spawn_after_s=60.0, clock=clock(10.0))  # 2 x 10 s: stay
    assert "worker processes" not in caplog.text
    there = run_jobs(jobs(), 2, spawn_after_s=60.0, clock=clock(40.0))  # 2 x 40 s: go
    assert "2 more job(s), ~80 s here: 2 worker processes" in caplog.text
    assert here == there and [r[0]["seed"] for r in here] == [1, 2, 3]
    with pytest.raises(ValueError, match="spawn_after_s"):
        run_jobs(jobs(), 2, spawn_after_s=-1.0)
