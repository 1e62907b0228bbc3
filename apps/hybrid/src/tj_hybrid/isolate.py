"""Run a phase's heavy part in a spawned child process, so that what it loads (Ray, RLlib, torch
modules, a learner) is given back to the OS when it ends: the trainer's process tree returns to
its memory level of before the phase (a Python process never shrinks after such imports).

The child gets the parent's Ctrl-C with the process group; a SIGTERM sent to the parent only is
forwarded to it (as SIGINT) by ``run_isolated``'s cleanup, and the child is killed after
``grace_s`` if it has not stopped by then. The child gets SIGTERM when its parent dies
(``tj_dist.die_with_parent``: ``PR_SET_PDEATHSIG`` on Linux) and stops like on Ctrl-C, so a killed
trainer leaves no orphan that keeps a Ray cluster alive. An exception raised in
the child is re-raised in the parent (as itself when it pickles, else as ``ChildFailed``).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import signal
import traceback
from collections.abc import Callable
from typing import Any

__all__ = ["ChildFailed", "run_isolated"]

log = logging.getLogger(__name__)


class ChildFailed(RuntimeError):
    """The child process died or raised something that could not be sent back."""


def _child(conn: Any, fn: Callable[..., Any], args: tuple[Any, ...], parent: int) -> None:
    from tj_dist import die_with_parent

    die_with_parent(parent)  # SIGTERM: RunInterrupted here, so Ray is shut down, not orphaned
    from tj_hybrid.interrupt import RunInterrupted, stop_on_signals
    from tj_hybrid.log_setup import setup_logging

    setup_logging()
    try:
        with stop_on_signals():
            result = fn(*args)
        conn.send(("ok", result))
    except RunInterrupted as exc:
        conn.send(("interrupted", exc.signum))
    except BaseException as exc:  # everything goes back to the parent
        text = "".join(traceback.format_exception(exc))
        try:
            conn.send(("error", exc, text))
        except Exception:  # an exception that does not pickle
            conn.send(("error", None, text))
    finally:
        conn.close()


def _stop(proc: Any, grace_s: float) -> None:
    """SIGINT (harmless when Ctrl-C already reached it), then SIGKILL after ``grace_s``."""
    if proc.is_alive():
        log.info("stopping the %s child process", proc.name)
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGINT)
        proc.join(timeout=grace_s)
    if proc.is_alive():
        log.warning("%s did not stop within %.0f s: killed", proc.name, grace_s)
        proc.kill()
    proc.join()


def run_isolated(fn: Callable[..., Any], *args: Any, grace_s: float = 60.0) -> Any:
    """``fn(*args)`` in a spawned child; its return value (picklable) or its exception.
    ``fn`` must be importable (a module-level function)."""
    from tj_hybrid.interrupt import RunInterrupted

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, fn, args, os.getpid()), name=f"tj-{fn.__name__}")
    proc.start()
    child.close()
    try:
        message = parent.recv()
    except EOFError:
        proc.join()
        raise ChildFailed(
            f"{fn.__name__} died in its child process (exit code {proc.exitcode})"
        ) from None
    except BaseException:  # RunInterrupted in the parent (SIGTERM, Ctrl-C): stop the child too
        _stop(proc, grace_s)
        raise
    finally:
        parent.close()
    proc.join()
    kind = message[0]
    if kind == "ok":
        return message[1]
    if kind == "interrupted":
        raise RunInterrupted(message[1])
    if message[1] is not None:
        raise message[1]
    raise ChildFailed(f"{fn.__name__} failed in its child process:\n{message[2]}")
