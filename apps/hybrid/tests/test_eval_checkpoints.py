"""``tj-hybrid eval --checkpoints``: the table of every kept policy (pure, on hand-made episode
rows: the best baseline, the paired standard error, the costs, validation's pick, hindsight and
the rank correlation), what a phase-2 or phase-3 folder holds, and the command's refusals (one
line, exit 2, nothing written). The command on a real run's phase-2 and phase-3 folders is
exercised in ``test_phase_all_e2e.py``, which trains one."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tj_hybrid.commands.checkpoint_table import (
    Candidate,
    candidate_rows,
    paired_se,
    plot_candidates,
    summary_lines,
    to_markdown,
)
from tj_hybrid.commands.evaluate_checkpoints import kept_policies
from tj_hybrid.config import ConfigError

APP = Path(__file__).resolve().parents[1]


def _rows(policy: str, delays: list[float], cost: float = 1.0) -> list[dict[str, object]]:
    return [{"policy": policy, "window_index": 0, "route_index": i, "seed": 9, "avg_delay": d,
             "cost": cost + i} for i, d in enumerate(delays)]  # fmt: skip


BASE = [10.0, 12.0, 8.0, 10.0]  # the best baseline's episodes (mean 10)
EVALUATION = {
    "held_out": {"rows": [
        *_rows("max-pressure", [12.0, 13.0, 11.0, 12.0]),
        *_rows("dz-protected", BASE),
        *_rows("clone", [9.5, 11.5, 7.5, 9.5]),  # 0.5 below in every episode: -5%, se 0
        *_rows("iter-00005", [9.0, 11.0, 8.0, 10.0]),  # -0.5 s on average: -5% with a spread
        *_rows("iter-00010", [9.8, 11.8, 7.8, 9.8]),  # -2%
    ]},
    "held_out_heavy": {"rows": [
        *_rows("max-pressure", [14.0, 14.0]), *_rows("dz-protected", [15.0, 15.0]),
        *_rows("clone", [14.0, 14.7]), *_rows("iter-00005", [13.3, 13.3]),
        *_rows("iter-00010", [14.7, 14.7]),
    ]},
}
VALIDATION = {"clone": (6.5, 2.0), "iter-00005": (6.4, 3.0), "iter-00010": (6.6, 4.0)}
CANDIDATES = [Candidate(name="clone", iteration=0),
              Candidate(name="iter-00005", iteration=5, exported=True),
              Candidate(name="iter-00010", iteration=10)]  # fmt: skip


def test_paired_se_is_the_spread_of_the_per_episode_differences() -> None:
    rows = EVALUATION["held_out"]["rows"]
    assert paired_se(rows, "clone", "dz-protected") == 0.0  # the same 0.5 s in every episode
    diffs = [-1.0, -1.0, 0.0, 0.0]
    sd = math.sqrt(sum((d + 0.5) ** 2 for d in diffs) / 3)
    assert paired_se(rows, "iter-00005", "dz-protected") == pytest.approx(sd / 2 / 10.0)
    assert math.isnan(paired_se(rows[:1] + _rows("x", [1.0]), "x", "max-pressure"))  # one pair


def test_every_candidate_is_against_the_best_baseline_not_against_another_candidate() -> None:
    rows = candidate_rows(CANDIDATES, VALIDATION,
                          EVALUATION)  # fmt: skip
    assert [r.candidate.name for r in rows] == ["clone", "iter-00005", "iter-00010"]
    for r in rows:  # the clone (a trained row) is never the best "baseline"
        assert r.best == {"held_out": "dz-protected", "held_out_heavy": "max-pressure"}
        assert r.best_delay["held_out"] == 10.0
    clone, five, ten = rows
    assert clone.change["held_out"] == pytest.approx(-0.05) and clone.se["held_out"] == 0.0
    assert five.change["held_out"] == pytest.approx(-0.05) and ten.change["held_out"] == pytest.approx(-0.02)
    assert five.change["held_out_heavy"] == pytest.approx(13.3 / 14 - 1)
    assert ten.worst["held_out"] == 11.8 and five.validation == 6.4
    assert five.validation_cost == 3.0 and five.cost == {"held_out": 2.5, "held_out_heavy": 1.5}
    table = to_markdown(rows)
    assert "| **iter-00005** (exported) | 5 | 6.40 | 3.00 | 9.50 | -5.0% +- " in table
    assert "| clone | 0 | 6.50 | 2.00 | 9.50 | -5.0% +- 0.0% | 11.50 | 2.50 | 14.35 |" in table


def test_the_lines_say_validations_pick_hindsight_and_how_well_validation_ranks() -> None:
    rows = candidate_rows(CANDIDATES, VALIDATION,
                          EVALUATION)  # fmt: skip
    lines = summary_lines(rows)
    assert lines[0].startswith("- exported (validation's pick): iter-00005 (iteration 5): 9.50 s")
    # the lowest held-out delay: clone and iter-00005 tie at 9.50; the first of them
    assert lines[1].startswith("- lowest held-out delay, in hindsight: clone (iteration 0)")
    assert "For reading only" in lines[1]
    (r_line,) = [line for line in lines if "Pearson's r" in line]
    x, y = [6.5, 6.4, 6.6], [9.5, 9.5, 9.8]
    mx, my = sum(x) / 3, sum(y) / 3
    r = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True)) / math.sqrt(
        sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y))
    assert f"Pearson's r = {r:.2f}" in r_line
    assert any("standard error of 0.0% to " in line for line in lines)


def test_without_validation_scores_there_is_no_correlation_and_the_plot_still_draws(
    tmp_path: Path,
) -> None:
    rows = candidate_rows(CANDIDATES, {}, EVALUATION)
    assert all(math.isnan(r.validation) for r in rows)
    assert not [line for line in summary_lines(rows) if "Pearson" in line]
    assert "| clone | 0 | n/a | n/a |" in to_markdown(rows)
    png = plot_candidates(rows, tmp_path / "checkpoints.png")
    assert png is not None and png.stat().st_size > 0
    assert plot_candidates(candidate_rows([Candidate(name="x", iteration=None)], {}, EVALUATION),
                           tmp_path / "none.png") is None  # fmt: skip
    assert plot_candidates(rows, tmp_path / "p3.png", phase="phase3") is not None
    with pytest.raises(ValueError, match="phase must be one of"):
        plot_candidates(rows, tmp_path / "bad.png", phase="phase4")


def test_a_candidate_cannot_have_a_negative_iteration() -> None:
    with pytest.raises(ValueError, match="iteration must be >= 0"):
        Candidate(name="x", iteration=-1)


def _folder(tmp_path: Path, *parts: str) -> Path:
    """A run folder with the given files (empty, or ``{}``-JSON for .json)."""
    run = tmp_path / "run"
    for part in parts:
        path = run / part
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"best": [5, 6.4], "history": []}) if "validation" in part
                        else "{}")  # fmt: skip
    return run


def test_kept_policies_reads_a_run_or_its_phase2_folder(tmp_path: Path) -> None:
    run = _folder(tmp_path, "phase2/checkpoints/iter-00005/x", "phase2/checkpoints/iter-00010/x",
                  "phase2/checkpoints/.iter-00015.tmp/x", "phase2/imitation/clone/config.json",
                  "phase2/agent/config.json", "phase2/validation/validation.json")  # fmt: skip
    for given in (run, run / "phase2"):
        kept = kept_policies(given)
        assert kept.phase == "phase2" and kept.folder == run / "phase2"
        assert sorted(kept.checkpoints) == [5, 10]  # no .tmp
        assert kept.agents == {"clone": (0, run / "phase2/imitation/clone")} and kept.chosen == 5
        assert kept.base == kept.exported == run / "phase2/agent"


def test_kept_policies_reads_phase_3s_candidates_with_phase_2s_policy_first(tmp_path: Path) -> None:
    run = _folder(tmp_path, "phase3/candidates/iter-00002/config.json",
                  "phase3/candidates/iter-00001/config.json", "phase3/candidates/iter-00003/x",
                  "phase3/agent/config.json", "phase2/agent/config.json")  # fmt: skip
    (run / "phase3/candidates/selection.json").write_text(json.dumps({"chosen": 2}))
    kept = kept_policies(run / "phase3")
    assert kept.phase == "phase3" and kept.checkpoints == {} and kept.chosen == 2
    # iteration 3 has no exported agent (a half-written candidate): left out
    assert kept.agents == {"phase2": (0, run / "phase2/agent"),
                           "iter-00001": (1, run / "phase3/candidates/iter-00001"),
                           "iter-00002": (2, run / "phase3/candidates/iter-00002")}  # fmt: skip
    assert next(iter(kept.agents)) == "phase2" and kept.base == run / "phase3/agent"


def test_checkpoints_of_an_unfinished_phase_2_export_onto_phase_1s_agent(tmp_path: Path) -> None:
    run = _folder(tmp_path, "phase2/checkpoints/iter-00005/x", "phase1/agent/config.json")
    kept = kept_policies(run)
    assert kept.base == run / "phase1/agent" and kept.exported is None and kept.chosen is None


@pytest.mark.parametrize(("parts", "expected"), [
    ((), "no such directory"),
    (("phase2/report.md",), "no kept checkpoint"),
    (("phase2/checkpoints/iter-00005/x",), "neither its agent/ nor"),
    (("phase3/candidates/selection.json",), "no phase-3 candidate"),
])  # fmt: skip
def test_a_folder_with_nothing_to_compare_is_refused(tmp_path: Path, parts: tuple[str, ...],
                                                    expected: str) -> None:  # fmt: skip
    run = _folder(tmp_path, *parts) if parts else tmp_path / "nope"
    phase3 = any(p.startswith("phase3") for p in parts)
    with pytest.raises(ConfigError, match=expected):
        kept_policies(run / "phase3" if phase3 else run)


@pytest.mark.parametrize("given", ["both", "empty"])
def test_the_command_refuses_in_one_line_and_writes_nothing(tmp_path: Path, given: str) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    args = {"both": ["--checkpoints", str(empty), "--agent", str(empty)],
            "empty": ["--checkpoints", str(empty)]}[given]  # fmt: skip
    runs = tmp_path / "runs"
    out = subprocess.run([sys.executable, str(APP), "eval", *args, "--profile", "smoke",
                          "--set", f"run.root={runs}", "--set", f"run.data_root={tmp_path / 'd'}"],
                         capture_output=True, text=True, timeout=300, env=dict(os.environ),
                         check=False)  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().count("\n") == 0 and out.stderr.startswith("tj-hybrid: eval: ")
    assert ("not both" if given == "both" else "no kept checkpoint") in out.stderr
    assert not runs.exists() and not (tmp_path / "d").exists()
