"""Phase 1 end to end with real parts: SUMO recording, tj-data stores, 2 gloo DDP ranks, tj-monitor.

Marked slow (about a minute each on a 2-core machine); they run in CI with everything else.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tj_data import GraphStore
from tj_hybrid import load_config, read_phase1_summary
from tj_hybrid.rl_setup import scenario_widths

pytestmark = pytest.mark.slow


def test_phase1_runs_end_to_end(
    small_args: list[str], small_data: Path, tmp_path: Path, run: Any
) -> None:
    run_app = run
    out = run_app(*small_args, "--set", "run.name=e2e")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "phase 1 done: held-out position error" in out.stdout
    pdir = tmp_path / "runs" / "e2e" / "phase1"
    # the data: two real stores with the snapshot schema and disjoint episodes
    train, hold = (
        GraphStore.open(small_data / "train", verify=True),
        GraphStore.open(small_data / "holdout"),
    )
    assert len(train.episode_ends) == 3 and len(hold.episode_ends) == 1
    assert set(train.manifest.metadata["seeds"]).isdisjoint(hold.manifest.metadata["seeds"])
    # every artefact of the phase in its folder
    for name in ("report.md", "eval.json", "summary.json", "memory.csv", "memory.png", "loss.png"):
        assert (pdir / name).is_file(), name
    assert sorted(p.name for p in (pdir / "checkpoints").glob("*.pt")) == [
        "ckpt-000000030.pt",
        "ckpt-000000040.pt",
    ]  # keep_checkpoints=2 of 10, 20, 30, 40
    assert (pdir / "agent" / "model.safetensors").is_file()
    # the agent embeds every lane row of the scenario's widest light, whether or not the
    # recording's traffic used them all (else phase 2's baselines see more rows than the policy)
    gnn = json.loads((pdir / "agent" / "config.json").read_text())["config"]["gnn"]
    cfg = load_config(profile="smoke").config
    assert gnn["num_movements"] == scenario_widths(cfg)[1] == 20
    summary = json.loads((pdir / "summary.json").read_text())
    ev = summary["eval"]
    assert ev["vehicles"] > 100 and 0 < ev["cv_mae"] < 50 and 0 < ev["model_mae"] < 50
    assert 0.0 <= summary["data_wait_fraction"] < 1.0 and summary["windows_per_s"] > 0
    assert summary["peak_tree_pss"] > 200 * 2**20  # ranks + torch: a real process tree
    assert summary["peak_tree_pss"] < summary["budget_bytes"]
    typed = read_phase1_summary(tmp_path / "runs" / "e2e")  # the results API reads the same
    assert typed.eval.model_mae == ev["model_mae"] and typed.wall_s["train"] > 0
    # metrics: JSONL (rank 0 only) and TensorBoard
    rows = [json.loads(line) for line in (pdir / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [5, 10, 15, 20, 25, 30, 35, 40]
    assert {"train/loss", "train/state_loss", "lr", "horizon", "time/data_wait_fraction"} <= set(
        rows[-1]
    )
    assert rows[-1]["horizon"] == 2 and rows[0]["horizon"] == 1  # the progressive schedule
    events = next((pdir / "logs").glob("events.out.tfevents.*"))
    acc = EventAccumulator(str(events))
    acc.Reload()
    assert len(acc.Scalars("train/loss")) == len(rows)
    report = (pdir / "report.md").read_text()
    assert "constant velocity" in report and "peak process-tree PSS" in report
    # the run's config is saved and reusable
    assert "phase1:" in (tmp_path / "runs" / "e2e" / "config.yaml").read_text()
    # the dataset is reused, and refused when the recording settings change
    again = run_app(*small_args, "--set", "run.name=e2e-2", "--set", "phase1.steps=1")
    assert again.returncode == 0 and "using the dataset" in again.stderr
    changed = run_app(*small_args, "--set", "run.name=e2e-3", "--set", "phase1.record.episode_seconds=200")
    assert changed.returncode == 2 and "made with other settings" in changed.stderr
    # an existing run is not overwritten without --resume
    twice = run_app(*small_args, "--set", "run.name=e2e")
    assert twice.returncode == 2 and "already has checkpoints" in twice.stderr


def test_phase1_world_model_beats_constant_velocity(
    small_args: list[str], tmp_path: Path, run: Any
) -> None:
    """Learned, not merely finite: on the held-out episode the world model's next-step position
    error is clearly below constant-velocity extrapolation (on this small dataset, recorded on
    the default scenario's own demand varied, deterministic on CPU: 120 steps are too few, 2.3%
    better; 200 steps: 24.7%)."""
    out = run(*small_args, "--set", "run.name=learns", "--set", "phase1.steps=200")
    assert out.returncode == 0, out.stdout + out.stderr
    ev = json.loads((tmp_path / "runs" / "learns" / "phase1" / "eval.json").read_text())["eval"]
    assert ev["model_mae"] < 0.95 * ev["cv_mae"], ev
    assert ev["improvement"] > 0.05


def _params(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "phase1" / "agent" / "model.safetensors"))


def test_sigkill_then_resume_matches_an_uninterrupted_run(
    small_args: list[str], tmp_path: Path, run: Any, app: Path
) -> None:
    run_app = run
    whole = run_app(*small_args, "--set", "run.name=whole")
    assert whole.returncode == 0, whole.stdout + whole.stderr

    # the same run, killed (whole process group: parent, ranks, loader workers) after step 20's
    # checkpoint is complete and before the end
    cmd = [sys.executable, str(app), *small_args, "--set", "run.name=killed"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    marker = tmp_path / "runs" / "killed" / "phase1" / "checkpoints" / "ckpt-000000020.pt.done"
    deadline = time.monotonic() + 400
    while not marker.exists():
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline, "no checkpoint at step 20"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "runs" / "killed" / "phase1" / "agent").exists()  # it did not finish

    resumed = run_app(*small_args, "--set", "run.name=killed", "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resumed phase 1 from" in resumed.stderr
    a, b = _params(tmp_path / "runs" / "whole"), _params(tmp_path / "runs" / "killed")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name  # bit for bit
    # the resumed run appended to the same metrics log: every step once or twice, up to 40
    rows = (tmp_path / "runs" / "killed" / "phase1" / "logs" / "metrics.jsonl").read_text()
    assert '"step": 40' in rows


def _export_seed_json(stores: list[Path], dst: Path) -> int:
    """Write stores as the seeds' layout: phase1/chunks/chunk_NNN.json + metadata.json."""
    chunks = dst / "phase1" / "chunks"
    chunks.mkdir(parents=True)
    (dst / "metadata.json").write_text(json.dumps({"source": "test export"}))
    records, episodes = [], 0
    for path in stores:
        store = GraphStore.open(path)
        starts = [0, *store.episode_ends[:-1].tolist()]
        for start, end in zip(starts, store.episode_ends.tolist(), strict=True):
            for i in range(start, end):
                s = store[i]
                nodes = [
                    {
                        "features": s["x"][j].tolist(),
                        "vehicle_id": int(s["vehicle_id"][j]),
                        "movement": int(s["movement"][j]),
                        "y_next": s["y_next"][j].tolist(),
                        "y_mask": bool(s["y_mask"][j]),
                        "risk": float(s["risk"][j]),
                    }
                    for j in range(len(s["x"]))
                ]
                edges = [
                    {"source": int(a), "target": int(b), "features": f.tolist()}
                    for a, b, f in zip(*s["edge_index"], s["edge_attr"], strict=True)
                ]
                scalars = {
                    k: s[k].item()
                    for k in ("intersection", "sim_time", "time_in_phase", "phase", "phase_count")
                }
                records.append({"nodes": nodes, "edges": edges, **scalars, "episode": episodes})
            episodes += 1
    for k in range(0, len(records), 100):
        (chunks / f"chunk_{k // 100:03d}.json").write_text(json.dumps(records[k : k + 100]))
    return episodes


