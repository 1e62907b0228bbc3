"""The results API reads back, typed, what the phases' own writers leave in a run directory, and
names the file and what is wrong when one is missing or malformed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tj_hybrid import (
    PhaseResult,
    ResultsError,
    phase_dir,
    read_evaluation,
    read_metrics,
    read_phase1_summary,
    read_result,
)
from tj_hybrid.evaluation import held_out_set, save_evaluation
from tj_monitor import LoggerConfig, MetricsLogger, atomic_write_json
from tj_rl.eval import HELDOUT_METRICS, HeldOutTable

POLICIES = ("phase2", "fixed-time")


def _table(delay: float) -> HeldOutTable:
    """Two policies, two episodes each; phase 2 ``delay`` s, fixed-time 10 s slower."""
    rows = [{"policy": p, "route_file": f"r{i}.rou.xml", "sumo_seed": 9,
             **dict.fromkeys(HELDOUT_METRICS, 1.0), "avg_delay": delay + 10 * k + i}
            for k, p in enumerate(POLICIES) for i in range(2)]  # fmt: skip
    return HeldOutTable(policies=POLICIES, rows=rows)


def test_a_phase_result_and_its_evaluation_read_back(tmp_path: Path) -> None:
    pdir = phase_dir(tmp_path, "2").create()
    written = PhaseResult(name="2", agent=pdir.agent, report=pdir.report, headline="ok",
                          metrics={"avg_delay": {"phase2": 9.5}, "wall_s": 3.0})  # fmt: skip
    written.save(pdir.result)
    assert pdir.finished and read_result(tmp_path, "2") == written
    save_evaluation(pdir.eval, {"held_out": held_out_set(_table(9.0), HELDOUT_METRICS),
                                "held_out_heavy": held_out_set(_table(12.0), HELDOUT_METRICS)})  # fmt: skip
    evaluation = read_evaluation(tmp_path, "2")
    delay = evaluation.held_out.summary["phase2"]["avg_delay"]
    assert (delay.mean, delay.min, delay.max, delay.n) == (9.5, 9.0, 10.0, 2)
    assert evaluation.held_out_heavy.means("avg_delay") == {"phase2": 12.5, "fixed-time": 22.5}
    assert len(evaluation.held_out.rows) == 4 and evaluation.held_out.rows[0]["sumo_seed"] == 9


def test_the_metrics_log_reads_back_without_a_torn_last_line(tmp_path: Path) -> None:
    pdir = phase_dir(tmp_path, "3").create()
    assert read_metrics(tmp_path, "3") == []  # nothing logged yet
    with MetricsLogger(pdir.logs, LoggerConfig(console_every=0, tensorboard=False)) as log:
        log.log(1, {"lambda": 0.5, "episode_cost_mean": float("nan")})
        log.log(2, {"lambda": 0.75})
    with pdir.metrics.open("a") as f:
        f.write('{"step": 3, "lamb')  # a run killed mid-write
    rows = read_metrics(tmp_path, "3")
    assert [(r["step"], r["lambda"]) for r in rows] == [(1, 0.5), (2, 0.75)]
    assert math.isnan(rows[0]["episode_cost_mean"])


def test_phase1_summary_reads_back_typed(tmp_path: Path) -> None:
    errors = {"vehicles": 120, "model_mae": 1.5, "model_rmse": 2.0, "cv_mae": 2.5,
              "cv_rmse": 3.0, "improvement": 0.4}  # fmt: skip
    summary = {"eval": errors, "data_wait_fraction": 0.05, "windows_per_s": 80.0, "steps": 40,
               "wall_s": {"data": 5.0, "train": 40.0, "total": 47.0}, "peak_tree_pss": None,
               "budget_bytes": 2**30}  # fmt: skip
    pdir = phase_dir(tmp_path, "1").create()
    atomic_write_json(pdir.summary, summary)
    got = read_phase1_summary(tmp_path)
    assert got.eval.improvement == 0.4 and got.wall_s["train"] == 40.0 and got.steps == 40
    assert got.peak_tree_pss is None and got.budget_bytes == 2**30
    del summary["eval"]["cv_mae"]
    atomic_write_json(pdir.summary, summary)
    with pytest.raises(ResultsError, match=r"summary\.json: not Phase1Summary.*cv_mae"):
        read_phase1_summary(tmp_path)


def test_missing_and_malformed_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match=r"phase3/result\.json: missing: the phase did not finish"):
        read_result(tmp_path, "3")
    with pytest.raises(ResultsError, match=r"phase3/eval\.json: cannot read"):
        read_evaluation(tmp_path, "3")
    pdir = phase_dir(tmp_path, "3").create()
    pdir.result.write_text(json.dumps({"name": "3"}))
    with pytest.raises(ResultsError, match=r"phase3/result\.json: not a phase result"):
        read_result(tmp_path, "3")
    pdir.eval.write_text('{"held_out": {"summ')
    with pytest.raises(ResultsError, match=r"phase3/eval\.json: not JSON"):
        read_evaluation(tmp_path, "3")
    pdir.eval.write_text(json.dumps({"held_out": {"summary": {}, "rows": []}}))
    with pytest.raises(ResultsError, match=r"phase3/eval\.json: not Evaluation.*held_out_heavy"):
        read_evaluation(tmp_path, "3")
    with pytest.raises(ValueError, match="no phase '4'; phases: 1, 2, 3"):
        phase_dir(tmp_path, "4")


def test_the_phase_reports_means_are_the_results_apis(tmp_path: Path) -> None:
    from tj_hybrid import HeldOutSet
    from tj_hybrid.evaluation import means

    held = held_out_set(_table(9.0), HELDOUT_METRICS)  # the in-process form a phase reports from
    assert means(held["summary"], "avg_delay") == {"phase2": 9.5, "fixed-time": 19.5}
    typed = HeldOutSet.from_summary(held["summary"])
    assert typed.means("avg_delay") == means(held["summary"], "avg_delay")
    assert typed.summary["fixed-time"]["avg_delay"].n == 2 and typed.rows == []
    assert means(held["summary"], "no_such_metric") == {}
