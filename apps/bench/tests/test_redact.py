"""``apps/bench redact``: a results file loses this machine's paths (settings, options, notes)
and keeps its figures; a bad rule or a file that is not a results file writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tj_bench import Figure, Results, SuiteResult
from tj_bench.redact import parse_rule, redact_file


def _results(make_results, scratch: str, home: str) -> Results:
    suite = SuiteResult(suite="phase2", figures=[Figure(name="graph/heldout_delay", unit="s",
                                                        better="lower", values=[9.5, float("nan")])],
                        params={"root": f"{scratch}/runs", "python": f"{home}/env/bin/python"},
                        notes=[f"runs kept in {scratch}/runs/graph-s0"])  # fmt: skip
    res = make_results(suite)
    res.options = {"phase2.root": f"{scratch}/runs"}
    return res


def test_paths_are_replaced_and_figures_kept(make_results, tmp_path: Path) -> None:
    src = _results(make_results, "/scratch/me", "/home/me").save(tmp_path / "r.json")
    out = redact_file(src, [parse_rule("/scratch/me/runs/=RUNS")], home="/home/me",
                      output=tmp_path / "clean.json")  # fmt: skip
    text = out.read_text()
    assert "/scratch/me" not in text and "/home/me" not in text
    clean = Results.load(out)
    suite = clean.suite("phase2")
    assert suite.params == {"root": "RUNS", "python": "~/env/bin/python"}
    assert suite.notes == ["runs kept in RUNS/graph-s0"]
    assert clean.options == {"phase2.root": "RUNS"}
    fig = suite.figure("graph/heldout_delay")
    assert fig.values[0] == 9.5 and fig.measured == [9.5]
    assert Results.load(src).suite("phase2").params["root"] == "/scratch/me/runs"  # src untouched


def test_bad_rules_and_files_write_nothing(make_results, tmp_path: Path, bench) -> None:
    for bad in ("RUNS", "=RUNS"):
        with pytest.raises(ValueError, match="PATH=STAND_IN"):
            parse_rule(bad)
    src = _results(make_results, "/scratch/me", "/home/me").save(tmp_path / "r.json")
    before = src.read_text()
    proc = bench("redact", str(src), "--path", "nope", timeout=120)
    assert proc.returncode == 2 and "PATH=STAND_IN" in proc.stderr
    notjson = tmp_path / "x.json"
    notjson.write_text(json.dumps({"schema": "other"}))
    proc = bench("redact", str(notjson), timeout=120)
    assert proc.returncode == 2 and "not a tj-bench/1 results file" in proc.stderr
    proc = bench("redact", str(src), "--path", "/scratch/me=SCRATCH", "--keep-home", timeout=120)
    assert proc.returncode == 0, proc.stderr
    after = Results.load(src).suite("phase2").params
    assert after == {"root": "SCRATCH/runs", "python": "/home/me/env/bin/python"}
    assert src.read_text() != before
