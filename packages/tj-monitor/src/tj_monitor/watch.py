"""``tj-monitor watch``: a live terminal view of a process tree's memory, the system and GPUs.

It replaces the ``watch -n 1 free -h`` + ``nvidia-smi`` loops people run by hand, and shows what
those cannot: PSS/USS of the whole tree (workers, SUMO, Ray) and the warn/cleanup lines.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psutil

from tj_monitor._extras import missing_extra

try:  # the live view is part of the report extra
    from rich.console import Console, Group
    from rich.live import Live
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text
except ImportError as exc:
    raise missing_extra("rich", "tj_monitor.watch") from exc

from tj_monitor.gpu import NvmlReader
from tj_monitor.sample import MemorySample, format_bytes, read_sample, update_peaks
from tj_monitor.thresholds import resolve_bytes
from tj_monitor.tree import TreeSampler

__all__ = ["WatchOptions", "render_sample", "watch"]


@dataclass(kw_only=True)
class WatchOptions:
    """``pid``/``cmd`` select the tree (neither: system view only); ``count`` stops after N
    refreshes (``None``: until the target exits or Ctrl-C)."""

    pid: int | None = None
    cmd: Sequence[str] = ()
    interval_s: float = 1.0
    warn: float = 0.75
    cleanup: float = 0.875
    once: bool = False
    as_json: bool = False
    count: int | None = None
    top: int = 8
    max_cpu_fraction: float = 0.05

    def __post_init__(self) -> None:
        if self.pid is not None and self.cmd:
            raise ValueError("give either --pid or a command after --, not both")
        if not self.interval_s > 0:
            raise ValueError(f"interval: must be > 0, got {self.interval_s}")
        if self.count is not None and self.count < 1:
            raise ValueError(f"count: must be >= 1, got {self.count}")
        if not 0 < self.max_cpu_fraction <= 1:
            raise ValueError(f"max-cpu: must be in (0, 1], got {self.max_cpu_fraction}")
        resolve_bytes(self.warn, 2**40, name="warn")
        resolve_bytes(self.cleanup, 2**40, name="cleanup")


def _bar(value: int | None, total: int | None, lines: dict[str, int], width: int = 32) -> Text:
    """A bar of ``value / total`` with the warn (yellow) and cleanup (red) lines marked."""
    if value is None or not total:
        return Text("n/a", style="dim")
    filled = min(int(width * value / total), width)
    style = "green"
    if value >= lines.get("cleanup", total + 1):
        style = "bold red"
    elif value >= lines.get("warn", total + 1):
        style = "yellow"
    marks = {
        min(int(width * v / total), width - 1): s
        for s, v in (("yellow", lines.get("warn")), ("red", lines.get("cleanup")))
        if v
    }
    text = Text()
    for i in range(width):
        if i in marks:
            text.append("│", style=f"bold {marks[i]}")
        else:
            text.append("█" if i < filled else "░", style=style if i < filled else "dim")
    text.append(f" {format_bytes(value)} / {format_bytes(total)} ({value / total:.0%})")
    return text


def render_sample(
    sample: MemorySample, lines: dict[str, int], *, title: str = "tj-monitor", top: int = 8
) -> Panel:
    """One screen: memory bars, the tree's top processes, GPUs and what was not available."""
    s = sample.system
    limit = s.limit
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    grid.add_row("used vs limit", _bar(s.container_used, limit, lines))
    if sample.tree is not None:
        t = sample.tree
        grid.add_row("tree PSS", _bar(t.pss_estimate, limit, lines))
        grid.add_row(
            "",
            Text(
                f"USS {format_bytes(t.uss)}  RSS {format_bytes(t.rss)} (counts shared pages per "
                f"process)  swap {format_bytes(t.swap)}  processes {t.processes}"
                + (f"  skipped {t.skipped}" if t.skipped else "")
                + (f"  PSS read {t.pss_age_s:.1f} s ago" if t.pss_age_s else ""),
                style="dim",
            ),
        )
    grid.add_row("available", Text(f"{format_bytes(s.available)} of {format_bytes(s.total)} RAM"))
    grid.add_row("swap", _bar(s.swap_used, s.swap_total, {}) if s.swap_total else Text("none"))
    grid.add_row("/dev/shm", _bar(s.shm_used, s.shm_total, {}))
    if s.cgroup is not None:
        cg = s.cgroup
        grid.add_row(
            f"cgroup v{cg.version}",
            Text(
                f"current {format_bytes(cg.current)}  working set {format_bytes(cg.working_set)}"
                f"  limit {format_bytes(cg.limit) if cg.limit else 'none'}"
            ),
        )
    grid.add_row(
        "lines",
        Text.assemble(
            ("warn ", "yellow"),
            format_bytes(lines.get("warn")),
            "  ",
            ("cleanup ", "red"),
            format_bytes(lines.get("cleanup")),
            "  ",
            "limit ",
            format_bytes(limit),
        ),
    )
    parts: list[Any] = [grid]
    if sample.tree is not None and sample.tree.per_process:
        pt = Table(title="top processes by PSS", title_justify="left", expand=False)
        for col in ("pid", "name", "PSS", "USS", "RSS"):
            pt.add_column(col, justify="left" if col == "name" else "right")
        for p in sample.tree.per_process[:top]:
            pt.add_row(
                str(p.pid), p.name, format_bytes(p.pss), format_bytes(p.uss), format_bytes(p.rss)
            )
        parts.append(pt)
    if sample.nvml or sample.cuda:
        gt = Table(title="GPUs", title_justify="left", expand=False)
        for col in ("gpu", "memory", "util", "tree"):
            gt.add_column(col)
        for g in sample.nvml:
            util = f"{g.utilization}%" if g.utilization is not None else "n/a"
            gt.add_row(
                f"{g.index} {g.name}",
                _bar(g.used, g.total, {}, width=20),
                util,
                format_bytes(g.tree_used),
            )
        for c in sample.cuda:
            gt.add_row(
                f"cuda:{c.index} (torch)",
                Text(
                    f"allocated {format_bytes(c.allocated)} reserved {format_bytes(c.reserved)} "
                    f"peak {format_bytes(c.peak_allocated)}"
                ),
                "",
                f"OOMs {c.num_ooms} retries {c.num_alloc_retries}",
            )
        parts.append(gt)
    if sample.notes:
        parts.append(Text("not available: " + "; ".join(sample.notes), style="dim"))
    return Panel(Group(*parts), title=title, title_align="left")


