"""A small real process tree to measure: root -> worker, both plain Python (no torch).

The tests' own process imports torch, whose shared-library pages are shared with every other
process on the machine that maps the same files, so its PSS moves when unrelated processes start
or stop. Measuring a tree of lean processes keeps PSS deltas exact to a few MiB.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

# The worker inherits the root's stdin/stdout, so the test talks to it directly.
ROOT = "import subprocess, sys; w = subprocess.Popen([sys.executable, '-c', sys.argv[1]]); w.wait(); print('worker-exited', flush=True); sys.stdin.read()"
WORKER = """
import sys
held = {}
print("ready", flush=True)
for line in sys.stdin:
    cmd, *args = line.split()
    if cmd == "alloc":  # bytes * n: allocated and written, every page resident
        held[args[0]] = b"x" * (int(args[1]) * 2**20)
    elif cmd == "free":
        held.pop(args[0], None)
    elif cmd == "exit":
        break
    print("ok", flush=True)
"""


class WorkerTree:
    """``root`` (a waiting parent) and its worker; ``send("alloc a 100")`` waits for the reply."""

    def __init__(self) -> None:
        self.root = subprocess.Popen(
            [sys.executable, "-c", ROOT, WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.read() == "ready"

    def read(self) -> str:
        assert self.root.stdout is not None
        return self.root.stdout.readline().strip()

    def send(self, command: str) -> str:
        assert self.root.stdin is not None
        self.root.stdin.write(command + "\n")
        self.root.stdin.flush()
        return self.read()

    def close(self) -> None:
        self.root.kill()
        self.root.wait()


@pytest.fixture
def worker_tree() -> Iterator[WorkerTree]:
    tree = WorkerTree()
    try:
        yield tree
    finally:
        tree.close()
