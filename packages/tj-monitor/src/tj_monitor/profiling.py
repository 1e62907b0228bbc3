"""Profiling helpers: a scheduled torch.profiler run, and a CUDA memory snapshot on OOM.

``StepProfiler`` wraps ``torch.profiler.profile`` with a wait/warmup/active schedule and, at the
end of each active window, writes a Chrome trace (open in chrome://tracing or Perfetto) and a
top-k operator table. ``OomSnapshot`` records the CUDA allocator history and dumps a snapshot
(open at pytorch.org/memory_viz) from inside the allocator's OOM observer, before the stack
unwinds and frees the evidence. torch is imported only when these are used.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["OomSnapshot", "ProfilerConfig", "StepProfiler"]

logger = logging.getLogger(__name__)


@dataclass(kw_only=True)
class ProfilerConfig:
    """Schedule (in steps) and what to record. ``sort_by=None`` sorts by device time when CUDA
    is profiled, else by CPU time."""

    wait: int = 1
    warmup: int = 1
    active: int = 3
    repeat: int = 1
    row_limit: int = 20
    sort_by: str | None = None
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    cuda: bool = True

    def __post_init__(self) -> None:
        for name in ("wait", "warmup", "repeat"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if self.active < 1:
            raise ValueError(f"active: must be >= 1, got {self.active}")
        if self.row_limit < 1:
            raise ValueError(f"row_limit: must be >= 1, got {self.row_limit}")


class StepProfiler:
    """Profile a training loop: call ``step()`` once per step inside ``with StepProfiler(...)``.

    Writes ``trace-<cycle>.json`` and ``top-<cycle>.txt`` into ``out_dir`` per active window;
    ``written`` lists the files.
    """

    def __init__(self, out_dir: str | Path, config: ProfilerConfig | None = None) -> None:
        self.out_dir = Path(out_dir)
        self.config = config or ProfilerConfig()
        self.written: list[Path] = []
        self._prof: Any = None
        self._cycle = 0

    def __enter__(self) -> StepProfiler:
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        cfg = self.config
        self.out_dir.mkdir(parents=True, exist_ok=True)
        activities = [ProfilerActivity.CPU]
        self._device = cfg.cuda and torch.cuda.is_available()
        if self._device:
            activities.append(ProfilerActivity.CUDA)
        self._prof = profile(
            activities=activities,
            schedule=schedule(
                wait=cfg.wait, warmup=cfg.warmup, active=cfg.active, repeat=cfg.repeat
            ),
            on_trace_ready=self._on_ready,
            record_shapes=cfg.record_shapes,
            profile_memory=cfg.profile_memory,
            with_stack=cfg.with_stack,
        )
        self._prof.__enter__()
        return self

    def step(self) -> None:
        """Mark the end of one training step."""
        if self._prof is None:
            raise RuntimeError("StepProfiler.step() outside its `with` block")
        self._prof.step()

    def _on_ready(self, prof: Any) -> None:
        trace = self.out_dir / f"trace-{self._cycle}.json"
        prof.export_chrome_trace(str(trace))
        sort_by = self.config.sort_by or (
            "self_device_time_total" if self._device else "self_cpu_time_total"
        )
        table = prof.key_averages().table(sort_by=sort_by, row_limit=self.config.row_limit)
        top = self.out_dir / f"top-{self._cycle}.txt"
        top.write_text(table + "\n", encoding="utf-8")
        self.written += [trace, top]
        logger.info("profiler: wrote %s and %s", trace, top)
        self._cycle += 1

    def __exit__(self, *exc: object) -> None:
        prof, self._prof = self._prof, None
        if prof is not None:
            prof.__exit__(*exc)


class OomSnapshot:
    """Inside ``with OomSnapshot(dir):`` a CUDA OOM dumps ``oom-<pid>-<n>.pickle`` into ``dir``.

    It records allocator history (``max_entries`` events, a few KB each) while active. Without
    CUDA it does nothing (``enabled`` is False) and exceptions pass through unchanged. torch
    cannot detach an OOM observer, so the one attached here stays registered and does nothing
    once the block has exited.
    """

    def __init__(self, out_dir: str | Path, *, max_entries: int = 100_000) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries: must be >= 1, got {max_entries}")
        self.out_dir = Path(out_dir)
        self.max_entries = max_entries
        self.enabled = False
        self.written: list[Path] = []
        self._attached = False
        self._torch: Any = None

    def __enter__(self) -> OomSnapshot:
        import torch

        if not torch.cuda.is_available():
            logger.info("OomSnapshot: CUDA not available; no snapshots will be taken")
            return self
        self._torch = torch
        self.out_dir.mkdir(parents=True, exist_ok=True)
        torch.cuda.memory._record_memory_history(max_entries=self.max_entries)
        if not self._attached:
            torch._C._cuda_attach_out_of_memory_observer(self._observer)
            self._attached = True
        self.enabled = True
        return self

    def _observer(self, device: int, alloc: int, device_alloc: int, device_free: int) -> None:
        if not self.enabled:
            return
        self.dump(reason=f"device {device}: tried to allocate {alloc} bytes, {device_free} free")

    def dump(self, *, reason: str = "requested") -> Path | None:
        """Write a snapshot now (also usable without an OOM); ``None`` when disabled."""
        if not self.enabled:
            return None
        path = self.out_dir / f"oom-{os.getpid()}-{len(self.written)}.pickle"
        try:
            self._torch.cuda.memory._dump_snapshot(str(path))
        except Exception:  # never turn an OOM into a different error
            logger.exception("OomSnapshot: could not write %s", path)
            return None
        self.written.append(path)
        logger.error("CUDA memory snapshot (%s) written to %s", reason, path)
        return path

    def __exit__(self, exc_type: type[BaseException] | None, exc: object, tb: object) -> None:
        if not self.enabled:
            return
        torch = self._torch
        if (
            exc_type is not None
            and issubclass(exc_type, torch.OutOfMemoryError)
            and not self.written
        ):
            self.dump(reason="OutOfMemoryError at block exit")
        self.enabled = False
        torch.cuda.memory._record_memory_history(enabled=None)
