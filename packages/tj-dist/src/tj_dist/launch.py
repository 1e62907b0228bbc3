"""`launch_local`: run a torchrun-style function on N local ranks without torchrun.

`torch.multiprocessing.spawn` already waits on every rank at once and stops the others when one
fails. This launcher exists for what spawn leaves to the caller:
- each child gets torchrun's variables (free port) and an initialised group, torn down after, so
  `fn(*args)` is the function torchrun or Ray Train runs (spawn calls `fn(index, *args)`, bare);
- results come back by rank as plain pickles through a pipe (spawn returns None), sent before the
  group teardown: a rank stuck in teardown after returning is killed after a grace, not waited on;
- a failure raises `RankFailedError` naming the likely root cause (a rank that died without
  reporting before one that raised, then the earliest exception), the others appended, the child's
  exception as `__cause__` (spawn re-raises the traceback text of the first failed rank it sees);
- survivors are stopped as whole process trees (DataLoader workers, SUMO) within seconds (spawn
  signals only the ranks and waits 30 s before SIGKILL); `join_timeout` bounds the whole run.
Like spawn's children, each rank asks for a parent-death signal (Linux PR_SET_PDEATHSIG), so
none trains on as an orphan when the launcher is killed. The process plumbing is tj-monitor's
(``die_with_parent``, the ``ChildOutcome`` pipe protocol, ``stop_tree``, ``describe_exit``).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import pickle
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing.connection import Connection, wait
from typing import Any

import torch

from tj_monitor import ChildOutcome, describe_exit, die_with_parent, stop_tree

from .process_group import BACKENDS, DEFAULT_TIMEOUT, cleanup, init_distributed

__all__ = ["RankFailedError", "free_port", "launch_local"]

log = logging.getLogger(__name__)

TERMINATE_GRACE_S = 3.0
# after the first failure, how long to collect the others before choosing the root cause
FAILURE_GRACE_S = 1.0
# after every rank reported its result, how long their group teardown may take
EXIT_GRACE_S = 30.0


class RankFailedError(RuntimeError):
    """A rank raised or died; `.rank`, `.exitcode` and the child's `.child_traceback` are kept."""

    def __init__(
        self, rank: int, message: str, child_traceback: str = "", exitcode: int | None = None
    ):
        self.rank = rank
        self.exitcode = exitcode
        self.child_traceback = child_traceback
        self._message = message
        text = f"rank {rank} {message}"
        if child_traceback:
            text += f"\n\n--- traceback in rank {rank} ---\n{child_traceback.rstrip()}"
        super().__init__(text)

    def __reduce__(self) -> tuple[Any, ...]:
        # picklable with its fields: a launcher in a child process (tj-hybrid's isolated phase)
        # sends it to its parent, which must get a RankFailedError back, not a TypeError
        return (type(self), (self.rank, self._message, self.child_traceback, self.exitcode),
                {"__cause__": None})


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it), for MASTER_PORT."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _child(
    rank: int,
    nprocs: int,
    port: int,
    backend: str,
    timeout: timedelta,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    conn: Connection,
    parent: int,
) -> None:
    die_with_parent(parent)
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(nprocs),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(nprocs),
    )
    if "OMP_NUM_THREADS" not in os.environ:
        # like torchrun: N ranks on one machine must not each spawn one thread per core
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // nprocs))
    info = None

    def run() -> Any:
        nonlocal info
        info = init_distributed(backend, timeout=timeout)
        return fn(*args)

    # report before tearing the group down: the peers' "connection closed" errors come later
    ChildOutcome.capture(run).send(conn)
    cleanup(info)


@dataclass(order=True)
class _Failure:
    """One failed rank; sorted so that deaths come first, then errors by the time they happened."""

    priority: int  # 0: died without reporting (likely the root cause), 1: raised
    when: float
    rank: int
    message: str = field(compare=False)
    child_traceback: str = field(compare=False, default="")
    cause: BaseException | None = field(compare=False, default=None)
    exitcode: int | None = field(compare=False, default=None)

    def error(self, others: list[_Failure]) -> RankFailedError:
        message = self.message
        if others:
            also = "; ".join(f"rank {o.rank} {o.message}" for o in others)
            message += f" (then: {also})"
        return RankFailedError(self.rank, message, self.child_traceback, self.exitcode)


