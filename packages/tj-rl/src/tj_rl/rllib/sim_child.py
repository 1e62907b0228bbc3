"""A ``TrafficSignalCore`` in a child process of its own: ``SimChild`` (the parent's handle) and the
child's loop (``python -m tj_rl.rllib.sim_child FD PARENT_PID``).

libsumo runs one simulation per process, so an env runner that steps several simulations (RLlib's
``num_envs_per_env_runner``, batched into one module forward) runs each in a child. The parent
sends a command and reads its reply later (``send`` / ``receive``): it can send to every child
before reading any, so the simulations advance at the same time (``vector.py``). The child imports
tj-rl's env room only, never Ray or torch (75 MiB PSS with the numpy kernel, 176 with numba;
an env runner: ~700).

Protocol: the env config first, then one pickled ``(command, argument)`` per message and one
``tj_monitor.ChildOutcome`` back for each (the env's return value, or its exception, raised again
in the parent as itself). The child is started with ``subprocess`` (no ``multiprocessing``
``__main__`` re-import inside a Ray worker), asks for SIGKILL when its parent dies and ends on EOF.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from multiprocessing.connection import Connection
from typing import Any

from tj_monitor import ChildFailed, ChildOutcome, describe_exit, die_with_parent, stop_processes

__all__ = ["SimChild", "SimChildDied"]

_CLOSE_WAIT_S = 10.0  # a closing child ends its SUMO episode first


class SimChildDied(ChildFailed):
    """The child ended without replying (killed, crashed): its env state is gone."""


class SimChild:
    """One child process running ``TrafficSignalCore(config)``; ``spaces`` is its
    ``(possible_agents, observation_spaces, action_spaces)``. ``config``: the env's plain mapping
    (``EnvConfig`` fields plus ``scenario``), pickled to the child."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        mine, theirs = socket.socketpair()
        with theirs:
            fd = theirs.fileno()
            cmd = [sys.executable, "-m", "tj_rl.rllib.sim_child", str(fd), str(os.getpid())]
            self.proc = subprocess.Popen(cmd, pass_fds=(fd,), stdin=subprocess.DEVNULL)
        self._conn = Connection(mine.detach())
        self._pending = 0  # commands sent, replies not read yet
        try:
            self._conn.send(dict(config))
            self._pending = 1
            self.spaces: tuple[list[str], dict, dict] = self.receive()
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, command: str, argument: Any = None) -> None:
        """Send one command (``reset`` {seed, options}, ``step`` actions, ``stream`` n) without
        waiting for its reply; ``SimChildDied`` when the child is gone."""
        try:
            self._conn.send((command, argument))
        except OSError as exc:  # BrokenPipe / ConnectionReset: the child is gone
            raise self._died(f"{command}: {exc}") from exc
        self._pending += 1

    def receive(self) -> Any:
        """The reply to the oldest command not read yet: its value, or its exception raised here
        as itself (``ChildFailed`` with the child's traceback when it cannot come back);
        ``SimChildDied`` when the child ended without replying."""
        if self._pending < 1:
            raise RuntimeError("SimChild.receive: no command is waiting for its reply")
        try:
            outcome = ChildOutcome.receive(self._conn)
        except OSError:
            outcome = None
        self._pending -= 1
        if outcome is None:
            raise self._died("no reply")
        if outcome.ok:
            return outcome.value
        exc = outcome.exception() or ChildFailed(f"simulation child failed: {outcome.summary}",
                                                 child_traceback=outcome.traceback)  # fmt: skip
        exc.add_note(f"--- in the simulation child (pid {self.pid}) ---\n"
                     f"{outcome.traceback.rstrip()}")  # fmt: skip
        raise exc

    def call(self, command: str, argument: Any = None) -> Any:
        self.send(command, argument)
        return self.receive()

    def close(self) -> None:
        """Ask the child to close its env and end, then stop and reap it (idempotent)."""
        if self._conn.closed:
            return
        with contextlib.suppress(OSError):
            self._conn.send(("close", None))
        self._conn.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=_CLOSE_WAIT_S)
        stop_processes([self.proc], 5.0)

    def _died(self, what: str) -> SimChildDied:
        self._conn.close()
        stop_processes([self.proc], 5.0)  # reaped: its exit status is known
        return SimChildDied(f"simulation child (pid {self.proc.pid}) "
                            f"{describe_exit(self.proc.returncode)} ({what})",
                            exitcode=self.proc.returncode)  # fmt: skip


def _serve(conn: Connection) -> None:
    """The child's loop: build the env from the first message, answer commands until ``close``
    or EOF, close the env."""
    from tj_rl.env.core import TrafficSignalCore

    config = conn.recv()
    env: TrafficSignalCore | None = None

    def build() -> tuple[list[str], dict, dict]:
        nonlocal env
        if env is not None:
            env.close()
        env = TrafficSignalCore(config)
        return list(env.possible_agents), env.observation_spaces, env.action_spaces

    def stream(n: int) -> None:  # a route stream of its own: rebuilt before its first episode
        config["route_stream"] = int(n)
        build()

    handlers = {
        "reset": lambda arg: env.reset(**arg),
        "step": lambda arg: env.step(arg),
        "stream": stream,
    }
    conn.send(ChildOutcome.capture(build))
    try:
        while True:
            try:
                command, argument = conn.recv()
            except EOFError:
                return
            if command == "close":
                return
            conn.send(ChildOutcome.capture(handlers[command], argument))
    finally:
        if env is not None:
            env.close()


def main(argv: list[str]) -> None:
    fd, parent = int(argv[0]), int(argv[1])
    die_with_parent(parent, signal.SIGKILL)  # libsumo runs in here: nothing else to clean up
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the parent's to handle
    with Connection(fd) as conn:
        _serve(conn)


if __name__ == "__main__":
    main(sys.argv[1:])
