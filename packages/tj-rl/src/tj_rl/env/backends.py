"""SUMO backends: ``libsumo`` (in-process, default) and ``traci`` (subprocess + socket).

Both expose the same TraCI domain API through ``backend.conn`` (the ``libsumo`` module or a
``traci.Connection``), so the env never branches on the backend.

libsumo runs at most one simulation per process. A second ``start`` while another simulation is
loaded would make libsumo silently reload; ``LibsumoBackend`` refuses it with ``LibsumoBusyError``.
The guard needs no state of ours: it asks libsumo itself (``libsumo.isLoaded()``) and remembers
only which backend object started the running simulation.

traci runs SUMO as a child process on a free port chosen by traci, under a unique connection label
per backend; SUMO's stderr goes to a file that is included in the error when SUMO refuses a scenario.
``close`` is idempotent, waits for the child (no zombie) and kills it if it does not exit.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import logging
import os
import signal
import subprocess
import sys
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from tj_monitor import parent_death_hook, stop_processes
from tj_rl.env.errors import LibsumoBusyError, SumoDiedError, SumoStartError
from tj_rl.env.runtime import child_env, sumo_binary

__all__ = ["BackendName", "LibsumoBackend", "SumoBackend", "TraciBackend", "make_backend"]

log = logging.getLogger(__name__)

BackendName = Literal["libsumo", "traci"]

# Options every run gets: no per-step console output or warnings (teleports etc. are counted in
# the metrics instead), no XML schema validation (speed). Errors are still reported.
BASE_ARGS: tuple[str, ...] = (
    "--no-step-log",
    "true",
    "--duration-log.disable",
    "true",
    "--xml-validation",
    "never",
    "--no-warnings",
    "true",
)


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-limit:].strip()


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Send this process's fd 2 (where in-process SUMO writes its errors) to ``path`` for a while."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as f:
            os.dup2(f.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


class SumoBackend(ABC):
    """One SUMO simulation at a time; ``conn`` is the TraCI domain API while running."""

    name: str

    def __init__(self) -> None:
        self.conn: Any = None
        self.stderr_path: Path | None = None

    def stderr_tail(self) -> str:
        """The end of SUMO's captured error output of the current / last start."""
        return _tail(self.stderr_path) if self.stderr_path is not None else ""

    @property
    def running(self) -> bool:
        return self.conn is not None

    @property
    def fatal_errors(self) -> tuple[type[BaseException], ...]:
        """Exceptions that mean the simulation is gone or unusable."""
        return (OSError,)

    @abstractmethod
    def start(self, args: list[str], *, workdir: Path) -> None: ...

    @abstractmethod
    def close(self) -> None: ...

    def pid(self) -> int | None:
        """PID of the SUMO process (the env's own process for libsumo)."""
        return os.getpid()

    def step_to(self, t: float) -> None:
        try:
            self.conn.simulationStep(t)
        except self.fatal_errors as exc:
            raise SumoDiedError(f"{self.name}: simulationStep({t:g}) failed: {exc}") from exc


class LibsumoBackend(SumoBackend):
    """In-process SUMO (fast: no socket). Exactly one simulation per process."""

    name = "libsumo"

    def __init__(self) -> None:
        super().__init__()
        try:
            import libsumo
        except ImportError as exc:  # loud, never a silent fallback to traci
            raise ImportError(
                "backend='libsumo' needs the libsumo wheel (libsumo==1.28.*), which failed to "
                f"import: {exc}. Install it, or choose backend='traci' explicitly."
            ) from exc
        self._lib = libsumo

    @property
    def fatal_errors(self) -> tuple[type[BaseException], ...]:
        return (self._lib.TraCIException, self._lib.FatalTraCIError, OSError)

    def start(self, args: list[str], *, workdir: Path) -> None:
        if self.running:
            raise LibsumoBusyError("this backend already runs a simulation; close() it first")
        if self._lib.isLoaded():
            raise LibsumoBusyError(
                f"libsumo already runs a simulation in this process (pid {os.getpid()}); libsumo "
                "allows one per process. Close the other env first, run each env in its own "
                "process, or use backend='traci'."
            )
        errlog = self.stderr_path = workdir / "sumo-stderr.log"
        cmd = [sumo_binary("sumo"), *BASE_ARGS, *args]
        try:
            with _stderr_to(errlog):
                self._lib.start(cmd)
        except (self._lib.TraCIException, self._lib.FatalTraCIError) as exc:
            with contextlib.suppress(Exception):
                self._lib.close()
            raise SumoStartError(
                f"SUMO (libsumo) refused the scenario: {exc}\nSUMO stderr:\n{_tail(errlog)}"
            ) from exc
        self.conn = self._lib

    def close(self) -> None:
        if self.conn is None:
            return
        self.conn = None
        with contextlib.suppress(Exception):
            if self._lib.isLoaded():
                self._lib.close()


