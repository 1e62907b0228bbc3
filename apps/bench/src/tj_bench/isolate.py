"""One suite in one fresh process (spawned): what a suite measures, its memory above all, must
not depend on what ran before it in the runner (imports, caches, threads), and a suite that
crashes or is killed must not take the run with it.

The child gets the suite's context as plain data, runs ``execute`` and sends back the result and
the shared dict (the phase suites hand run folders on through it). A child that dies without
sending (a segfault, the OOM killer, SIGKILL) is recorded as failed with its signal.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import time
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tj_bench.results import SuiteResult
from tj_bench.suite import Suite, SuiteContext, Unavailable

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


def _child(job: SuiteJob, loader: Callable[[str], Suite], conn: Any) -> None:
    from tj_bench.progress import rich_progress

    with rich_progress() if job.show_progress else nullcontext(None) as track:
        result = execute(job, loader, track)
    conn.send((result.to_json(), job.shared))
    conn.close()


def _died(name: str, exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            how = f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"killed by signal {-exitcode}"
    else:
        how = f"exited with status {exitcode}"
    return f"the {name} suite's process {how} before sending its result"


def run_isolated(
    job: SuiteJob, loader: Callable[[str], Suite]
) -> tuple[SuiteResult, dict[str, Any]]:
    """Run ``execute`` in a spawned child; ``(result, shared)`` back, or a failed result."""
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(job, loader, send), name=f"tj-bench-{job.name}")
    t0 = time.perf_counter()
    proc.start()
    send.close()
    try:
        try:
            payload = recv.recv()
        except EOFError:
            payload = None
        proc.join()
    except BaseException:
        proc.terminate()
        proc.join(10)
        if proc.is_alive():
            proc.kill()
        raise
    finally:
        recv.close()
    if payload is None:
        result = SuiteResult(suite=job.name, status="failed", error=_died(job.name, proc.exitcode),
                             wall_s=time.perf_counter() - t0)  # fmt: skip
        return result, job.shared
    data, shared = payload
    return SuiteResult.from_json(data), shared
