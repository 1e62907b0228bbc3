"""`doctor` on this machine: every line has a status, the facts are real, exit status is right."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

from tj_hybrid.doctor import run_checks

APP = Path(__file__).resolve().parents[1]


def test_doctor_checks_this_machine(tmp_path: Path) -> None:
    checks = run_checks({"run dir": tmp_path / "runs", "data dir": tmp_path / "data"})
    by_name = {c.name: c for c in checks}
    for name in (
        "python",
        "torch",
        "pyg",
        "ray",
        "sumo",
        "libsumo",
        "ram",
        "swap",
        "container limit",
        "/dev/shm",
        "wsl2",
        "disk run dir",
        "disk data dir",
        "cpus",
    ):
        assert name in by_name, name
    assert all(c.status in ("OK", "WARN", "FAIL") for c in checks)
    assert all(c.fix for c in checks if c.status != "OK")  # every problem comes with its fix
    assert by_name["python"].detail == platform.python_version()
    assert by_name["libsumo"].status == "OK"
    assert by_name["sumo"].detail.startswith("1.28")


def test_doctor_command_runs() -> None:
    out = subprocess.run(
        [sys.executable, str(APP), "doctor", "--profile", "smoke"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode in (0, 1), out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("OK") and "libsumo" in line for line in lines), out.stdout
    assert (out.returncode == 1) == any(line.startswith("FAIL") for line in lines)