def _lines(opts: WatchOptions, limit: int) -> dict[str, int]:
    return {
        "warn": resolve_bytes(opts.warn, limit, name="warn"),
        "cleanup": resolve_bytes(opts.cleanup, limit, name="cleanup"),
        "limit": limit,
    }


def watch(opts: WatchOptions, *, console: Console | None = None) -> int:
    """Run the view; returns the exit code (the command's own code when one was started)."""
    console = console or Console()
    child: subprocess.Popen[bytes] | None = None
    pid = opts.pid
    if opts.cmd:
        child = subprocess.Popen(list(opts.cmd))
        pid = child.pid
    elif pid is not None and not psutil.pid_exists(pid):
        console.print(f"tj-monitor watch: no process with pid {pid}", style="red", markup=False)
        return 1
    title = f"tj-monitor: {' '.join(opts.cmd) if opts.cmd else f'pid {pid}' if pid else 'system'}"
    peaks: dict[str, float] = {}
    refreshes = 0
    sampler = None
    if pid is not None:
        sampler = TreeSampler(pid, per_process=True, max_cpu_fraction=opts.max_cpu_fraction)
    with NvmlReader() as nvml:

        def take() -> MemorySample | None:
            try:
                return read_sample(tree=sampler, cuda=False, nvml=nvml)
            except psutil.NoSuchProcess:
                return None

        def exited() -> bool:  # checked before sampling: an unreaped child reads as empty
            return child is not None and child.poll() is not None

        live = None if opts.as_json or opts.once else Live(console=console, auto_refresh=False)
        try:
            if live is not None:
                live.start()
            while not exited():
                sample = take()
                if sample is None:
                    console.print(f"tj-monitor watch: process {pid} exited", markup=False)
                    break
                lines = _lines(opts, sample.system.limit)
                update_peaks(peaks, sample.to_flat())
                refreshes += 1
                if opts.as_json:
                    out = {**sample.to_dict(), "thresholds": lines}
                    console.out(json.dumps(out), highlight=False)
                elif live is None:
                    console.print(render_sample(sample, lines, title=title, top=opts.top))
                else:
                    live.update(
                        render_sample(sample, lines, title=title, top=opts.top), refresh=True
                    )
                if opts.once or (opts.count is not None and refreshes >= opts.count):
                    break
                time.sleep(opts.interval_s)
        except KeyboardInterrupt:
            pass
        finally:
            if live is not None:
                live.stop()
    if not opts.as_json and not opts.once and "tree_pss" in peaks:
        console.print(f"peak tree PSS {format_bytes(peaks['tree_pss'])}", markup=False)
    if child is not None:
        rc = child.wait()
        return rc if rc >= 0 else 128 - rc
    return 0
