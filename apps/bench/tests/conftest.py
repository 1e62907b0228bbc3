"""One quick run of the runner per test session, shared by every suite's tests.

``quick_results`` runs ``python apps/bench SUITES --quick`` once, in a subprocess, for the suites
whose test modules (``test_suite_<name>.py``) were collected: running one suite's test file runs
that suite only; the whole test run runs every suite once (which is the CI check that
``apps/bench --quick`` works).
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tj_bench import Results, SuiteResult
from tj_bench.suites import NAMES

APP = Path(__file__).resolve().parents[1]
_MODULE = re.compile(r"test_suite_(\w+)\.py$")
# The quick run of every suite takes minutes alone and several times that beside other jobs on a
# loaded host; the first test that asks for it pays for it, so every such test may take this long
# (pytest-timeout's default of 600 s is for one test's own work), and the run itself a little less.
QUICK_TIMEOUT = 3000


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give each test that uses ``quick`` (and has no timeout of its own) ``QUICK_TIMEOUT``."""
    for item in items:
        if "quick" in getattr(item, "fixturenames", ()) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(QUICK_TIMEOUT))


@dataclass
class QuickRun:
    results: Results
    out: Path
    returncode: int
    output: str

    def suite(self, name: str) -> SuiteResult:
        """The suite's result, asserting that it ran (its error in the message if not)."""
        result = self.results.suite(name)
        assert result.status == "ok", f"suite {name} {result.status}: {result.error}\n{self.output[-3000:]}"
        return result


def run_bench(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """``python apps/bench ARGS`` in a subprocess (what ``uv run apps/bench ARGS`` runs)."""
    return subprocess.run([sys.executable, str(APP), *args], capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip


@pytest.fixture
def bench():
    """``bench(*args, timeout=...)``: run the CLI in a subprocess (tests import no conftest)."""
    return run_bench


@pytest.fixture(scope="session")
def quick(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> QuickRun:
    collected = {m.group(1) for item in request.session.items if (m := _MODULE.search(str(item.path)))}
    suites = [n for n in NAMES if n in collected] or list(NAMES)
    out = tmp_path_factory.mktemp("bench-quick")
    proc = run_bench(*suites, "--quick", "--out", str(out), timeout=QUICK_TIMEOUT - 120)
    output = proc.stdout + proc.stderr
    path = out / "results.json"
    assert path.is_file(), f"apps/bench --quick wrote no results ({proc.returncode}):\n{output[-4000:]}"
    return QuickRun(Results.load(path), out, proc.returncode, output)


def _make_results(*suites: SuiteResult, runs: int = 3) -> Results:
    return Results(machine={"cpu_model": "test cpu", "cpus": 2, "ram_bytes": 2**34, "gpus": []},
                   versions={"torch": "2.0"}, commit="abc", created="2026-01-01T00:00:00+00:00",
                   runs=runs, quick=False, suites=list(suites))  # fmt: skip


def _values(result: SuiteResult, name: str) -> list[float]:
    f = result.figure(name)
    assert f.measured and all(math.isfinite(v) for v in f.measured), (name, f.values)
    return f.values


@pytest.fixture
def values():
    """``values(suite_result, name)``: a figure's values, each asserted measured and finite."""
    return _values


@pytest.fixture
def make_results():
    """``make_results(*suite_results)``: a Results with a fixed, fake machine (for pure tests)."""
    return _make_results