def launch_local(
    fn: Callable[..., Any],
    nprocs: int,
    *args: Any,
    backend: str = "auto",
    timeout: timedelta = DEFAULT_TIMEOUT,
    join_timeout: float | None = None,
) -> list[Any]:
    """Run `fn(*args)` on `nprocs` local ranks in a fresh process group; return results by rank.

    Each child gets torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT on a free
    port) and an initialised group, so `fn` is the same function torchrun or Ray Train would run.
    `fn` and `args` must be picklable (module-level function: children are spawned). If any rank
    raises or dies, the others are stopped and `RankFailedError` names the first failure (a rank
    that died, else the earliest exception) with the child's traceback. `join_timeout` (seconds)
    bounds the whole run.
    """
    if nprocs < 1:
        raise ValueError(f"nprocs={nprocs} must be >= 1")
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is unknown; use one of {', '.join(BACKENDS)}")
    try:
        pickle.dumps((fn, args))
    except Exception as exc:
        raise TypeError(
            f"launch_local needs a picklable fn and args (a module-level function; children are "
            f"spawned, not forked): {exc}"
        ) from exc
    ctx = mp.get_context("spawn")
    port = free_port()
    procs, conns = [], []
    try:
        for rank in range(nprocs):
            reader, writer = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_child,
                args=(rank, nprocs, port, backend, timeout, fn, args, writer, os.getpid()),
                name=f"tj-dist-rank{rank}",
            )
            proc.start()
            writer.close()
            procs.append(proc)
            conns.append(reader)
        log.info(
            "launched %d ranks (MASTER_PORT=%d, pids %s)", nprocs, port, [p.pid for p in procs]
        )
        return _supervise(procs, conns, join_timeout)
    finally:
        # the ranks are reaped through multiprocessing (their handles), their children by psutil
        stop_tree(procs, TERMINATE_GRACE_S)
        for conn in conns:
            conn.close()


def _supervise(procs: list[Any], conns: list[Connection], join_timeout: float | None) -> list[Any]:
    """Collect every rank's result; on the first failure, gather others briefly, then raise."""
    deadline = None if join_timeout is None else time.monotonic() + join_timeout
    results: dict[int, Any] = {}
    failures: list[_Failure] = []
    failed_at: float | None = None
    open_conns = dict(enumerate(conns))
    running = dict(enumerate(procs))
    all_done_at: float | None = None
    while running:
        now = time.monotonic()
        if all_done_at is None and len(results) == len(procs):
            all_done_at = now  # every result is in: a rank stuck in teardown is not waited on
        ends = (
            deadline,
            failed_at and failed_at + FAILURE_GRACE_S,
            all_done_at and all_done_at + EXIT_GRACE_S,
        )
        limits = [t - now for t in ends if t]
        if limits and min(limits) <= 0:
            break
        handles = [*open_conns.values(), *(p.sentinel for p in running.values())]
        wait(handles, timeout=min(limits) if limits else None)
        for rank, conn in list(open_conns.items()):
            if conn.poll():  # a result, an error, or EOF from a dead child
                del open_conns[rank]
                _receive(rank, conn, results, failures)
        for rank, proc in list(running.items()):
            if proc.is_alive():
                continue
            proc.join()
            del running[rank]
            conn = open_conns.pop(rank, None)
            if conn is not None and conn.poll():
                _receive(rank, conn, results, failures)
            if rank not in results and all(f.rank != rank for f in failures):
                failures.append(
                    _Failure(
                        priority=0,
                        when=time.time(),
                        rank=rank,
                        message=f"{describe_exit(proc.exitcode)} without returning a result",
                        exitcode=proc.exitcode,
                    )
                )
        if failures and failed_at is None:
            failed_at = time.monotonic()
    if failures:
        first, *others = sorted(failures)
        error = first.error(others)
        if first.cause is not None:
            raise error from first.cause
        raise error
    if running and len(results) == len(procs):
        log.warning(
            "ranks %s returned but did not exit within %s s; killing them",
            sorted(running),
            EXIT_GRACE_S,
        )
    elif running:
        raise TimeoutError(
            f"launch_local: ranks {sorted(running)} still running after {join_timeout} s"
        )
    return [results[rank] for rank in range(len(procs))]


def _receive(
    rank: int, conn: Connection, results: dict[int, Any], failures: list[_Failure]
) -> None:
    outcome = ChildOutcome.receive(conn)
    if outcome is None:
        return  # the child died before sending: its sentinel reports the exit
    if outcome.ok:
        results[rank] = outcome.value
        return
    failures.append(
        _Failure(
            priority=1,
            when=outcome.when,
            rank=rank,
            message=f"raised {outcome.summary}",
            child_traceback=outcome.traceback,
            cause=outcome.exception(),
        )
    )
