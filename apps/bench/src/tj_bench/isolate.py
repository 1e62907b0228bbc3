"""One suite in one fresh process (spawned): what a suite measures, its memory above all, must
not depend on what ran before it in the runner (imports, caches, threads), and a suite that
crashes or is killed must not take the run with it.

The child gets the suite's context as plain data, runs ``execute`` and sends back the result and
the shared dict (the phase suites hand run folders on through it), through
``tj_monitor.run_in_child`` (the parent-death signal, stopped with the runner, reaped). A child
that dies without sending (a segfault, the OOM killer, SIGKILL) is recorded as failed with its
signal.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tj_bench.results import SuiteResult
from tj_bench.suite import Suite, SuiteContext, Unavailable
from tj_monitor import run_in_child

__all__ = ["SuiteJob", "execute", "run_isolated"]


@dataclass(kw_only=True)
class SuiteJob:
    """What a suite's run needs, as picklable data."""

    name: str
    quick: bool
    runs: int
    workdir: Path
    out_dir: Path
    shared_dir: Path
    options: dict[str, str]
    shared: dict[str, Any]
    show_progress: bool = False


def execute(job: SuiteJob, loader: Callable[[str], Suite], progress: Any = None) -> SuiteResult:
    """Run one suite in this process; every exception becomes the result's status."""
    ctx = SuiteContext(suite=job.name, quick=job.quick, runs=job.runs, workdir=job.workdir,
                       out_dir=job.out_dir, shared_dir=job.shared_dir, options=job.options,
                       shared=job.shared, progress=progress)  # fmt: skip
    t0 = time.perf_counter()
    try:
        suite = loader(job.name)
        suite.run(ctx)
        unused = ctx.unused_options()
        if unused:
            raise ValueError(f"--set {job.name}.{unused[0]}: the {job.name} suite has no such "
                             f"option (its options: {', '.join(suite.options) or 'none'})")  # fmt: skip
    except Unavailable as exc:
        ctx.result.status, ctx.result.error = "unavailable", str(exc)
    except Exception as exc:  # a failed suite must not stop the others
        ctx.result.status = "failed"
        tail = "".join(traceback.format_exception(exc)[-6:])
        ctx.result.error = f"{type(exc).__name__}: {exc}\n{tail}"
    ctx.result.wall_s = time.perf_counter() - t0
    ctx.result.params.setdefault("quick", job.quick)
    return ctx.result


def _child(job: SuiteJob, loader: Callable[[str], Suite]) -> tuple[dict[str, Any], dict[str, Any]]:
    from tj_monitor import track_progress as rich_progress

    with rich_progress() if job.show_progress else nullcontext(None) as track:
        result = execute(job, loader, track)
    return result.to_json(), job.shared


def run_isolated(
    job: SuiteJob, loader: Callable[[str], Suite]
) -> tuple[SuiteResult, dict[str, Any]]:
    """Run ``execute`` in a spawned child; ``(result, shared)`` back, or a failed result."""
    t0 = time.perf_counter()
    try:
        data, shared = run_in_child(_child, job, loader, name=f"the {job.name} suite's process")
    except Exception as exc:  # it died (ChildFailed names how) or could not report
        result = SuiteResult(suite=job.name, status="failed", error=str(exc),
                             wall_s=time.perf_counter() - t0)  # fmt: skip
        return result, job.shared
    return SuiteResult.from_json(data), shared
