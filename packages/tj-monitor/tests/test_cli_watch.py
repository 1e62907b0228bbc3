"""``tj-monitor watch``: --once --json for scripts, the live view, -- CMD and bad input."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from tj_monitor.cli import main


def test_console_script_once_json() -> None:
    exe = Path(sys.executable).parent / "tj-monitor"
    out = subprocess.run(
        [str(exe), "watch", "--pid", str(os.getpid()), "--once", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    data = json.loads(out.stdout)
    assert data["tree"]["root_pid"] == os.getpid() and data["tree"]["pss"] > 0
    assert data["tree"]["per_process"][0]["pss"] > 0
    t = data["thresholds"]
    assert t["limit"] == data["system"]["limit"] and t["warn"] == int(0.75 * t["limit"])
    # NVML gives the GPUs, or the record says why it could not (no driver on a CPU machine)
    assert data["nvml"] or any(n.startswith("nvml:") for n in data["notes"])
    assert data["cuda"] == []  # torch's allocator is only visible inside the training process


def test_system_only_json_and_custom_lines() -> None:
    buf = io.StringIO()
    code = main(
        ["watch", "--once", "--json", "--warn", "8G", "--cleanup", "0.9"], console=Console(file=buf)
    )
    data = json.loads(buf.getvalue())
    assert code == 0 and data["tree"] is None
    assert data["thresholds"]["warn"] == 8 * 2**30
    assert data["thresholds"]["cleanup"] == int(0.9 * data["system"]["limit"])


def test_live_view_renders_refreshes_with_fixed_console() -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=110, height=40, force_terminal=True, color_system=None)
    code = main(
        ["watch", "--pid", str(os.getpid()), "--count", "2", "--interval", "0.05"], console=console
    )
    text = buf.getvalue()
    assert code == 0
    assert text.count("tree PSS") >= 2  # two refreshes drawn
    for part in ("used vs limit", "top processes by PSS", "warn", "cleanup", "/dev/shm"):
        assert part in text
    assert "peak tree PSS" in text


def test_command_is_started_watched_and_its_exit_code_returned() -> None:
    buf = io.StringIO()
    code = main(
        [
            "watch",
            "--json",
            "--interval",
            "0.05",
            "--",
            sys.executable,
            "-c",
            "import sys, time; time.sleep(0.4); sys.exit(3)",
        ],
        console=Console(file=buf),
    )
    assert code == 3
    rows = [json.loads(x) for x in buf.getvalue().splitlines() if x.startswith("{")]
    assert rows and all(r["tree"]["root_pid"] == rows[0]["tree"]["root_pid"] for r in rows)
    assert rows[0]["tree"]["root_pid"] != os.getpid()


def test_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    buf = io.StringIO()
    assert main(["watch", "--pid", str(dead.pid), "--once"], console=Console(file=buf)) == 1
    assert f"no process with pid {dead.pid}" in buf.getvalue()
    with pytest.raises(SystemExit) as exc:
        main(["watch", "--warn", "lots"])
    assert exc.value.code == 2 and "expected a fraction" in capsys.readouterr().err
    assert main(["watch", "--pid", "1", "--", "true"]) == 2
    assert "not both" in capsys.readouterr().err
