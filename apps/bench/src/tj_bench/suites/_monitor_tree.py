"""A realistic process tree for the monitor suite: this process plus worker-like children.

Each child holds ``child_mib`` MiB written with ``bytes * n`` (malloc'd 4 KiB pages like a
trainer's heap: numpy would madvise huge pages, which smaps_rollup walks 512x faster and would
flatter the monitor) and waits on stdin, like an idle DataLoader worker.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["CHILD", "held_heap", "worker_children"]

CHILD = "import sys; a = b'x' * ({n} * 2**20); print('ok', flush=True); sys.stdin.read()"


def held_heap(mib: int) -> bytes:
    """``mib`` MiB of written heap in 4 KiB pages (keep the reference while measuring)."""
    return b"x" * (mib * 2**20)


@contextmanager
def worker_children(count: int, mib: int) -> Iterator[list[subprocess.Popen[str]]]:
    """Start ``count`` children holding ``mib`` MiB each; yield once all of them hold it."""
    procs: list[subprocess.Popen[str]] = []
    try:
        for _ in range(count):
            procs.append(subprocess.Popen([sys.executable, "-c", CHILD.format(n=mib)],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))  # fmt: skip
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            if line != "ok":
                raise RuntimeError(f"monitor worker child {proc.pid} did not start ({line!r})")
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
