"""The core stays light: ``import tj_monitor`` and its machine facts need no report extra, and
what needs it fails with an error that names the extra."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

REPORT = ("rich", "matplotlib", "tensorboard")


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_import_loads_no_report_library() -> None:
    out = _run(
        """
        import sys, tj_monitor
        tj_monitor.memory_limit(), tj_monitor.read_system_memory(), tj_monitor.tree_memory()
        with tj_monitor.PeakPssSampler(interval=0.01) as peak:
            pass
        assert peak.peak_pss > 0
        print(sorted(m.split(".")[0] for m in sys.modules
                     if m.split(".")[0] in ("rich", "matplotlib", "tensorboard")))
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_without_the_report_extra_core_works_and_reporting_names_the_extra(
    tmp_path: Path,
) -> None:
    # None in sys.modules makes `import x` raise ImportError: the libraries are "not installed"
    out = _run(
        f"""
        import sys
        for name in {REPORT!r}:
            sys.modules[name] = None
        import json
        from pathlib import Path
        import tj_monitor
        from tj_monitor import LoggerConfig, MemoryMonitor, MonitorConfig, MetricsLogger

        run = Path({str(tmp_path)!r})
        with MemoryMonitor(MonitorConfig(interval_s=0.01, nvml=False)) as mon:
            mon.sample()
        mon.save(run / "memory.csv")
        with MetricsLogger(run, LoggerConfig(tensorboard=False, console_every=0)) as log:
            log.log(1, loss=0.5)
        assert json.loads((run / "metrics.jsonl").read_text())["loss"] == 0.5

        def error(fn):
            try:
                fn()
            except ImportError as exc:
                return str(exc)
            raise AssertionError("no ImportError")

        summary = tj_monitor.summarize(tj_monitor.load_run(run))
        print(error(lambda: mon.plot(run / "memory.png")))
        print(error(lambda: MetricsLogger(run, LoggerConfig())))
        print(error(lambda: tj_monitor.render_summary(summary)))
        print(error(lambda: tj_monitor.plot_run(tj_monitor.load_run(run), run / "plots")))
        print(error(lambda: __import__("tj_monitor.watch")))
        print(error(lambda: __import__("tj_monitor.cli").cli.main(["analyze", str(run)])))
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "tj_monitor.curves.plot_rows needs matplotlib: pip install 'tj-monitor[report]'",
        "tj_monitor.MetricsLogger (tensorboard=True) needs tensorboard: pip install "
        "'tj-monitor[report]'",
        "tj_monitor.render_summary needs rich: pip install 'tj-monitor[report]'",
        "tj_monitor.plot_run needs matplotlib: pip install 'tj-monitor[report]'",
        "tj_monitor.watch needs rich: pip install 'tj-monitor[report]'",
        "the tj-monitor command needs rich: pip install 'tj-monitor[report]'",
    ]


def test_core_dependencies_are_psutil_and_numpy_only() -> None:
    meta = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    core = {d.split(">")[0].split("<")[0].split("=")[0] for d in meta["project"]["dependencies"]}
    assert core == {"psutil", "numpy"}
    report = meta["project"]["optional-dependencies"]["report"]
    assert {d.split(">")[0] for d in report} == set(REPORT)
