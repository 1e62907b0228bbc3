"""Phase 3's collector processes and the bounded queue they feed (one pool per DDP rank).

Each collector is a spawned process running ``tj_rl.RolloutCollector`` (one SUMO env, the policy on
the CPU with one thread; no Ray, no CUDA) and sending ``Fragment``s through its own pipe: a
collector killed mid-send breaks only its own pipe, never a shared queue. A pump thread in the
rank moves fragments into a ``tj_data.LiveQueue`` bounded in bytes; when the queue is full the pump
blocks, the pipes fill and the collectors block in ``send`` (back-pressure, not memory). A
collector that dies is replaced (a new incarnation with its own seeds) and counted, unless it died
``max_early_deaths`` times in a row before sending anything (it cannot start: a bad env or agent),
which fails the pool; the rank reads through ``SampleStream``, which raises, naming the
collectors, when the pool failed or no sample came for ``timeout_s``, instead of waiting forever.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

from tj_data import LiveQueue, QueueClosed
from tj_monitor import describe_exit, stop_tree

if TYPE_CHECKING:
    from tj_rl.control.dz_guard import DzGuardConfig

__all__ = ["CollectorPool", "CollectorSpec", "CollectorsStalled", "SampleStream"]

log = logging.getLogger(__name__)


class CollectorsStalled(RuntimeError):
    """No rollout sample arrived for the configured timeout."""


@dataclass(frozen=True, kw_only=True)
class CollectorSpec:
    """What every collector of a pool runs (picklable: collectors are spawned)."""

    env_config: Mapping[str, Any]
    agent_dir: str
    weights: str
    fragment_steps: int
    gamma: float
    lam: float
    seed: int
    cost_scale: float = 1.0
    shield_threshold: float | None = None
    dz_guard: DzGuardConfig | None = None  # the lights act behind it (phase3.guard)
    threads: int = 1
    log_level: int = logging.WARNING


def collector_main(spec: CollectorSpec, index: int, incarnation: int, conn: Connection,
                   parent: int) -> None:  # fmt: skip
    """A collector process: fragments into ``conn`` until the pipe closes or it is stopped."""
    from tj_monitor import die_with_parent

    die_with_parent(parent)
    # SIGTERM (the pool's close, or the rank dying) ends the loop through ``finally``: the env
    # closes SUMO and removes its episode folder
    stopping = exit_on_sigterm()
    logging.basicConfig(level=spec.log_level)
    import torch

    from tj_rl.rollout.collector import RolloutCollector

    torch.set_num_threads(spec.threads)
    seed = spec.seed * 1_000_003 + index * 1009 + incarnation
    collector = RolloutCollector(spec.env_config, spec.agent_dir, weights=spec.weights, seed=seed,
                                 fragment_steps=spec.fragment_steps, gamma=spec.gamma,
                                 lam=spec.lam, cost_scale=spec.cost_scale,
                                 shield_threshold=spec.shield_threshold,
                                 dz_guard=spec.dz_guard)  # fmt: skip
    try:
        send_fragments(collector.fragments(), conn, stopping)
    finally:
        collector.close()


def exit_on_sigterm() -> Callable[[], bool]:
    """Make SIGTERM raise ``SystemExit(0)`` in this process; returns whether it has come."""
    came = threading.Event()

    def _exit(*_: object) -> None:
        came.set()
        sys.exit(0)

    signal.signal(signal.SIGTERM, _exit)
    return came.is_set


def send_fragments(fragments: Iterator[Any], conn: Connection,
                   stopping: Callable[[], bool]) -> None:  # fmt: skip
    """Send each fragment until the rank closes its end. An error raised once ``stopping()`` is
    the stop itself: a C extension that SIGTERM interrupts turns the handler's ``SystemExit`` into
    its own error (safetensors' ``get_tensor`` reading the last published weights raises
    ``ValueError: could not determine the shape ...``), which is no failure to report."""
    try:
        for fragment in fragments:
            conn.send(fragment)
    except (BrokenPipeError, EOFError, ConnectionResetError):
        pass  # the rank is done with us
    except Exception:
        if not stopping():
            raise


@dataclass(kw_only=True)
class _Slot:
    index: int
    incarnation: int
    proc: Any
    conn: Connection
    fragments: int = 0  # received from this incarnation
    early_deaths: int = 0  # deaths in a row of this slot's incarnations before any fragment


@dataclass(kw_only=True)
class PoolStats:
    """Counters of a pool (read by the rank for its metrics)."""

    fragments: int = 0
    samples: int = 0
    restarts: int = 0
    queue_peak: int = 0  # the most bytes the queue held after a put
    deaths: list[str] = field(default_factory=list)


class CollectorPool:
    """``n`` collector processes feeding ``queue``; ``start()``, ``episodes()``, ``close()``.

    ``max_early_deaths``: deaths in a row of one collector before its first fragment that fail
    the pool (``error``) instead of starting it again."""

    def __init__(self, spec: CollectorSpec, n: int, queue: LiveQueue, *, name: str = "rank0",
                 target: Callable[..., None] = collector_main,
                 max_early_deaths: int = 3) -> None:  # fmt: skip
        if n < 1:
            raise ValueError(f"CollectorPool: n={n}, expected >= 1")
        if max_early_deaths < 1:
            raise ValueError(f"CollectorPool: max_early_deaths={max_early_deaths}, expected >= 1")
        self.spec, self.n, self.queue, self.name, self.target = spec, n, queue, name, target
        self.max_early_deaths = max_early_deaths
        self.stats = PoolStats()
        self._ctx = mp.get_context("spawn")
        self._slots: list[_Slot] = []
        self._episodes: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    # ------------------------------------------------------------------ lifecycle
    def _spawn(self, index: int, incarnation: int) -> _Slot:
        reader, writer = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(target=self.target, name=f"tj-collector-{self.name}-{index}",
                                 args=(self.spec, index, incarnation, writer, os.getpid()),
                                 daemon=True)  # fmt: skip
        proc.start()
        writer.close()
        return _Slot(index=index, incarnation=incarnation, proc=proc, conn=reader)

    def start(self) -> CollectorPool:
        self._slots = [self._spawn(i, 0) for i in range(self.n)]
        self._thread = threading.Thread(target=self._pump, name=f"collector-pump-{self.name}",
                                        daemon=True)  # fmt: skip
        self._thread.start()
        log.info("%s: %d collector(s) started (pids %s)", self.name, self.n, self.pids())
        return self

    def pids(self) -> list[int]:
        return [s.proc.pid for s in self._slots]

    def describe(self) -> str:
        alive = sum(s.proc.is_alive() for s in self._slots)
        return (f"{self.name}: {alive}/{self.n} collector(s) alive (pids {self.pids()}), "
                f"{self.stats.restarts} restart(s), {self.stats.fragments} fragment(s) so far")  # fmt: skip

    def close(self) -> None:
        """Stop the pump, then every collector (with its SUMO); idempotent. The pump stops first:
        it neither reads a pipe being closed nor starts a collector that nobody would stop."""
        self._stop.set()
        self.queue.close()
        if self._thread is not None:
            self._thread.join(timeout=10)  # a wait or a put returns within 0.5 s
        for slot in self._slots:
            with contextlib.suppress(OSError):
                slot.conn.close()
        stop_tree([s.proc for s in self._slots], grace_s=3.0)  # with their SUMOs, reaped
        if self._thread is not None:
            self._thread.join(timeout=10)  # one stuck in recv sees EOF now

    def __enter__(self) -> CollectorPool:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ data
    def episodes(self) -> list[dict[str, Any]]:
        """The episode summaries that arrived since the last call."""
        with self._lock:
            out, self._episodes = self._episodes, []
        return out

    def _replace(self, i: int, why: str) -> bool:
        """Record the death of slot ``i``'s collector and start its next incarnation in that slot
        (False when the pool is closing); raise after ``max_early_deaths`` deaths in a row before
        any fragment. ``stats.restarts`` counts a replacement once it is in its slot."""
        slot = self._slots[i]
        with contextlib.suppress(OSError):
            slot.conn.close()
        slot.proc.join(timeout=2.0)  # its pipe closes while it exits: let it report its own code
        stop_tree([slot.proc], grace_s=3.0)
        code = slot.proc.exitcode
        death = f"collector {slot.index} (pid {slot.proc.pid} {describe_exit(code)}; {why})"
        self.stats.deaths.append(death)
        if self._stop.is_set():
            return False
        early = slot.early_deaths + 1 if slot.fragments == 0 else 0
        if early >= self.max_early_deaths:
            raise RuntimeError(f"collector {slot.index} died {early} times in a row before its "
                               f"first fragment; last: {death}")  # fmt: skip
        log.warning("%s: collector %d (pid %s) %s (%s); starting a new one", self.name,
                    slot.index, slot.proc.pid, describe_exit(code), why)  # fmt: skip
        new = self._spawn(slot.index, slot.incarnation + 1)
        new.early_deaths = early
        self._slots[i] = new
        self.stats.restarts += 1
        return True

    def _put(self, sample: Mapping[str, Any]) -> bool:
        while not self._stop.is_set():
            try:
                self.queue.put(sample, timeout=0.5)
                return True
            except TimeoutError:
                continue
            except QueueClosed:
                return False
        return False

    def _pump(self) -> None:
        try:
            while not self._stop.is_set():
                by_conn = {s.conn: i for i, s in enumerate(self._slots)}
                for conn in wait(list(by_conn), timeout=0.5):
                    i = by_conn[conn]  # type: ignore[index]
                    try:
                        fragment = conn.recv()  # type: ignore[union-attr]
                    except (EOFError, OSError, ValueError) as exc:  # died (maybe mid-send)
                        if self._stop.is_set():
                            return
                        if not self._replace(i, type(exc).__name__):
                            return
                        continue
                    with self._lock:
                        self._episodes.extend(fragment.episodes)
                    self.stats.fragments += 1
                    self._slots[i].fragments += 1
                    for sample in fragment.samples:
                        if not self._put(sample):
                            return
                        self.stats.samples += 1
                        self.stats.queue_peak = max(self.stats.queue_peak, self.queue.nbytes)
                for i, slot in enumerate(self._slots):  # died without closing the pipe (yet)
                    # a readable pipe is read first: its last fragments, then EOF, replace it
                    dead = not slot.proc.is_alive() and not slot.conn.poll()
                    if dead and not self._stop.is_set() and not self._replace(i, "not alive"):
                        return
        except BaseException as exc:  # reported to the reader (SampleStream)
            self._error = exc
            log.exception("%s: the collector pump failed", self.name)

    @property
    def error(self) -> BaseException | None:
        return self._error


class SampleStream:
    """An iterable over the pool's queue that raises ``CollectorsStalled`` after ``timeout_s``
    without a sample (``clock`` and the poll interval are injectable for tests)."""

    def __init__(self, pool: CollectorPool, timeout_s: float, *,
                 clock: Callable[[], float] = time.monotonic, poll_s: float = 1.0) -> None:  # fmt: skip
        self.pool, self.timeout_s, self.clock, self.poll_s = pool, timeout_s, clock, poll_s

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        last = self.clock()
        while True:
            try:
                sample = self.pool.queue.get(timeout=self.poll_s)
            except TimeoutError:
                if self.pool.error is not None:
                    raise CollectorsStalled(f"{self.pool.describe()}: the pump failed: "
                                            f"{self.pool.error!r}") from self.pool.error  # fmt: skip
                if self.clock() - last > self.timeout_s:
                    raise CollectorsStalled(
                        f"no rollout sample for {self.timeout_s:.0f} s; {self.pool.describe()}; "
                        f"deaths: {self.pool.stats.deaths[-3:] or 'none'}") from None
                continue
            if sample is None:
                return
            last = self.clock()
            yield sample
