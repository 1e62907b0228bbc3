"""The parent-death signal: a child process that must not outlive the process that started it
(a rank, an isolated phase, a SUMO) asks the kernel for a signal when that parent dies, even by
SIGKILL, when no ``finally`` of the parent runs. Linux ``prctl(PR_SET_PDEATHSIG)``; elsewhere
nothing is asked (the parent's own cleanup is all there is).

Linux sends it when the *thread* that started the child ends: start a long-lived child from a
thread that lives as long as it should (the main thread, an actor's worker thread).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

__all__ = ["die_with_parent", "parent_death_hook"]

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _pdeathsig_setter() -> Callable[[int], None] | None:
    """A function setting this process's parent-death signal; None off Linux. Resolved before a
    fork: after one, only the call runs (no dlopen in a child forked by a threaded parent)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def set_pdeathsig(sig: int) -> None:
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)

    return set_pdeathsig


def parent_death_hook(
    sig: int = signal.SIGTERM, *, parent: int | None = None
) -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets ``sig`` when ``parent`` (default:
    this process, which makes the hook and calls Popen) dies, and exits at once if it is already
    gone. ``None`` off Linux, so ``Popen(..., preexec_fn=parent_death_hook())`` works everywhere."""
    setter = _pdeathsig_setter()
    if setter is None:
        return None
    expected = os.getpid() if parent is None else parent

    def hook() -> None:
        setter(sig)
        if os.getppid() != expected:  # the parent died before the signal was armed
            os._exit(1)

    return hook


def die_with_parent(parent: int, sig: int = signal.SIGTERM) -> None:
    """``sig`` to this process when its parent ``parent`` dies (Linux; even by SIGKILL), so no
    rank or worker runs on as an orphan; exit at once if that parent is already gone. Call it
    first thing in a child process (``run_in_child`` and ``tj_dist.launch_local`` do)."""
    hook = parent_death_hook(sig, parent=parent)
    if hook is not None:
        hook()
    elif os.getppid() != parent:
        os._exit(1)