class TraciBackend(SumoBackend):
    """SUMO as a child process over TraCI; a unique connection label per backend and start."""

    name = "traci"
    _labels = itertools.count()  # process-wide counter only feeds unique labels

    def __init__(self, *, connect_retries: int = 200, close_grace: float = 30.0,
                 gui_delay_ms: float | None = None) -> None:  # fmt: skip
        super().__init__()
        import traci

        self._traci = traci
        self._proc: subprocess.Popen[bytes] | None = None
        self._label = ""
        self.connect_retries = connect_retries
        self.close_grace = close_grace  # s SUMO may take to flush its outputs after close
        # sumo-gui instead of sumo: running at once, delay_ms per step, closing at the end
        self.gui_delay_ms = gui_delay_ms

    def _command(self, args: list[str], port: int) -> list[str]:
        if self.gui_delay_ms is None:
            return [sumo_binary("sumo"), *BASE_ARGS, *args, "--remote-port", str(port)]
        return [sumo_binary("sumo-gui"), *BASE_ARGS, *args, "--start", "true", "--quit-on-end",
                "true", "--delay", f"{self.gui_delay_ms:g}", "--remote-port", str(port)]  # fmt: skip

    @property
    def fatal_errors(self) -> tuple[type[BaseException], ...]:
        ex = self._traci.exceptions
        return (ex.FatalTraCIError, ex.TraCIException, OSError)

    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self, args: list[str], *, workdir: Path) -> None:
        if self.running:
            raise SumoStartError("this traci backend already runs a simulation; close() it first")
        errlog = self.stderr_path = workdir / "sumo-stderr.log"
        for _attempt in range(3):  # a port taken between choosing and binding: pick another
            port = self._traci.getFreeSocketPort()
            label = f"tj-rl-{os.getpid()}-{id(self):x}-{next(self._labels)}"
            cmd = self._command(args, port)
            with open(errlog, "wb") as err:
                # SIGKILL when this process dies: a trainer killed mid-episode (or a fork still
                # holding the socket) must not leave SUMO waiting for its client forever
                proc = subprocess.Popen(
                    cmd, stdout=subprocess.DEVNULL, stderr=err, env=child_env(), cwd=workdir,
                    preexec_fn=parent_death_hook(signal.SIGKILL),
                )  # fmt: skip
            try:
                with contextlib.redirect_stdout(io.StringIO()):  # traci prints its retries
                    conn = self._traci.connect(
                        port,
                        numRetries=self.connect_retries,
                        proc=proc,
                        waitBetweenRetries=0.05,
                        label=label,
                    )
            except (
                self._traci.exceptions.TraCIException,
                self._traci.exceptions.FatalTraCIError,
            ) as exc:
                self._reap(proc)
                stderr = _tail(errlog)
                if "bind" in stderr.lower() or "address already in use" in stderr.lower():
                    continue
                raise SumoStartError(
                    f"SUMO (traci) refused the scenario ({exc}); exit code {proc.returncode}.\n"
                    f"SUMO stderr:\n{stderr}"
                ) from exc
            self._proc, self._label, self.conn = proc, label, conn
            return
        raise SumoStartError(f"SUMO (traci) could not bind a free port; stderr:\n{_tail(errlog)}")

    @staticmethod
    def _reap(proc: subprocess.Popen[bytes], timeout: float = 10.0, grace: float = 0.0) -> None:
        """Wait up to ``grace`` s for SUMO to exit by itself, then terminate (kill after
        ``timeout`` s) and reap it."""
        if grace > 0:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace)
        stop_processes([proc], timeout)

    def close(self) -> None:
        conn, proc = self.conn, self._proc
        self.conn, self._proc = None, None
        closed = False
        if conn is not None:
            try:
                conn.close(wait=False)
                closed = True
            except Exception:  # SUMO already gone: drop the socket so traci forgets the label
                with contextlib.suppress(Exception):
                    if conn._socket is not None:
                        conn._socket.close()
                    conn._socket = None
                    conn.close(wait=False)
        if proc is not None:
            # after a clean close SUMO still writes and closes its outputs (tripinfo, statistics):
            # terminating it at once truncated them on a loaded machine
            self._reap(proc, grace=self.close_grace if closed else 0.0)


def make_backend(name: BackendName, *, gui_delay_ms: float | None = None) -> SumoBackend:
    """``"libsumo"`` (default of the env) or ``"traci"`` (with ``gui_delay_ms``: in sumo-gui)."""
    if gui_delay_ms is not None and name != "traci":
        raise ValueError(f"backend {name!r}: sumo-gui runs over traci only")
    if name == "libsumo":
        return LibsumoBackend()
    if name == "traci":
        return TraciBackend(gui_delay_ms=gui_delay_ms)
    raise ValueError(f"backend: {name!r}, expected 'libsumo' or 'traci'")
