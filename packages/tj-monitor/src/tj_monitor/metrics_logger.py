"""MetricsLogger: one call writes a JSONL line, TensorBoard scalars and a console line.

JSONL is the durable record (one object per ``log`` call: ``step``, ``time`` and the metrics,
flushed every line so a killed run keeps everything up to its last step); TensorBoard is for
looking; the console line is for the terminal. Under torch.distributed only rank 0 writes by
default, and the rank is read at the first ``log`` call, so the logger may be built before
``init_process_group``. TensorBoard files are written with tensorboard's own ``EventFileWriter``
(the one torch's ``SummaryWriter`` wraps), so torch stays optional; tensorboard itself comes with
the ``report`` extra (``LoggerConfig(tensorboard=False)`` needs only the core). The console line
is plain text (stdout, a text stream, or a rich ``Console`` the caller passes).
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tj_monitor._extras import check_extra, require

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["LoggerConfig", "MetricsLogger", "detect_rank"]

_RESERVED = ("step", "time")


@dataclass(kw_only=True)
class LoggerConfig:
    """Where and how to log. ``console_every``: print every N-th step (0 = never).

    ``rank``: ``None`` reads torch.distributed's rank (0 without a process group).
    ``rank_zero_only=False`` makes every rank write, into ``rank-<r>/`` below the run directory.
    """

    jsonl_name: str = "metrics.jsonl"
    tensorboard: bool = True
    console_every: int = 1
    rank_zero_only: bool = True
    rank: int | None = None

    def __post_init__(self) -> None:
        if not self.jsonl_name or "/" in self.jsonl_name:
            raise ValueError(f"jsonl_name: expected a file name, got {self.jsonl_name!r}")
        if self.console_every < 0:
            raise ValueError(f"console_every: must be >= 0, got {self.console_every}")
        if self.rank is not None and self.rank < 0:
            raise ValueError(f"rank: must be >= 0, got {self.rank}")


def detect_rank() -> int:
    """torch.distributed's global rank when a process group exists, else 0 (never imports torch)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return 0


def _scalar(key: str, value: Any) -> float | int | str | bool | None:
    """Plain Python value of a metric: numbers, strings, numpy scalars, 1-element arrays/tensors."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except (ValueError, RuntimeError) as exc:
            raise TypeError(f"metric {key!r}: expected one number, got {exc}") from exc
    raise TypeError(f"metric {key!r}: expected a number, got {type(value).__name__}")


def _fmt(key: str, value: Any) -> str:
    if isinstance(value, float):
        if key.endswith("fraction") and math.isfinite(value):
            return f"{value:.1%}"
        return f"{value:.4g}"
    return str(value)


class _TensorBoard:
    """Scalar events through tensorboard's EventFileWriter."""

    def __init__(self, logdir: Path) -> None:
        feature = "tj_monitor.MetricsLogger (tensorboard=True)"
        proto = require("tensorboard.compat.proto.event_pb2", feature)
        summary = require("tensorboard.compat.proto.summary_pb2", feature)
        writer = require("tensorboard.summary.writer.event_file_writer", feature)
        self._event_pb2, self._summary_pb2 = proto, summary
        self._writer = writer.EventFileWriter(str(logdir), flush_secs=10)

    def add(self, step: int, scalars: Mapping[str, float], wall_time: float) -> None:
        if not scalars:
            return
        values = [
            self._summary_pb2.Summary.Value(tag=k, simple_value=float(v))
            for k, v in scalars.items()
        ]
        event = self._event_pb2.Event(
            wall_time=wall_time, step=step, summary=self._summary_pb2.Summary(value=values)
        )
        self._writer.add_event(event)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class MetricsLogger:
    """``log(step, loss=..., lr=...)`` to JSONL + TensorBoard + console; rank 0 only by default.

    >>> import tempfile
    >>> with MetricsLogger(tempfile.mkdtemp(), LoggerConfig(console_every=0)) as log:
    ...     log.log(1, loss=0.5)
    """

    def __init__(
        self,
        run_dir: str | Path,
        config: LoggerConfig | None = None,
        *,
        console: Console | IO[str] | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.config = config or LoggerConfig()
        if self.config.tensorboard:  # fail at construction, not at the first log
            check_extra("tensorboard", "tj_monitor.MetricsLogger (tensorboard=True)")
        self._console = console  # None: sys.stdout at each print (so redirection is honoured)
        self._lock = threading.Lock()
        self._opened = False
        self.active = False
        self.rank: int | None = None
        self._jsonl: IO[str] | None = None
        self._tb: _TensorBoard | None = None

    @property
    def jsonl_path(self) -> Path:
        return self._dir() / self.config.jsonl_name

    def _dir(self) -> Path:
        rank = self.rank if self.rank is not None else (self.config.rank or 0)
        if self.config.rank_zero_only or rank == 0:
            return self.run_dir
        return self.run_dir / f"rank-{rank}"

    def _open(self) -> None:
        self._opened = True
        self.rank = self.config.rank if self.config.rank is not None else detect_rank()
        self.active = self.rank == 0 or not self.config.rank_zero_only
        if not self.active:
            return
        out = self._dir()
        out.mkdir(parents=True, exist_ok=True)
        self._jsonl = self.jsonl_path.open("a", encoding="utf-8")
        if self.config.tensorboard:
            self._tb = _TensorBoard(out)

    def log(self, step: int, metrics: Mapping[str, Any] | None = None, /, **kw: Any) -> None:
        """Record ``metrics`` (and keyword metrics) at ``step``; no-op on non-zero ranks."""
        merged = {**(metrics or {}), **kw}
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step: expected an int >= 0, got {step!r}")
        for key in merged:
            if key in _RESERVED:
                raise ValueError(f"metric name {key!r} is reserved (step and time are added)")
        values = {k: _scalar(k, v) for k, v in merged.items()}
        with self._lock:
            if not self._opened:
                self._open()
            if not self.active:
                return
            if self._jsonl is None:
                raise RuntimeError("MetricsLogger is closed")
            now = time.time()
            self._jsonl.write(json.dumps({"step": step, "time": now, **values}) + "\n")
            self._jsonl.flush()
            if self._tb is not None:
                numeric = {
                    k: v
                    for k, v in values.items()
                    if isinstance(v, int | float) and not isinstance(v, bool)
                }
                self._tb.add(step, numeric, now)
            every = self.config.console_every
            if every and step % every == 0:
                parts = [f"step {step}"] + [f"{k} {_fmt(k, v)}" for k, v in values.items()]
                self._print(" | ".join(parts))

    def _print(self, line: str) -> None:
        console = self._console
        rich_console = sys.modules.get("rich.console")  # a rich Console implies rich is loaded
        if rich_console is not None and isinstance(console, rich_console.Console):
            console.print(line, markup=False, highlight=False)
            return
        out = sys.stdout if console is None else console
        out.write(line + "\n")
        out.flush()

    def flush(self) -> None:
        with self._lock:
            if self._jsonl is not None:
                self._jsonl.flush()
            if self._tb is not None:
                self._tb.flush()

    def close(self) -> None:
        with self._lock:
            if self._jsonl is not None:
                self._jsonl.close()
            if self._tb is not None:
                self._tb.close()
            self._jsonl, self._tb = None, None

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
