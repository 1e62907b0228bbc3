"""The row cache: an evaluation with it gives the table a run without it gives, runs only the
episodes it does not hold, and keys a row by everything that decides it (policy, traffic, SUMO
seed, env settings, code) and nothing else; a damaged or half-written row is a miss. Real SUMO,
90-second episodes, a tiny agent with untrained weights."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tj_rl.control import MaxOccupancyPolicy, RandomPolicy, make_policy
from tj_rl.control.agent_policy import AgentPolicy
from tj_rl.env import EnvConfig, Scenario
from tj_rl.eval import RowCache, evaluate_heldout, policy_fingerprint
from tj_rl.traffic.demand import DemandPool


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory, default_sc: Scenario) -> Path:
    """One held-out route file of the default scenario."""
    pool = DemandPool.for_scenario(default_sc, tmp_path_factory.mktemp("pool"), seeds=(1,),
                                   rates=(900,))  # fmt: skip
    normal, _heavy = pool.held_out((10,))
    return normal.files[0]


@pytest.fixture()
def short(default_sc: Scenario) -> Scenario:
    return default_sc.replace(end=90.0)


def _rows(cache: RowCache) -> list[Path]:
    return sorted(cache.directory.rglob("*.json"))


def test_a_cached_table_is_the_table_a_run_gives(
    short: Scenario, held: Path, default_agent: Path, tmp_path: Path
) -> None:
    policies = {"mp": "max-pressure", "agent": AgentPolicy(default_agent),
                "mo": MaxOccupancyPolicy(margin=1.0), "dz": "dz-protected"}  # fmt: skip
    plain = evaluate_heldout(short, policies, [held], seeds=[7, 8])
    cache = RowCache(tmp_path / "rows")
    first = evaluate_heldout(short, policies, [held], seeds=[7, 8], cache=cache)
    assert (cache.hits, cache.misses) == (0, 8) and len(_rows(cache)) == 8
    again = RowCache(tmp_path / "rows")
    second = evaluate_heldout(short, policies, [held], seeds=[7, 8], cache=again)
    assert (again.hits, again.misses) == (8, 0)  # nothing ran
    assert first.rows == plain.rows and second.rows == plain.rows  # order and indices included
    assert [list(r) for r in second.rows] == [list(r) for r in plain.rows]  # and the keys' order
    assert [r["episode"] for r in second.rows] == list(range(8))


def test_workers_fill_the_gaps_of_a_partly_cached_table(
    short: Scenario, held: Path, default_agent: Path, tmp_path: Path
) -> None:
    """Only some policies' rows are kept: the others run (in 2 spawned workers here) and the
    table is the serial one, row for row."""
    policies = {"mp": "max-pressure", "agent": AgentPolicy(default_agent), "mo": MaxOccupancyPolicy()}
    serial = evaluate_heldout(short, policies, [held], seeds=[7, 8])
    cache = RowCache(tmp_path / "rows")
    evaluate_heldout(short, {"mp": "max-pressure"}, [held], seeds=[8], cache=cache)
    cache = RowCache(tmp_path / "rows")
    parallel = evaluate_heldout(short, policies, [held], seeds=[7, 8], cache=cache, workers=2)
    assert (cache.hits, cache.misses) == (1, 5)
    assert parallel.rows == serial.rows


def test_a_damaged_row_is_run_again(short: Scenario, held: Path, tmp_path: Path) -> None:
    cache = RowCache(tmp_path / "rows")
    ref = evaluate_heldout(short, ["max-pressure"], [held], seeds=[7], cache=cache)
    (path,) = _rows(cache)
    path.write_text(path.read_text()[:40])  # a torn write
    cache = RowCache(tmp_path / "rows")
    again = evaluate_heldout(short, ["max-pressure"], [held], seeds=[7], cache=cache)
    assert (cache.hits, cache.misses) == (0, 1)
    assert again.rows == ref.rows
    assert json.loads(path.read_text())["row"]["avg_delay"] == ref.rows[0]["avg_delay"]


def test_a_policy_without_a_fingerprint_always_runs(
    short: Scenario, held: Path, default_agent: Path, tmp_path: Path
) -> None:
    cache = RowCache(tmp_path / "rows")
    policies = {"random": RandomPolicy(seed=3), "sampling": AgentPolicy(default_agent, sample=True)}
    for _ in range(2):
        evaluate_heldout(short, policies, [held], seeds=[7], cache=cache)
    assert cache.misses == 0 and cache.hits == 0 and _rows(cache) == []


def test_the_key_follows_what_decides_a_row(
    short: Scenario, held: Path, default_agent: Path, tmp_path: Path
) -> None:
    cache = RowCache(tmp_path / "rows")
    config = EnvConfig(metrics=True)
    scenario = short.with_routes(held)

    def key(policy="max-pressure", sc=scenario, cfg=config, seed=7):
        return cache.key(policy, sc, cfg, seed)

    base = key()
    assert base is not None and key() == base
    # nothing a row depends on: the cost weights (rows keep the named costs), temp files, names
    assert key(cfg=replace(config, cost_weights={"dilemma_zone": 3.0})) == base
    assert key(cfg=replace(config, temp_dir=str(tmp_path))) == base
    assert key(sc=scenario.replace(name="renamed")) == base
    # the same bytes elsewhere are the same traffic
    copy = shutil.copy(held, tmp_path / "copy.rou.xml")
    assert key(sc=short.with_routes(copy)) == base
    # what does change a row
    assert key(seed=8) != base
    assert key(cfg=replace(config, min_green=5.0)) != base
    assert key(sc=short.replace(end=80.0).with_routes(held)) != base
    assert key("max-occupancy") != base
    Path(copy).write_text(Path(copy).read_text().replace('depart="1', 'depart="2', 1))
    assert key(sc=short.with_routes(copy)) != base
    # policy objects: their options; an agent: its files
    assert key(make_policy("greedy", margin=1.0)) != key(make_policy("greedy", margin=2.0))
    assert key(make_policy("dz-protected", max_extensions=2)) != key(make_policy("dz-protected"))
    assert policy_fingerprint(AgentPolicy(default_agent)) == policy_fingerprint(AgentPolicy(default_agent))
    assert key(AgentPolicy(default_agent, shield_threshold=0.5)) != key(AgentPolicy(default_agent))
    edited = shutil.copytree(default_agent, tmp_path / "agent")
    before = policy_fingerprint(AgentPolicy(edited))
    weights = next(p for p in sorted(Path(edited).rglob("*")) if p.is_file())
    weights.write_bytes(weights.read_bytes() + b" ")
    assert policy_fingerprint(AgentPolicy(edited)) != before
    # never cached: draws that carry over between episodes, a reward given as code
    assert key(RandomPolicy()) is None and key(AgentPolicy(default_agent, sample=True)) is None
    assert key(cfg=replace(config, reward=lambda: None)) is None
    assert key("random") is not None  # by name: made afresh, seeded, for every episode


def test_a_writer_killed_mid_row_leaves_a_miss_that_runs_again(
    short: Scenario, held: Path, tmp_path: Path
) -> None:
    """A process that dies while writing a row leaves its temp file, never a half row under the
    key: the episode runs again, and writing its row sweeps the dead writer's temp."""
    cache = RowCache(tmp_path / "rows")
    key = cache.key("max-pressure", short.with_routes(held), EnvConfig(metrics=True), 7)
    path = cache.directory / key[:2] / f"{key}.json"
    path.parent.mkdir(parents=True)
    code = ("import os\nfrom tj_monitor import atomic_open\n"
            f"with atomic_open({str(path)!r}) as f:\n"
            "    f.write(b'{\"key\": \"' + b'x' * 64)\n    f.flush()\n    os._exit(9)\n")  # fmt: skip
    died = subprocess.run([sys.executable, "-c", code], check=False)
    assert died.returncode == 9
    assert not path.exists() and len(list(path.parent.glob(".tmp-*"))) == 1
    table = evaluate_heldout(short, ["max-pressure"], [held], seeds=[7], cache=cache)
    assert (cache.hits, cache.misses) == (0, 1)
    assert json.loads(path.read_text())["row"]["avg_delay"] == table.rows[0]["avg_delay"]
    assert list(path.parent.glob(".tmp-*")) == []
