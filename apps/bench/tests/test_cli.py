"""The command line: `apps/bench --quick` runs every suite and writes valid results (the CI check;
no timing is asserted), and bad usage is refused with exit status 2 before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

from tj_bench import SCHEMA, Figure, SuiteResult
from tj_bench.suites import NAMES


def test_quick_run_of_the_collected_suites_writes_valid_results(quick) -> None:
    res = quick.results
    assert res.quick and res.runs == 1
    for s in res.suites:
        quick.suite(s.suite)  # every suite ran (its error in the message otherwise)
        assert s.figures, f"suite {s.suite} recorded no figure"
    assert quick.returncode == 0, quick.output[-3000:]
    raw = json.loads((quick.out / "results.json").read_text())
    assert raw["schema"] == SCHEMA and raw["machine"]["cpus"] >= 1
    assert {"tj-bench", "tj-data", "torch"} <= set(raw["versions"])
    md = (quick.out / "results.md").read_text()
    assert all(f"### {s.suite}" in md for s in res.suites)
    for s in res.suites:
        for artifact in s.artifacts:
            assert (quick.out / artifact).is_file(), f"{s.suite}: {artifact} missing"


def test_every_suite_is_registered_and_loads() -> None:
    from tj_bench.suites import load_suite

    for name in NAMES:
        suite = load_suite(name)
        assert suite.name == name and suite.summary


def test_bad_usage_exits_2_before_running(tmp_path: Path, bench) -> None:
    for args in (["nope"], ["data", "--set", "env.x=1"], ["data", "--set", "bad"],
                 ["data", "--runs", "0"], ["data", "--compare", str(tmp_path / "missing.json")]):  # fmt: skip
        proc = bench(*args, "--out", str(tmp_path / "o"), timeout=120)
        assert proc.returncode == 2, (args, proc.stderr)
        assert not (tmp_path / "o" / "results.json").exists()


def test_report_and_compare_commands(tmp_path: Path, make_results, bench) -> None:
    suite = SuiteResult(suite="data", figures=[Figure(name="f", unit="x", better="higher", values=[2])])
    res = make_results(suite).save(tmp_path / "r.json")
    template = tmp_path / "t.md"
    template.write_text("value {{value:data/f}}\n")
    out = tmp_path / "B.md"
    proc = bench("report", str(res), "--template", str(template), "--output", str(out), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().endswith("value 2.00\n")
    template.write_text("{{value:data/f}} {{value:data@again/f}}\n")
    proc = bench("report", str(res), f"again={res}", "--template", str(template), timeout=120)
    assert proc.returncode == 0 and proc.stdout.endswith("2.00 2.00\n\n"), proc.stderr
    template.write_text("{{value:data/g}}")
    proc = bench("report", str(res), "--template", str(template), timeout=120)
    assert proc.returncode == 2 and "no figure 'g'" in proc.stderr
    proc = bench("report", f"bad label={res}", "--template", str(template), timeout=120)
    assert proc.returncode == 2 and "LABEL=RESULTS.json" in proc.stderr
    assert bench("compare", str(res), str(res), timeout=120).returncode == 0
