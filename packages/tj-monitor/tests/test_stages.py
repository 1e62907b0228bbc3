"""Runs made of stages on real files: discovery and order, torn lines, the cross-stage table,
the memory plot across stages, and ``tj-monitor analyze`` on a staged run and a plain one."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tj_monitor import (
    RunData,
    RunFormatError,
    load_stages,
    plot_memory_stages,
    summarize_stages,
)
from tj_monitor.cli import main

GiB = 2**30
PNG = b"\x89PNG\r\n\x1a\n"
ORDER = ["warmup", "a_train", "logs_only", "idle"]


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _mem(t: float, pss_gib: float, warn_gib: float = 12) -> dict[str, Any]:
    return {
        "time": t,
        "tree_pss": pss_gib * GiB,
        "container_used": (pss_gib + 3) * GiB,
        "warn_threshold": warn_gib * GiB,
        "cleanup_threshold": 14 * GiB,
    }


@pytest.fixture
def staged(tmp_path: Path) -> Path:
    """warmup (t=1000) then a_train and logs_only (both t=1600: by name), idle (no records)."""
    root = tmp_path / "run"
    _write(root / "warmup" / "memory.jsonl", [_mem(1000, 1), _mem(1030, 3), _mem(1060, 2)])
    _write(
        root / "warmup" / "logs" / "metrics.jsonl",
        [
            *(
                {
                    "step": s,
                    "time": 1010 + 10 * s,
                    "loss": 1.0 / (s + 1),
                    "time/data_wait_fraction": w,
                }
                for s, w in enumerate((0.1, 0.2, 0.3))
            ),
            {"step": 2, "time": 1035, "eval/loss": 0.5},
        ],
    )
    # deeper than logs/: never read (it would make warmup start at t=1 and add step 99)
    _write(root / "warmup" / "ray" / "result.jsonl", [{"step": 99, "time": 1, "loss": 9}])
    _write(root / "a_train" / "memory.jsonl", [_mem(1600, 2, warn_gib=10), _mem(1660, 5, 10)])
    _write(
        root / "a_train" / "metrics.jsonl",
        [{"step": s, "time": 1600 + 10 * s, "loss": 0.5} for s in range(5)],
    )
    _write(
        root / "logs_only" / "logs" / "metrics.jsonl",
        [{"step": 1, "time": 1600, "loss": 2.0}, {"step": 2, "time": 1700, "loss": 1.0}],
    )
    _write(root / "idle" / "events.jsonl", [{"event": "started"}])  # a stage, but no records
    _write(root / "deep" / "inner" / "logs" / "metrics.jsonl", [{"step": 0, "loss": 1}])
    _write(root / ".tmp-phase" / "metrics.jsonl", [{"step": 0, "time": 0, "loss": 1}])
    (root / "checkpoints").mkdir()
    (root / "config.yaml").write_text("seed: 0\n")
    return root


def test_stage_discovery_and_order(staged: Path) -> None:
    stages = load_stages(staged)
    assert list(stages) == ORDER  # by first record time, then name; no-records last
    assert all(isinstance(run, RunData) for run in stages.values())
    warmup = stages["warmup"]
    assert warmup.source == staged / "warmup"
    assert warmup.files == [
        staged / "warmup" / "memory.jsonl",
        staged / "warmup/logs/metrics.jsonl",
    ]
    assert (len(warmup.metrics), len(warmup.memory)) == (4, 3)
    assert all(r["step"] != 99 for r in warmup.metrics)
    assert [len(stages[n].metrics) for n in ORDER] == [4, 5, 2, 0]
    assert stages["idle"].ignored_records == 1 and not stages["idle"].memory


def test_no_stages_and_missing_root(tmp_path: Path) -> None:
    with pytest.raises(RunFormatError, match="no such directory"):
        load_stages(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    _write(tmp_path / "a" / "b" / "c" / "metrics.jsonl", [{"step": 0, "loss": 1}])
    with pytest.raises(RunFormatError, match=r"no \*\.jsonl files in this directory, nor"):
        load_stages(tmp_path)


def test_torn_last_line_fails_or_is_skipped(staged: Path) -> None:
    metrics = staged / "logs_only" / "logs" / "metrics.jsonl"
    with metrics.open("a") as f:
        f.write('{"step": 3, "time": 1710, "loss"')  # killed mid-write
    with pytest.raises(RunFormatError, match="malformed line") as err:
        load_stages(staged)
    assert str(err.value).startswith(f"{metrics}:3: ") and err.value.line == 3
    stages = load_stages(staged, skip_bad_lines=True)
    assert stages["logs_only"].skipped_lines == [f"{metrics}:3"]
    assert len(stages["logs_only"].metrics) == 2 and list(stages) == ORDER


def test_cross_stage_table(staged: Path) -> None:
    s = summarize_stages(load_stages(staged), source=staged)
    assert s.source == str(staged) and s.start_time == 1000 and s.duration_s == 700
    assert list(s.stages) == ORDER and s.stages["warmup"].series["loss"].count == 3
    rows = {r.name: r for r in s.table}
    assert [r.name for r in s.table] == ORDER
    w = rows["warmup"]
    assert (w.start_s, w.wall_s, w.steps, w.first_step, w.last_step) == (0, 60, 3, 0, 2)
    assert w.memory_samples == 3 and w.peak_tree_pss == 3 * GiB
    assert w.data_wait_fraction == pytest.approx(0.2)
    a = rows["a_train"]
    assert (a.start_s, a.wall_s, a.steps, a.peak_tree_pss) == (600, 60, 5, 5 * GiB)
    assert a.data_wait_fraction is None
    lo = rows["logs_only"]
    assert (lo.start_s, lo.wall_s, lo.steps, lo.memory_samples, lo.peak_tree_pss) == (
        600,
        100,
        2,
        0,
        None,
    )
    idle = rows["idle"]
    assert (idle.start_s, idle.wall_s, idle.steps, idle.first_step) == (None, None, 0, None)
    assert json.loads(json.dumps(s.to_dict()))["table"][0]["name"] == "warmup"


def test_plot_memory_stages_writes_one_png(staged: Path, tmp_path: Path) -> None:
    stages = load_stages(staged)
    out = plot_memory_stages(stages, tmp_path / "plots" / "mem.png", budget=16 * GiB)
    assert out == tmp_path / "plots" / "mem.png" and out.read_bytes()[:8] == PNG
    with pytest.raises(ValueError, match="budget"):
        plot_memory_stages(stages, tmp_path / "x.png", budget=-1)


def test_plot_memory_stages_is_none_without_memory_records(staged: Path, tmp_path: Path) -> None:
    stages = load_stages(staged)
    metrics_only = {n: stages[n] for n in ("logs_only", "idle")}
    assert plot_memory_stages(metrics_only, tmp_path / "mem.png") is None
    untimed = RunData(source=tmp_path, memory=[{"tree_pss": GiB}])  # no time: no axis to draw on
    assert plot_memory_stages({"u": untimed}, tmp_path / "mem.png") is None
    assert plot_memory_stages({}, tmp_path / "mem.png") is None
    assert not (tmp_path / "mem.png").exists()


def test_cli_on_a_staged_run(staged: Path) -> None:
    buf = io.StringIO()
    assert (
        main(["analyze", str(staged), "--budget", "16G"], console=Console(file=buf, width=200)) == 0
    )
    text = buf.getvalue()
    for name in ORDER:
        assert f"stage {name}" in text
    assert "across stages" in text and "20.0%" in text and "3.00 GiB" in text
    memory = staged / "analysis" / "memory_stages.png"
    assert memory.read_bytes()[:8] == PNG
    assert (staged / "analysis" / "warmup" / "loss.png").is_file()
    assert not load_stages(staged).keys() - set(ORDER)  # the analysis folder is no stage

    buf = io.StringIO()
    out = staged.parent / "plots"
    code = main(["analyze", str(staged), "--json", "--out", str(out)], console=Console(file=buf))
    data = json.loads(buf.getvalue())
    assert code == 0 and list(data["stages"]) == ORDER
    assert [r["name"] for r in data["table"]] == ORDER and data["duration_s"] == 700
    assert data["stages"]["a_train"]["series"]["loss"]["count"] == 5
    assert str(out / "memory_stages.png") in data["plots"]
    assert str(out / "warmup" / "memory.png") in data["plots"]

    buf = io.StringIO()
    assert main(["analyze", str(staged), "--no-plots"], console=Console(file=buf, width=200)) == 0
    assert "plot:" not in buf.getvalue()


def test_cli_staged_torn_line_and_bad_budget(
    staged: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = staged / "warmup" / "logs" / "metrics.jsonl"
    with metrics.open("a") as f:
        f.write("{torn")
    assert main(["analyze", str(staged), "--no-plots"], console=Console(file=io.StringIO())) == 2
    err = capsys.readouterr().err
    assert f"{metrics}:5" in err and "--skip-bad-lines" in err
    args = ["analyze", str(staged), "--no-plots", "--skip-bad-lines"]
    assert main(args, console=Console(file=io.StringIO())) == 0
    assert f"skipped 1 malformed line(s): {metrics}:5" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["analyze", str(staged), "--budget", "0.8"])
    assert "expected a size" in capsys.readouterr().err


def test_cli_empty_directory_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", str(tmp_path)], console=Console(file=io.StringIO())) == 2
    assert "no *.jsonl files" in capsys.readouterr().err


def test_a_plain_folder_is_not_read_as_stages(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "fixtures" / "run", run)
    _write(run / "sub" / "metrics.jsonl", [{"step": 0, "time": 0, "loss": 1}])  # ignored
    buf = io.StringIO()
    assert main(["analyze", str(run), "--json"], console=Console(file=buf)) == 0
    data = json.loads(buf.getvalue())
    assert "stages" not in data and data["records"] == 12 + 3
    assert data["series"]["train/loss"]["count"] == 10
    assert sorted(Path(p).name for p in data["plots"]) == [
        "data_wait.png",
        "loss.png",
        "lr.png",
        "memory.png",
        "throughput.png",
    ]
    assert not (run / "analysis" / "memory_stages.png").exists()
