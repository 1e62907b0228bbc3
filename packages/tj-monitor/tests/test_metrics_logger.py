"""MetricsLogger: JSONL and TensorBoard read back; rank-0-only under a real gloo process group."""

from __future__ import annotations

import io
import json
import math
import multiprocessing as mp
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tj_monitor import MSE, LoggerConfig, MetricsLogger


def _scalars(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    ea = EventAccumulator(str(run_dir))
    ea.Reload()
    return [(e.step, e.value) for e in ea.Scalars(tag)]


def test_jsonl_tensorboard_and_console(tmp_path: Path) -> None:
    import torch

    out = io.StringIO()
    with MetricsLogger(tmp_path, LoggerConfig(console_every=2), console=out) as log:
        for step in range(5):
            log.log(
                step,
                {"train/loss": 1.0 / (step + 1)},
                lr=np.float32(1e-3),
                grad=torch.tensor(0.5),
                phase="pretrain",
                **{"time/data_wait_fraction": 0.25},
            )
        log.log(5, loss=float("nan"))
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4, 5]
    assert records[2]["train/loss"] == pytest.approx(1 / 3) and records[2]["phase"] == "pretrain"
    assert records[0]["lr"] == pytest.approx(1e-3) and records[0]["grad"] == 0.5
    assert all(isinstance(r["time"], float) for r in records) and math.isnan(records[5]["loss"])
    assert _scalars(tmp_path, "train/loss") == [(s, pytest.approx(1.0 / (s + 1))) for s in range(5)]
    assert _scalars(tmp_path, "lr")[0][1] == pytest.approx(1e-3)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # steps 0, 2, 4
    assert lines[1].startswith("step 2 | train/loss 0.3333 | lr 0.001")
    assert "time/data_wait_fraction 25.0%" in lines[1]


def test_appends_on_resume_and_rejects_bad_input(tmp_path: Path) -> None:
    cfg = LoggerConfig(console_every=0, tensorboard=False)
    with MetricsLogger(tmp_path, cfg) as log:
        log.log(1, loss=1.0)
    with MetricsLogger(tmp_path, cfg) as log:
        log.log(2, loss=0.5)
        with pytest.raises(ValueError, match="reserved"):
            log.log(3, step=1)
        with pytest.raises(ValueError, match="reserved"):
            log.log(3, {"time": 1.0})
        with pytest.raises(TypeError, match="'v'"):
            log.log(3, v=np.zeros(3))
        with pytest.raises(TypeError, match="'obj'"):
            log.log(3, obj=object())
        with pytest.raises(ValueError, match="step"):
            log.log(-1, loss=1.0)
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2
    with pytest.raises(RuntimeError, match="closed"):
        log.log(4, loss=0.1)
    with pytest.raises(ValueError, match="jsonl_name"):
        LoggerConfig(jsonl_name="a/b.jsonl")


def _rank_main(rank: int, run_dir: str, store: str) -> None:
    import torch.distributed as dist

    log = MetricsLogger(
        run_dir, LoggerConfig(console_every=0)
    )  # built before init: rank read later
    every = MetricsLogger(
        run_dir,
        LoggerConfig(
            console_every=0, rank_zero_only=False, jsonl_name="all.jsonl", tensorboard=False
        ),
    )
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        rng = np.random.default_rng(rank)
        pred, target = rng.normal(size=50 + 30 * rank), rng.normal(size=50 + 30 * rank)
        mse = MSE()
        mse.update(pred, target)
        total = mse.all_reduce()
        for step in range(3):
            log.log(step, loss=float(rank), mse=total.compute(), weight=total.weight)
            every.log(step, rank=rank)
        log.close()
        every.close()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_rank_zero_only_under_torch_distributed(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")  # torch is already imported here: forking avoids re-importing
    run_dir = tmp_path / "run"
    procs = [
        ctx.Process(target=_rank_main, args=(r, str(run_dir), str(tmp_path / "store")))
        for r in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(recs) == 3 and {r["loss"] for r in recs} == {0.0}  # rank 1 wrote nothing
    r0, r1 = np.random.default_rng(0), np.random.default_rng(1)
    a0, b0 = r0.normal(size=50), r0.normal(size=50)
    a1, b1 = r1.normal(size=80), r1.normal(size=80)
    expected = np.mean(np.concatenate([a0 - b0, a1 - b1]) ** 2)
    assert recs[0]["weight"] == 130 and recs[0]["mse"] == pytest.approx(expected, rel=1e-12)
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1
    per_rank = [
        json.loads(x)["rank"] for x in (run_dir / "rank-1" / "all.jsonl").read_text().splitlines()
    ]
    assert per_rank == [1, 1, 1] and len((run_dir / "all.jsonl").read_text().splitlines()) == 3
