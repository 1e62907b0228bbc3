"""Run suites into one results file: each suite in turn, in its own process, every failure
contained.

The results file is rewritten (atomically) after every suite, so a run that is killed or
interrupted keeps what it measured so far. A suite that raises ``Unavailable`` is recorded as
unavailable with its reason; any other exception as failed with the error; the run goes on.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tj_bench.isolate import SuiteJob, execute, run_isolated
from tj_bench.machine import git_commit, machine_facts, versions
from tj_bench.results import Results, SuiteResult
from tj_bench.suite import Suite
from tj_bench.suites import NAMES, load_suite

__all__ = ["RunConfig", "parse_sets", "run_suites"]

def parse_sets(sets: Sequence[str], suites: Sequence[str]) -> dict[str, dict[str, str]]:
    """``["data.size_gb=2", ...]`` -> ``{"data": {"size_gb": "2"}}``; unknown suites are errors."""
    out: dict[str, dict[str, str]] = {}
    for item in sets:
        key, sep, value = item.partition("=")
        suite, dot, option = key.partition(".")
        if not sep or not dot or not option:
            raise ValueError(f"--set {item!r}: expected SUITE.OPTION=VALUE")
        if suite not in NAMES:
            raise ValueError(f"--set {item!r}: unknown suite {suite!r}")
        if suite not in suites:
            raise ValueError(f"--set {item!r}: suite {suite!r} is not selected in this run")
        out.setdefault(suite, {})[option] = value
    return out


@dataclass(kw_only=True)
class RunConfig:
    """What to run and where to write it."""

    suites: tuple[str, ...] = NAMES
    quick: bool = False
    runs: int = 3
    out_dir: Path = Path("bench-results")
    options: dict[str, dict[str, str]] = field(default_factory=dict)
    keep: bool = False  # keep each suite's generated data under out_dir/work
    isolate: bool = True  # each suite in a fresh spawned process (memory figures, crashes)

    def __post_init__(self) -> None:
        if not self.suites:
            raise ValueError("suites: at least one")
        unknown = [s for s in self.suites if s not in NAMES]
        if unknown:
            raise ValueError(f"unknown suite(s) {unknown}; suites: {', '.join(NAMES)}")
        if len(set(self.suites)) != len(self.suites):
            raise ValueError(f"suites: listed twice in {list(self.suites)}")
        if self.runs < 1:
            raise ValueError(f"runs: must be >= 1, got {self.runs}")
        self.out_dir = Path(self.out_dir)

    @property
    def results_path(self) -> Path:
        return self.out_dir / "results.json"


def _workdir(config: RunConfig, name: str) -> Path:
    if config.keep:
        workdir = config.out_dir / "work" / name
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        return workdir
    return Path(tempfile.mkdtemp(prefix=f"tj-bench-{name}-"))


def run_suites(
    config: RunConfig,
    *,
    show_progress: bool = False,
    on_suite: Callable[[SuiteResult], None] | None = None,
    loader: Callable[[str], Suite] = load_suite,
) -> Results:
    """Run ``config.suites`` in order; save ``results.json`` after each; return the results.

    Each suite runs in its own spawned process when ``config.isolate`` (the default).
    ``loader`` maps a suite name to its ``Suite`` (tests give their own; with isolation it must
    be importable by the child, like any spawned target).
    """
    config.out_dir.mkdir(parents=True, exist_ok=True)
    results = Results(
        machine=machine_facts(), versions=versions(), commit=git_commit(),
        created=datetime.now(UTC).isoformat(timespec="seconds"), runs=config.runs,
        quick=config.quick,
        options={f"{s}.{k}": v for s, opts in config.options.items() for k, v in opts.items()},
    )  # fmt: skip
    shared: dict[str, Any] = {}
    if config.keep:
        shared_dir = config.out_dir / "work" / "shared"
        shared_dir.mkdir(parents=True, exist_ok=True)
    else:
        shared_dir = Path(tempfile.mkdtemp(prefix="tj-bench-shared-"))
    try:
        for name in config.suites:
            workdir = _workdir(config, name)
            job = SuiteJob(name=name, quick=config.quick, runs=config.runs, workdir=workdir,
                           out_dir=config.out_dir, shared_dir=shared_dir,
                           options=config.options.get(name, {}), shared=shared,
                           show_progress=show_progress)  # fmt: skip
            try:
                if config.isolate:
                    result, shared = run_isolated(job, loader)
                else:
                    result = execute(job, loader)
            finally:
                if not config.keep:
                    shutil.rmtree(workdir, ignore_errors=True)
            results.suites.append(result)
            results.save(config.results_path)
            if on_suite is not None:
                on_suite(result)
    finally:
        if not config.keep:
            shutil.rmtree(shared_dir, ignore_errors=True)
    return results
