"""Run suites into one results file: each suite in turn, in its own process, every failure
contained.

The results file is rewritten (atomically) after every suite, so a run that is killed or
interrupted keeps what it measured so far. A suite that raises ``Unavailable`` is recorded as
unavailable with its reason; any other exception as failed with the error; the run goes on. The
machine facts come from tj-monitor (CPU model, RAM, driver, versions, commit) and tj-dist's
``detect_environment`` (CPUs in this process's cpuset, the cgroup memory limit, GPUs, WSL2).
"""

from __future__ import annotations

import platform
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tj_bench.isolate import execute, run_suite_in_child
from tj_bench.results import Results, SuiteResult
from tj_bench.suite import Suite, SuiteContext
from tj_bench.suites import NAMES, load_suite
from tj_monitor import git_commit, package_versions

__all__ = ["PACKAGES", "RunConfig", "machine_facts", "parse_sets", "run_suites"]

PACKAGES = (
    "tj-data", "tj-models", "tj-dist", "tj-rl", "tj-monitor", "tj-hybrid", "tj-bench",
    "torch", "torch-geometric", "ray", "eclipse-sumo", "libsumo", "numpy", "h5py",
)  # fmt: skip


def machine_facts() -> dict[str, Any]:
    """CPU model and count, RAM and cgroup limit, WSL2, OS, GPUs, CUDA, driver and NCCL."""
    import torch

    from tj_dist import detect_environment
    from tj_monitor import cpu_model, gpu_driver, read_system_memory

    env = detect_environment()
    return {
        "cpu_model": cpu_model(), "cpus": env.cpu_count, "ram_bytes": read_system_memory().total,
        "memory_limit_bytes": env.memory_limit_bytes, "wsl2": env.wsl2,
        "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
        "gpus": [{"name": g.name, "memory_bytes": g.total_memory_bytes,
                  "capability": list(g.capability)} for g in env.gpus],
        "cuda": torch.version.cuda if env.cuda else None,
        "driver": gpu_driver() if env.cuda else None, "nccl": env.nccl_version,
    }  # fmt: skip


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


def _workdir(config: RunConfig, name: str, *, fresh: bool = True) -> Path:
    """``OUT/work/NAME`` with ``--keep`` (emptied when ``fresh``), else a new temporary folder."""
    if not config.keep:
        return Path(tempfile.mkdtemp(prefix=f"tj-bench-{name}-"))
    workdir = config.out_dir / "work" / name
    if fresh:
        shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir


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
        machine=machine_facts(), versions=package_versions(PACKAGES), commit=git_commit(),
        created=datetime.now(UTC).isoformat(timespec="seconds"), runs=config.runs,
        quick=config.quick,
        options={f"{s}.{k}": v for s, opts in config.options.items() for k, v in opts.items()},
    )  # fmt: skip
    shared: dict[str, Any] = {}
    shared_dir = _workdir(config, "shared", fresh=False)  # a kept one keeps its phase runs
    try:
        for name in config.suites:
            workdir = _workdir(config, name)
            ctx = SuiteContext(suite=name, quick=config.quick, runs=config.runs, workdir=workdir,
                               out_dir=config.out_dir, shared_dir=shared_dir,
                               options=config.options.get(name, {}), shared=shared)  # fmt: skip
            try:
                if config.isolate:
                    result, shared = run_suite_in_child(ctx, loader, show_progress)
                else:
                    result = execute(ctx, loader)
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
