"""Run a phase's heavy part in a spawned child process, so that what it loads (Ray, RLlib, torch
modules, a learner) is given back to the OS when it ends: the trainer's process tree returns to
its memory level of before the phase (a Python process never shrinks after such imports).

A thin layer over ``tj_monitor.run_in_child`` (results, exceptions re-raised as themselves or
``ChildFailed``, the parent-death signal, no zombies), adding the trainer's own: the child sets up
the trainer's logging and turns Ctrl-C / SIGTERM into ``RunInterrupted`` (so Ray is shut down,
not orphaned), which comes back to the parent as ``RunInterrupted``. The child gets the parent's
Ctrl-C with the process group; when the parent alone is stopped (a scheduler's SIGTERM) the child
gets SIGINT and ``grace_s`` to stop, then SIGKILL; when the parent dies, the child gets SIGTERM.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tj_monitor import ChildFailed, run_in_child

__all__ = ["ChildFailed", "run_isolated"]


@dataclass(frozen=True)
class _Interrupted:
    """The child was stopped by ``signum`` (``RunInterrupted`` itself does not pickle back)."""

    signum: int


def _in_child(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    from tj_hybrid.interrupt import RunInterrupted, stop_on_signals
    from tj_hybrid.log_setup import setup_logging

    setup_logging()
    try:
        with stop_on_signals():
            return fn(*args)
    except RunInterrupted as exc:
        return _Interrupted(exc.signum)


def run_isolated(fn: Callable[..., Any], *args: Any, grace_s: float = 60.0,
                 hash_seed: int | None = None) -> Any:  # fmt: skip
    """``fn(*args)`` in a spawned child; its return value (picklable) or its exception.
    ``fn`` must be importable (a module-level function). ``hash_seed``: the child's (and so the
    processes it starts': Ray's raylet and workers) ``PYTHONHASHSEED``, so that a seeded run
    repeats the order of its sets (e.g. agent ids in RLlib's episodes)."""
    from tj_hybrid.interrupt import RunInterrupted

    env = {"PYTHONHASHSEED": str(hash_seed)} if hash_seed is not None else None
    result = run_in_child(_in_child, fn, args, name=f"tj-{fn.__name__}", grace_s=grace_s,
                          stop_signal=signal.SIGINT, env=env)  # fmt: skip
    if isinstance(result, _Interrupted):
        raise RunInterrupted(result.signum)
    return result
