"""One suite in one fresh process (spawned): what a suite measures, its memory above all, must
not depend on what ran before it in the runner (imports, caches, threads), and a suite that
crashes or is killed must not take the run with it.

The child gets the suite's context, runs ``execute`` and sends back the result and the shared
dict (the phase suites hand run folders on through it), through ``tj_monitor.run_in_child`` (the
parent-death signal, stopped with the runner, reaped). A child that dies without sending (a
segfault, the OOM killer, SIGKILL) is recorded as failed with its signal.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from tj_bench.results import SuiteResult
from tj_bench.suite import Suite, SuiteContext, Unavailable
from tj_monitor import run_in_child

__all__ = ["execute", "run_suite_in_child"]


def execute(ctx: SuiteContext, loader: Callable[[str], Suite]) -> SuiteResult:
    """Run ``ctx.suite`` in this process; every exception becomes the result's status."""
    t0 = time.perf_counter()
    try:
        suite = loader(ctx.suite)
        suite.run(ctx)
        unused = ctx.unused_options()
        if unused:
            raise ValueError(f"--set {ctx.suite}.{unused[0]}: the {ctx.suite} suite has no such "
                             f"option (its options: {', '.join(suite.options) or 'none'})")  # fmt: skip
    except Unavailable as exc:
        ctx.result.status, ctx.result.error = "unavailable", str(exc)
    except Exception as exc:  # a failed suite must not stop the others
        ctx.result.status = "failed"
        tail = "".join(traceback.format_exception(exc)[-6:])
        ctx.result.error = f"{type(exc).__name__}: {exc}\n{tail}"
    ctx.result.wall_s = time.perf_counter() - t0
    ctx.result.params.setdefault("quick", ctx.quick)
    return ctx.result


def _child(ctx: SuiteContext, loader: Callable[[str], Suite],
           show_progress: bool) -> tuple[SuiteResult, dict[str, Any]]:  # fmt: skip
    from tj_monitor import track_progress

    with track_progress() if show_progress else nullcontext(None) as ctx.track:
        return execute(ctx, loader), ctx.shared


def run_suite_in_child(ctx: SuiteContext, loader: Callable[[str], Suite],
                 show_progress: bool = False) -> tuple[SuiteResult, dict[str, Any]]:  # fmt: skip
    """Run ``execute`` in a spawned child; ``(result, shared)`` back, or a failed result."""
    t0 = time.perf_counter()
    try:
        return run_in_child(_child, ctx, loader, show_progress, name=f"the {ctx.suite} suite")
    except Exception as exc:  # it died (ChildFailed names how) or could not report
        result = SuiteResult(suite=ctx.suite, status="failed", error=str(exc),
                             wall_s=time.perf_counter() - t0)  # fmt: skip
        return result, ctx.shared
