"""``--phase all`` end to end with real parts, tiny: phase 1 on the small dataset; RLlib PPO (2
iterations) in a Ray session the phase starts and stops, its agent evaluated without Ray against
the baselines on held-out traffic; phase 3 (PPO-Lagrangian, 2 gloo ranks, real collector processes
and SUMO) from phase 2's agent; the final report; and a resumed run that repeats no finished phase.

Learning quality is a benchmark (docs/BENCHMARKS.md), not asserted here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import pytest

pytestmark = pytest.mark.slow
# phase2.eval.baselines' default: ours, and those users deploy
BASELINES = ("fixed-time", "max-pressure", "greedy", "max-occupancy", "advanced-mp",
             "scenario-program", "sumo-actuated", "dz-protected")  # fmt: skip


def _ray_processes(run_dir: Path) -> list[str]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if ("raylet" in cmd or "gcs_server" in cmd or "ray::" in cmd) and str(run_dir) in cmd:
            found.append(cmd[:120])
    return found


def _stray(run_root: Path) -> list[str]:
    """Processes of this run left behind: Ray's, collectors, ranks, SUMO started from it."""
    found = []
    for p in psutil.process_iter(["cmdline", "name"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if str(run_root) in cmd or "tj-collector" in (p.info["name"] or ""):
            found.append(cmd[:120])
    return found


@pytest.mark.timeout(1800)  # three phases, then a resume: a loaded CI host is slow
def test_phase_all_then_resume_repeats_nothing(
    small_args: list[str], tiny_phase2: list[str], tiny_phase3: list[str], tmp_path: Path,
    run: Any,
) -> None:  # fmt: skip
    args = [*small_args, "--set", "run.name=p2", "--set", "phase1.steps=10",
            "--set", "phase1.eval_batches=2", *tiny_phase2, *tiny_phase3]  # fmt: skip
    out = run(*args, "--phase", "all", timeout=1200)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "phase 1 done" in out.stdout and "phase 2 done: held-out avg delay" in out.stdout
    assert "phase 3 done: held-out avg delay" in out.stdout
    assert "phase 3: exported " in out.stderr  # which candidate validation chose, and why
    pdir = tmp_path / "runs" / "p2" / "phase2"
    assert sorted(p.name for p in (pdir / "checkpoints").iterdir()) == ["iter-00001", "iter-00002"]
    rows = [json.loads(x) for x in (pdir / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and "train/total_loss" in rows[-1]
    # PPO started from the teacher's clone with the fading KL term; every checkpoint validated
    assert rows[0]["train/imitation_coeff"] > 0 and "validation/avg_delay" in rows[-1]
    chosen = json.loads((pdir / "validation" / "validation.json").read_text())
    # iteration 0 is the clone: a checkpoint is exported only when it beats its start
    assert [i for i, _ in chosen["history"]] == [0, 1, 2] and chosen["best"][0] in (0, 1, 2)
    evaluation = json.loads((pdir / "eval.json").read_text())
    for label in ("held_out", "held_out_heavy"):
        assert set(evaluation[label]["summary"]) == {"phase2", "clone", *BASELINES}
        # trained on [0, 300) s of the scenario's own demand, varied: held out in the next window
        assert all(r["window"] == [300.0, 600.0] for r in evaluation[label]["rows"])
    report = (pdir / "report.md").read_text()
    assert "Held-out traffic" in report and "| phase2 |" in report and "| clone |" in report
    assert "- teacher: `" in report and "best at iteration" in report
    assert "- held-out: phase2 " in report and "- ~30% heavier: clone " in report  # the verdict
    assert "| sumo-actuated |" in report and "| scenario-program |" in report
    assert "- `sumo-actuated`: SUMO's gap-based actuated control" in report  # how it was built
    assert "Time windows: [300, 600) s (00:05:00-00:10:00)." in report
    assert "Traffic: the scenario's own demand; seed 101" in report  # what it was
    result = json.loads((pdir / "result.json").read_text())
    assert result["agent"] == str(pdir / "agent")
    assert not _ray_processes(tmp_path / "runs"), "Ray processes left behind"

    # the exported agent is a tj-models agent, loadable without Ray, frozen GNN = phase 1's
    from safetensors.torch import load_file

    p1 = load_file(str(tmp_path / "runs" / "p2" / "phase1" / "agent" / "model.safetensors"))
    p2 = load_file(str(pdir / "agent" / "model.safetensors"))
    encoder = [k for k in p1 if k.startswith("world_model.encoder.")]
    assert encoder and all((p1[k] == p2[k]).all() for k in encoder)
    assert any(not (p1[k] == p2[k]).all() for k in p1 if k.startswith("controller."))

    _check_phase3(tmp_path / "runs" / "p2", p2)
    assert not _stray(tmp_path / "runs"), "processes left behind"
    _check_eval_checkpoints(tmp_path, args, run)

    again = run(*args, "--phase", "all", "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "phase 1 (world-model pretraining) already finished" in again.stderr
    assert "phase 2 (safe RL with Ray RLlib PPO in SUMO) already finished" in again.stderr
    assert "phase 3 (constrained optimisation" in again.stderr and "already finished" in again.stderr


def _check_eval_checkpoints(tmp_path: Path, args: list[str], run: Any) -> None:
    """``eval --checkpoints`` on the run: the clone and both kept checkpoints on validation and
    held-out traffic, the exported one marked, validation's scores those phase 2 chose by; then
    on the phase-3 folder, its candidates with the (delay, cost) phase 3 chose by."""
    pdir = tmp_path / "runs" / "p2" / "phase2"
    out = run("eval", "--checkpoints", str(pdir.parent), *args,
              "--set", f"run.root={tmp_path / 'evals'}")  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    (folder,) = (tmp_path / "evals").iterdir()
    assert folder.name.startswith("checkpoints-default-")
    assert {p.name for p in folder.iterdir()} == {"report.md", "checkpoints.json", "eval.json",
                                                  "checkpoints.png", "agents"}  # fmt: skip
    kept = json.loads((folder / "checkpoints.json").read_text())
    rows = {r["name"]: r for r in kept["rows"]}
    assert list(rows) == ["clone", "iter-00001", "iter-00002"]
    chosen = json.loads((pdir / "validation" / "validation.json").read_text())
    assert [r["iteration"] for r in rows.values() if r["exported"]] == [chosen["best"][0]]
    # the same validation episodes phase 2 chose by, the same scores
    for iteration, delay in chosen["history"]:
        (row,) = [r for r in rows.values() if r["iteration"] == iteration]
        assert row["validation"] == pytest.approx(delay, rel=1e-6)
    assert all(r["delay"]["held_out"] > 0 and r["best"]["held_out"] in BASELINES
               for r in rows.values())  # fmt: skip
    assert "(exported)" in out.stdout and "- exported (validation's pick): " in out.stdout
    report = (folder / "report.md").read_text().replace("**", "")
    assert all(f"| {name} " in report for name in rows) and "(exported) | " in report
    # phase 3's folder: phase 2's policy and every candidate, behind the guard as phase 3 chose
    p3 = tmp_path / "runs" / "p2" / "phase3"
    out = run("eval", "--checkpoints", str(p3), *args, "--set", f"run.root={tmp_path / 'evals3'}")
    assert out.returncode == 0, out.stdout + out.stderr
    (folder,) = (tmp_path / "evals3").iterdir()
    kept = json.loads((folder / "checkpoints.json").read_text())
    rows = {r["name"]: r for r in kept["rows"]}
    assert kept["phase"] == "phase3"
    assert list(rows) == ["phase2", "iter-00001", "iter-00002", "iter-00003"]
    selection = json.loads((p3 / "candidates" / "selection.json").read_text())
    assert [r["iteration"] for r in rows.values() if r["exported"]] == [selection["chosen"]]
    scores = json.loads((p3 / "candidates" / "scores.json").read_text())["scores"]
    for row in rows.values():  # the (delay, cost) phase 3 chose by
        _, delay, cost = scores[str(row["iteration"])]
        assert (row["validation"], row["validation_cost"]) == pytest.approx((delay, cost))
        assert row["cost"]["held_out"] >= 0
    assert "dilemma-zone guard" in (folder / "report.md").read_text()


def _check_phase3(run_dir: Path, p2: dict[str, Any]) -> None:
    """Phase 3's artefacts: 3 iterations logged with lambda and the limit set from the frontier,
    checkpoints, the candidates scored on validation and the chosen one exported, a last policy
    whose GNN is phase 2's and whose controller moved, the held-out table with both trained
    policies and the baselines, the trade-off against the baselines' frontier, and the run's final
    report."""
    from safetensors.torch import load_file

    pdir = run_dir / "phase3"
    rows = [json.loads(x) for x in (pdir / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["lambda"] >= 0 and "loss/shield" in r for r in rows)
    # cost_limit: auto, set before training from the baselines' frontier on validation traffic
    # (it may be 0: a baseline with no cost near phase 2's delay); every iteration trains under it
    limit = json.loads((pdir / "limit.json").read_text())
    assert limit["rule"] in ("frontier", "cap", "fallback") and limit["value"] >= 0
    assert set(limit["points"]) == {"phase2", *BASELINES}
    assert all(r["cost_limit"] == limit["value"] for r in rows)
    assert all(r["queue/bytes_peak"] <= r["queue/bytes_bound"] for r in rows)
    assert [p.name for p in (pdir / "checkpoints").glob("ckpt-*.pt")]
    # a candidate per checkpoint, each scored on validation; the exported agent is the chosen one
    selection = json.loads((pdir / "candidates" / "selection.json").read_text())
    assert set(selection["scores"]) == {"0", "1", "2", "3"}  # 0: phase 2's policy
    assert selection["cost_limit"] == limit["value"]
    # every candidate acts behind the default dilemma-zone guard, phase 2's policy too: scored
    # behind it, not taken from limit.json (phase 2 alone; reuse: test_phase3_select.py)
    kept = json.loads((pdir / "candidates" / "scores.json").read_text())
    assert kept["how"]["guard"] == {"rule": "occupied", "max_extensions": 2}
    assert set(kept["scores"]) == {"0", "1", "2", "3"}
    assert "acting: learned shield off; dilemma-zone guard: a green it would end is extended" in (
        pdir / "report.md").read_text()
    chosen = pdir / "candidates" / f"iter-{selection['chosen']:05d}" / "model.safetensors"
    exported = load_file(str(chosen)) if selection["chosen"] else p2
    last = load_file(str(pdir / "candidates" / "iter-00003" / "model.safetensors"))
    p3 = load_file(str(pdir / "agent" / "model.safetensors"))
    assert p3.keys() == exported.keys() and all((p3[k] == exported[k]).all() for k in p3)
    gnn = [k for k in p2 if k.startswith("world_model.encoder.")]
    assert gnn and all((p2[k] == p3[k]).all() for k in gnn)
    # training moved the controller and the shield (the last iteration's policy)
    assert any(not (p2[k] == last[k]).all() for k in p2 if k.startswith("controller."))
    assert any(not (p2[k] == last[k]).all() for k in p2 if k.startswith("shield."))
    evaluation = json.loads((pdir / "eval.json").read_text())
    for label in ("held_out", "held_out_heavy"):
        assert set(evaluation[label]["summary"]) == {"phase3", "phase2", *BASELINES}
        assert all("cost" in m for m in evaluation[label]["summary"].values())
    for png in ("constraint.png", "learning.png", "heldout.png", "tradeoff.png", "memory.png"):
        assert (pdir / png).stat().st_size > 0, png
    assert "frontier of the baselines" in (pdir / "report.md").read_text()
    assert "validation (avg delay, episode cost) per candidate" in (pdir / "report.md").read_text()
    report = (run_dir / "report.md").read_text()
    assert "| phase3 |" in report and "| phase2 |" in report and "| fixed-time |" in report
    assert "## The trained policy against the best baseline" in report
    assert "- held-out: phase3 " in report and "- ~30% heavier: phase3 " in report
    assert (run_dir / "memory.png").stat().st_size > 0
    result = json.loads((pdir / "result.json").read_text())
    assert result["metrics"]["wall_s"] > 0 and 0 <= result["metrics"]["data_wait_fraction"] <= 1
    # the results API reads the same files back, typed
    from tj_hybrid import read_evaluation, read_metrics, read_result

    assert [r["step"] for r in read_metrics(run_dir, "3")] == [1, 2, 3]
    assert read_result(run_dir, "3").metrics["iterations"] == 3
    held_out = read_evaluation(run_dir, "3").held_out
    assert held_out.means("cost") == {p: m["cost"]["mean"]
                                      for p, m in evaluation["held_out"]["summary"].items()}  # fmt: skip
