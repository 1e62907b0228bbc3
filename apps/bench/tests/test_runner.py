"""The runner contains failures: a failing, unavailable or misconfigured suite is recorded and the
others still run; results are saved after every suite, so a killed run keeps a valid file."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tj_bench import Results, RunConfig, Suite, SuiteContext, Unavailable, parse_sets, run_suites


def _measures(ctx: SuiteContext) -> None:
    ctx.param("size", ctx.option("size", 3))
    for rep in ctx.repetitions():
        ctx.record("t", 1.0 + rep, unit="s", better="lower")
    ctx.unavailable("cuda", "no CUDA device")
    ctx.shared["seen"] = ctx.shared_dir


def _fails(ctx: SuiteContext) -> None:
    ctx.record("partial", 1.0, unit="s")
    raise RuntimeError("boom in the middle")


def _unavailable(ctx: SuiteContext) -> None:
    raise Unavailable("needs a sumo-rl environment")


SUITES = {
    "data": Suite(name="data", summary="measures", run=_measures, options={"size": "n"}),
    "loader": Suite(name="loader", summary="fails", run=_fails),
    "env": Suite(name="env", summary="unavailable", run=_unavailable),
}


def test_each_outcome_is_recorded_and_the_run_goes_on(tmp_path: Path) -> None:
    seen: list[str] = []
    config = RunConfig(suites=("loader", "env", "data"), runs=2, out_dir=tmp_path,
                       options={"data": {"size": "7"}}, isolate=False)  # fmt: skip
    res = run_suites(config, loader=SUITES.__getitem__, on_suite=lambda r: seen.append(r.suite))
    assert seen == ["loader", "env", "data"]
    data, loader, env = res.suite("data"), res.suite("loader"), res.suite("env")
    assert data.status == "ok" and data.figure("t").values == [1.0, 2.0]
    assert data.params == {"size": 7, "quick": False} and data.unavailable == {"cuda": "no CUDA device"}
    assert loader.status == "failed" and "RuntimeError: boom in the middle" in loader.error
    assert env.status == "unavailable" and env.error == "needs a sumo-rl environment"
    assert Results.load(tmp_path / "results.json").to_json() == res.to_json()
    assert res.machine["cpus"] >= 1 and "torch" in res.versions


def test_an_unknown_option_fails_that_suite_only(tmp_path: Path) -> None:
    config = RunConfig(suites=("data",), runs=1, out_dir=tmp_path, options={"data": {"sise": "1"}},
                       isolate=False)  # fmt: skip
    res = run_suites(config, loader=SUITES.__getitem__)
    assert res.suite("data").status == "failed"
    assert "--set data.sise" in res.suite("data").error and "size" in res.suite("data").error


def test_a_badly_typed_option_names_itself(tmp_path: Path) -> None:
    config = RunConfig(suites=("data",), runs=1, out_dir=tmp_path, options={"data": {"size": "big"}},
                       isolate=False)  # fmt: skip
    assert "--set data.size=big" in run_suites(config, loader=SUITES.__getitem__).suite("data").error


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown suite"):
        RunConfig(suites=("nope",))
    with pytest.raises(ValueError, match="runs"):
        RunConfig(runs=0)
    with pytest.raises(ValueError, match="twice"):
        RunConfig(suites=("data", "data"))
    with pytest.raises(ValueError, match=r"SUITE\.OPTION=VALUE"):
        parse_sets(["data=1"], ["data"])
    with pytest.raises(ValueError, match="not selected"):
        parse_sets(["env.runs=1"], ["data"])
    assert parse_sets(["data.size_gb=2", "data.x=a=b"], ["data"]) == {"data": {"size_gb": "2", "x": "a=b"}}


def test_a_run_killed_mid_way_keeps_the_suites_it_finished(tmp_path: Path) -> None:
    """Without isolation a suite that kills itself kills the run: what came before is kept."""
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from tj_bench import RunConfig, Suite, run_suites

        def ok(ctx):
            ctx.record("t", 1.0, unit="s", better="lower")

        def die(ctx):
            ctx.record("t", 2.0, unit="s")
            os.kill(os.getpid(), signal.SIGKILL)

        suites = {{"data": Suite(name="data", summary="", run=ok),
                   "loader": Suite(name="loader", summary="", run=die)}}
        run_suites(RunConfig(suites=("data", "loader"), runs=1, out_dir=Path({str(tmp_path)!r}),
                             isolate=False), loader=suites.__getitem__)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr
    res = Results.load(tmp_path / "results.json")
    assert [s.suite for s in res.suites] == ["data"]
    assert json.loads((tmp_path / "results.json").read_text())["suites"][0]["figures"][0]["values"] == [1.0]


def test_context_refuses_inconsistent_records_and_stray_artifacts(tmp_path: Path) -> None:
    ctx = SuiteContext(suite="data", quick=True, runs=1, workdir=tmp_path, out_dir=tmp_path / "out")
    ctx.record("t", 1.0, unit="s", better="lower")
    with pytest.raises(ValueError, match="first with s/lower"):
        ctx.record("t", 1.0, unit="ms", better="lower")
    with pytest.raises(ValueError, match="not under"):
        ctx.artifact(tmp_path / "x.png")
    (tmp_path / "out").mkdir()
    ctx.artifact(tmp_path / "out" / "x.png")
    assert ctx.result.artifacts == ["x.png"]


ISOLATED = """
import os, signal, sys
from tj_bench import Suite

def _first(ctx):
    ctx.shared["handed"] = str(ctx.shared_dir)
    ctx.record("modules", len(sys.modules), unit="modules")
    sys.modules["tj_bench_test_marker"] = sys  # would leak into the next suite without isolation

def _dies(ctx):
    os.kill(os.getpid(), signal.SIGKILL)

def _last(ctx):
    assert ctx.shared["handed"] == str(ctx.shared_dir), ctx.shared
    ctx.record("leaked", float("tj_bench_test_marker" in sys.modules), unit="bool")
    ctx.record("same_process", float(os.getpid() == int(ctx.option("parent", "0"))), unit="bool")

SUITES = {"data": Suite(name="data", summary="", run=_first),
          "loader": Suite(name="loader", summary="", run=_dies),
          "env": Suite(name="env", summary="", run=_last, options={"parent": "pid"})}

def load(name):
    return SUITES[name]
"""


def test_isolated_suites_run_in_fresh_processes_and_survive_a_killed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib
    import os

    (tmp_path / "bench_isolated_suites.py").write_text(ISOLATED)
    monkeypatch.syspath_prepend(str(tmp_path))  # spawned children inherit sys.path
    module = importlib.import_module("bench_isolated_suites")
    config = RunConfig(suites=("data", "loader", "env"), runs=1, out_dir=tmp_path / "out",
                       options={"env": {"parent": str(os.getpid())}})  # fmt: skip
    res = run_suites(config, loader=module.load)
    assert res.suite("data").status == "ok"
    killed = res.suite("loader")
    assert killed.status == "failed" and "killed by SIGKILL" in killed.error
    last = res.suite("env")
    assert last.status == "ok", last.error
    assert last.figure("leaked").values == [0.0] and last.figure("same_process").values == [0.0]
