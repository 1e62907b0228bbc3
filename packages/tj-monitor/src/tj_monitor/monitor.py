"""MemoryMonitor: samples a process tree, the system and the GPUs on a background thread.

It keeps a bounded history and the peaks, streams samples to JSONL when asked, and acts on two
thresholds: ``warn`` (log, user callbacks) and ``cleanup`` (user callbacks, then ``tj_monitor.cleanup``:
gc, malloc_trim, the CUDA cache and every registered shrinker). Nothing it
does may crash the host: errors in sampling, callbacks and shrinkers are logged and counted.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from tj_monitor.cleanup import Cleaner, CleanupReport, Shrinker
from tj_monitor.curves import SampleHistory, plot_rows, save_rows
from tj_monitor.gpu import NvmlReader
from tj_monitor.sample import Measure, MemorySample, format_bytes, read_sample, update_peaks
from tj_monitor.system import memory_limit
from tj_monitor.thresholds import ThresholdEvent, ThresholdGate, resolve_bytes
from tj_monitor.tree import TreeSampler

__all__ = ["MemoryMonitor", "MonitorConfig", "MonitorStats"]

logger = logging.getLogger(__name__)


@dataclass(kw_only=True)
class MonitorConfig:
    """What to watch and when to act.

    ``warn``/``cleanup``/``hysteresis``: a fraction of the effective limit (0 < x <= 1) or bytes
    (x > 1). ``measure`` picks the number compared with them: ``"tree_pss"`` (this tree only),
    ``"system"`` (memory used against the limit, other processes included) or ``"pressure"``
    (the larger of the two; default, since the OOM killer looks at the whole container).
    Every sample reads RSS and system counters (cheap); PSS/USS, which cost the kernel a walk
    over every resident page, are re-read only as often as ``max_cpu_fraction`` of one core
    allows and carried forward in between (see ``TreeSampler``).
    """

    interval_s: float = 1.0
    max_cpu_fraction: float = 0.005
    pid: int | None = None
    warn: float = 0.75
    cleanup: float = 0.875
    hysteresis: float = 0.05
    min_callback_interval_s: float = 10.0
    measure: Measure = "pressure"
    history_size: int = 4096
    jsonl_path: Path | None = None
    cuda: bool = True
    nvml: bool = True
    default_cleanup: bool = True
    cgroup_root: Path = Path("/sys/fs/cgroup")
    proc_cgroup: Path | None = None
    shm_path: Path = Path("/dev/shm")

    def __post_init__(self) -> None:
        if not self.interval_s > 0:
            raise ValueError(f"interval_s: must be > 0, got {self.interval_s!r}")
        if not 0 < self.max_cpu_fraction <= 1:
            raise ValueError(f"max_cpu_fraction: must be in (0, 1], got {self.max_cpu_fraction!r}")
        if self.measure not in get_args(Measure):
            raise ValueError(f"measure: expected one of {get_args(Measure)}, got {self.measure!r}")
        if self.history_size < 2:
            raise ValueError(f"history_size: must be >= 2, got {self.history_size!r}")
        if self.min_callback_interval_s < 0:
            raise ValueError(
                f"min_callback_interval_s: must be >= 0, got {self.min_callback_interval_s!r}"
            )
        for name in ("warn", "cleanup", "hysteresis"):
            resolve_bytes(getattr(self, name), 2**40, name=name)  # type and range check
        if self.jsonl_path is not None:
            self.jsonl_path = Path(self.jsonl_path)

    def proc_cgroup_path(self) -> Path:
        if self.proc_cgroup is not None:
            return self.proc_cgroup
        return Path(f"/proc/{self.pid or os.getpid()}/cgroup")


@dataclass(frozen=True, kw_only=True)
class MonitorStats:
    """The monitor's own cost and health: samples taken, CPU seconds of the sampling thread
    (``pss_reads``/``pss_cpu_seconds``: the full PSS reads among them)."""

    samples: int
    cpu_seconds: float
    wall_seconds: float
    errors: int
    skipped_processes: int
    warn_fired: int
    cleanup_fired: int
    pss_reads: int
    pss_cpu_seconds: float


@dataclass
class _State:
    history: SampleHistory
    peaks: dict[str, float] = field(default_factory=dict)
    peak: MemorySample | None = None
    peak_value: int = -1
    samples: int = 0
    errors: int = 0
    skipped: int = 0
    cpu: float = 0.0
    events: deque[ThresholdEvent] = field(default_factory=lambda: deque(maxlen=256))


class MemoryMonitor:
    """Samples memory every ``interval_s`` on a daemon thread; use as a context manager.

    >>> with MemoryMonitor(MonitorConfig(interval_s=0.5)) as mon:
    ...     pass
    >>> mon.peak is not None
    True
    """

    def __init__(
        self,
        config: MonitorConfig | None = None,
        *,
        on_warn: Callable[[ThresholdEvent], Any] | None = None,
        on_cleanup: Callable[[ThresholdEvent], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or MonitorConfig()
        cfg = self.config
        self._clock = clock
        self.limit = memory_limit(cgroup_root=cfg.cgroup_root, proc_cgroup=cfg.proc_cgroup_path())
        warn = resolve_bytes(cfg.warn, self.limit, name="warn")
        cleanup = resolve_bytes(cfg.cleanup, self.limit, name="cleanup")
        if warn > cleanup:
            raise ValueError(
                f"warn ({format_bytes(warn)}) must not be above cleanup ({format_bytes(cleanup)})"
            )
        hyst = resolve_bytes(cfg.hysteresis, self.limit, name="hysteresis")
        gate = dict(min_interval_s=cfg.min_callback_interval_s)
        self._warn = ThresholdGate(
            level="warn", threshold=warn, hysteresis=min(hyst, warn - 1), **gate
        )
        self._cleanup = ThresholdGate(
            level="cleanup", threshold=cleanup, hysteresis=min(hyst, cleanup - 1), **gate
        )
        self._warn_cbs: list[Callable[[ThresholdEvent], Any]] = [on_warn] if on_warn else []
        self._cleanup_cbs: list[Callable[[ThresholdEvent], Any]] = (
            [on_cleanup] if on_cleanup else []
        )
        self._cleaner = Cleaner(on_error=self._count_error)
        self._lock = threading.Lock()
        self._state = _State(history=SampleHistory(cfg.history_size))
        self._nvml = NvmlReader()
        self._tree = TreeSampler(cfg.pid, max_cpu_fraction=cfg.max_cpu_fraction, clock=clock)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._started_at: float | None = None
        self._wall = 0.0
        self.last_cleanup: CleanupReport | None = None

    # ---- registration -------------------------------------------------------------------
    def register_shrinker(self, fn: Shrinker) -> Shrinker:
        """Call ``fn(nbytes)`` on cleanup, in registration order; returns ``fn`` (decorator-safe).

        The monitor holds a strong reference until ``unregister_shrinker(fn)``.
        """
        return self._cleaner.register(fn)

    def unregister_shrinker(self, fn: Shrinker) -> None:
        self._cleaner.unregister(fn)

    def on_warn(self, fn: Callable[[ThresholdEvent], Any]) -> Callable[[ThresholdEvent], Any]:
        """Add a callback for warn crossings (runs on the monitor thread)."""
        self._warn_cbs.append(fn)
        return fn

    def on_cleanup(self, fn: Callable[[ThresholdEvent], Any]) -> Callable[[ThresholdEvent], Any]:
        """Add a callback for cleanup crossings, run before the default cleanup."""
        self._cleanup_cbs.append(fn)
        return fn

    # ---- sampling -----------------------------------------------------------------------
    def measure(self) -> MemorySample:
        """Take one reading without recording it (no history, no thresholds)."""
        cfg = self.config
        return read_sample(
            tree=self._tree,
            cuda=cfg.cuda,
            nvml=self._nvml if cfg.nvml else None,
            cgroup_root=cfg.cgroup_root,
            proc_cgroup=cfg.proc_cgroup_path(),
            shm_path=cfg.shm_path,
        )

    def sample(self) -> MemorySample:
        """Take one reading, record it and act on thresholds; returns the typed record."""
        s = self.measure()
        self.observe(s)
        return s

    def observe(self, sample: MemorySample) -> list[ThresholdEvent]:
        """Record a sample (history, peaks, JSONL) and fire the threshold callbacks it crosses."""
        value = sample.value(self.config.measure)
        now = self._clock()
        row = sample.to_flat()
        with self._lock:
            st = self._state
            st.samples += 1
            st.skipped += sample.tree.skipped if sample.tree else 0
            st.history.append(sample)
            update_peaks(st.peaks, row)
            if value > st.peak_value:
                st.peak, st.peak_value = sample, value
            fired = [
                gate.event(value, self.limit, sample)
                for gate in (self._warn, self._cleanup)
                if gate.update(value, now)
            ]
            st.events.extend(fired)
        if self.config.jsonl_path is not None:
            self._append_jsonl(row)
        for event in fired:
            self._dispatch(event)
        return fired

    def _append_jsonl(self, row: dict[str, Any]) -> None:
        path = self.config.jsonl_path
        assert path is not None
        row = {**row, "warn_threshold": self._warn.threshold}
        row["cleanup_threshold"] = self._cleanup.threshold
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
        except OSError:
            self._count_error(f"cannot append to {path}")

    # ---- actions ------------------------------------------------------------------------
    def _dispatch(self, event: ThresholdEvent) -> None:
        logger.warning(
            "memory %s: %s (measure=%s) crossed %s of limit %s",
            event.level,
            format_bytes(event.value),
            self.config.measure,
            format_bytes(event.threshold),
            format_bytes(event.limit),
        )
        callbacks = self._warn_cbs if event.level == "warn" else self._cleanup_cbs
        for cb in list(callbacks):
            try:
                cb(event)
            except Exception:
                self._count_error(f"{event.level} callback {cb!r} failed")
        if event.level == "cleanup" and self.config.default_cleanup:
            self.last_cleanup = self.run_cleanup(event.excess)

    def run_cleanup(self, nbytes: int) -> CleanupReport:
        """Run the cleanup sequence now (see ``tj_monitor.cleanup``), asking shrinkers for
        ``nbytes``."""
        return self._cleaner.run(nbytes)

    def _count_error(self, what: str) -> None:
        with self._lock:
            self._state.errors += 1
            first = self._state.errors <= 3
        if first:
            logger.exception("tj_monitor: %s", what)
        else:
            logger.debug("tj_monitor: %s", what, exc_info=True)

    # ---- thread -------------------------------------------------------------------------
    def start(self) -> MemoryMonitor:
        """Start the sampling thread (a daemon: it never keeps the host alive)."""
        if self._thread is not None:
            raise RuntimeError("MemoryMonitor already started")
        self._stop.clear()
        self._started_at = self._clock()
        self._thread = threading.Thread(target=self._run, name="tj-memory-monitor", daemon=True)
        self._thread.start()
        return self

    @property
    def thread_id(self) -> int | None:
        """The sampling thread's native id while it runs (its CPU as the kernel counts it)."""
        return self._thread.native_id if self._thread is not None else None

    def stop(self) -> None:
        """Stop the thread (after its current sample) and release NVML."""
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        thread.join()
        self._thread = None
        if self._started_at is not None:
            self._wall += self._clock() - self._started_at
            self._started_at = None
        self._nvml.close()

    def _run(self) -> None:
        interval = self.config.interval_s
        next_at = self._clock()
        while not self._stop.is_set():
            t0 = time.thread_time()
            try:
                self.sample()
            except Exception:
                self._count_error("sampling failed")
            spent = time.thread_time() - t0
            with self._lock:
                self._state.cpu += spent
            next_at += interval
            delay = next_at - self._clock()
            if delay < 0:  # a slow sample: skip missed ticks rather than burst
                next_at, delay = self._clock(), 0.0
            self._stop.wait(delay)

    def __enter__(self) -> MemoryMonitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- results ------------------------------------------------------------------------
    @property
    def thresholds(self) -> dict[str, int]:
        """Resolved lines in bytes: warn, cleanup, their re-arm lines and the effective limit."""
        return {
            "warn": self._warn.threshold,
            "cleanup": self._cleanup.threshold,
            "warn_rearm": self._warn.rearm_below,
            "cleanup_rearm": self._cleanup.rearm_below,
            "limit": self.limit,
        }

    @property
    def history(self) -> list[MemorySample]:
        with self._lock:
            return self._state.history.snapshot()

    @property
    def peak(self) -> MemorySample | None:
        """The sample at which the measured value was highest (a consistent snapshot)."""
        with self._lock:
            return self._state.peak

    @property
    def peaks(self) -> dict[str, float]:
        """Per-column extremes over all samples, by flat column name (``tree_pss``, ...)."""
        with self._lock:
            return dict(self._state.peaks)

    @property
    def events(self) -> list[ThresholdEvent]:
        with self._lock:
            return list(self._state.events)

    @property
    def stats(self) -> MonitorStats:
        with self._lock:
            st = self._state
            wall = self._wall + (self._clock() - self._started_at if self._started_at else 0.0)
            return MonitorStats(
                samples=st.samples,
                cpu_seconds=st.cpu,
                wall_seconds=wall,
                errors=st.errors,
                skipped_processes=st.skipped,
                warn_fired=self._warn.fired,
                cleanup_fired=self._cleanup.fired,
                pss_reads=self._tree.full_reads,
                pss_cpu_seconds=self._tree.full_cpu_s,
            )

    def save(self, path: str | Path) -> Path:
        """Write the history as CSV or JSONL (by suffix), atomically."""
        return save_rows(Path(path), [s.to_flat() for s in self.history])

    def plot(self, path: str | Path, *, title: str = "memory") -> Path:
        """PNG of the history with the warn, cleanup and limit lines."""
        t = self.thresholds
        lines = {"limit": t["limit"], "cleanup": t["cleanup"], "warn": t["warn"]}
        return plot_rows(Path(path), [s.to_flat() for s in self.history], lines=lines, title=title)
