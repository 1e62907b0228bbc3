"""Run analysis on a fixture run: numbers, plots, malformed input, and the CLI."""

from __future__ import annotations

import io
import json
import math
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from tj_monitor import RunFormatError, load_run, plot_run, summarize
from tj_monitor.cli import main

FIXTURE = Path(__file__).parent / "fixtures" / "run"
GiB = 2**30
PNG = b"\x89PNG\r\n\x1a\n"


def test_summary_numbers_of_the_fixture_run() -> None:
    s = summarize(load_run(FIXTURE))
    assert s.records == 12 + 3 and s.ignored_records == 1 and s.skipped_lines == []
    assert (s.first_step, s.last_step, s.duration_s) == (0, 9, 91.0)
    loss = s.series["train/loss"]
    assert (loss.count, loss.min, loss.max, loss.last) == (10, 0.25, 4.0, 0.25)
    assert loss.mean == pytest.approx(1.45)
    ev = s.series["eval/loss"]
    assert ev.count == 2 and ev.nonfinite == 1 and ev.first_nonfinite_step == 9 and ev.mean == 1.5
    assert math.isnan(ev.last)
    assert s.loss == ["eval/loss", "train/loss"] and s.lr == ["lr"]
    assert (s.series["lr"].first, s.series["lr"].last) == (1e-3, 5e-4)
    assert s.throughput == ["time/throughput"]
    assert s.series["time/throughput"].mean == pytest.approx(550.0)
    assert s.data_wait == ["time/data_wait_fraction"]
    assert s.series["time/data_wait_fraction"].mean == pytest.approx(0.065)
    assert s.memory_samples == 3
    assert s.peak_memory["tree_pss"] == 3 * GiB and s.peak_memory["container_used"] == 9 * GiB
    assert s.peak_memory["sys_available"] == 7 * GiB and "warn_threshold" not in s.peak_memory


def test_plots_are_written(tmp_path: Path) -> None:
    paths = plot_run(load_run(FIXTURE), tmp_path)
    assert sorted(p.name for p in paths) == [
        "data_wait.png",
        "loss.png",
        "lr.png",
        "memory.png",
        "throughput.png",
    ]
    assert all(p.read_bytes()[:8] == PNG for p in paths)


def _copy(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    return run


@pytest.mark.parametrize(
    ("bad_line", "what"),
    [
        ('{"step": 10, "train/loss": 0.2', "malformed line"),  # torn by a kill mid-write
        ("[1, 2, 3]", "expected a JSON object"),
        ('{"step": "ten", "loss": 1}', "'step' must be an integer"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path: Path, bad_line: str, what: str) -> None:
    run = _copy(tmp_path)
    with (run / "metrics.jsonl").open("a") as f:
        f.write(bad_line + "\n")
    with pytest.raises(RunFormatError, match=what) as err:
        load_run(run)
    assert str(err.value).startswith(f"{run / 'metrics.jsonl'}:13: ")
    assert err.value.line == 13
    skipped = load_run(run, skip_bad_lines=True)
    assert skipped.skipped_lines == [f"{run / 'metrics.jsonl'}:13"]
    assert summarize(skipped).series["train/loss"].count == 10


def test_missing_and_empty_inputs(tmp_path: Path) -> None:
    with pytest.raises(RunFormatError, match="no such file"):
        load_run(tmp_path / "nope")
    with pytest.raises(RunFormatError, match=r"no \*\.jsonl"):
        load_run(tmp_path)
    (tmp_path / "other.jsonl").write_text('{"hello": 1}\n\n')
    with pytest.raises(RunFormatError, match="no metrics or memory records"):
        load_run(tmp_path)
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(RunFormatError, match=r"bin\.jsonl: cannot read"):
        load_run(tmp_path)


def test_cli_analyze_json_table_and_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(tmp_path)
    buf = io.StringIO()
    assert main(["analyze", str(run), "--json"], console=Console(file=buf, width=200)) == 0
    data = json.loads(buf.getvalue())
    assert data["series"]["train/loss"]["min"] == 0.25
    assert sorted(Path(p).name for p in data["plots"])[0] == "data_wait.png"
    assert all(Path(p).parent == run / "analysis" for p in data["plots"])

    buf = io.StringIO()
    assert (
        main(
            ["analyze", str(run / "metrics.jsonl"), "--no-plots"],
            console=Console(file=buf, width=160),
        )
        == 0
    )
    text = buf.getvalue()
    assert "train/loss" in text and "1.45" in text and "6.5%" in text and "plot:" not in text

    with (run / "metrics.jsonl").open("a") as f:
        f.write("{torn\n")
    assert main(["analyze", str(run), "--no-plots"], console=Console(file=io.StringIO())) == 2
    err = capsys.readouterr().err
    assert f"{run / 'metrics.jsonl'}:13" in err and "--skip-bad-lines" in err
    buf = io.StringIO()
    code = main(
        ["analyze", str(run), "--no-plots", "--skip-bad-lines"],
        console=Console(file=buf, width=160),
    )
    assert code == 0 and "skipped 1 malformed line" in capsys.readouterr().err