def test_phase1_from_seed_json_chunks(small_data: Path, tmp_path: Path, run: Any) -> None:
    src = tmp_path / "seed-json"
    n = _export_seed_json([small_data / "train", small_data / "holdout"], src)
    data = tmp_path / "imported"
    out = run(
        "--phase",
        "1",
        "--profile",
        "smoke",
        "--set",
        f"phase1.data.json_source={src}",
        "--set",
        f"phase1.data.path={data}",
        "--set",
        f"run.root={tmp_path / 'runs'}",
        "--set",
        "phase1.steps=4",
        "--set",
        "phase1.eval_batches=2",
        "--set",
        "phase1.data.holdout_fraction=0.25",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    train, hold = GraphStore.open(data / "train"), GraphStore.open(data / "holdout")
    assert len(train.episode_ends) + len(hold.episode_ends) == n == 4
    assert len(hold.episode_ends) == 1
    assert len(train) + len(hold) == sum(
        len(GraphStore.open(small_data / p)) for p in ("train", "holdout")
    )
    # a record without a snapshot field is refused with the file, record and field
    bad = json.loads((src / "phase1" / "chunks" / "chunk_000.json").read_text())
    del bad[3]["nodes"][0]["y_next"]
    (src / "phase1" / "chunks" / "chunk_000.json").write_text(json.dumps(bad))
    out = run(
        "--phase",
        "1",
        "--profile",
        "smoke",
        "--set",
        f"phase1.data.json_source={src}",
        "--set",
        f"phase1.data.path={tmp_path / 'bad'}",
        "--set",
        f"run.root={tmp_path / 'runs'}",
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "data error:" in out.stderr and "chunk_000.json record 3 field 'y_next'" in out.stderr
