"""Presentation of an analysed run: a rich summary table and PNG curves.

rich and matplotlib come with the ``report`` extra and are imported when a function needs them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tj_monitor._extras import require
from tj_monitor.analyze import RunData, RunSummary, SeriesSummary, is_data_wait, is_loss, is_lr
from tj_monitor.analyze import is_throughput as _is_tp
from tj_monitor.curves import plot_rows
from tj_monitor.sample import format_bytes

if TYPE_CHECKING:
    from rich.console import Group
    from rich.table import Table

__all__ = ["plot_run", "render_summary"]

_MEMORY_ROWS = (
    ("tree_pss", "tree PSS"),
    ("tree_uss", "tree USS"),
    ("tree_rss", "tree RSS"),
    ("container_used", "used against limit"),
    ("cgroup_current", "cgroup memory.current"),
    ("swap_used", "swap used"),
    ("shm_used", "/dev/shm used"),
    ("sys_available", "lowest available"),
    ("limit", "effective limit"),
)


def _num(v: float | None, key: str = "") -> str:
    if v is None:
        return "-"
    if is_data_wait(key):
        return f"{v:.1%}"
    return f"{v:.4g}"


def _group_table(title: str, rows: list[SeriesSummary]) -> Table:
    Table = require("rich.table", "tj_monitor.render_summary").Table
    t = Table(title=title, title_justify="left", expand=False)
    t.add_column("metric", overflow="fold")
    for col in ("n", "min", "max", "mean", "last", "last step", "NaN/inf"):
        t.add_column(col, justify="right")
    for s in rows:
        bad = f"{s.nonfinite} (first at {s.first_nonfinite_step})" if s.nonfinite else ""
        t.add_row(
            s.name,
            str(s.count),
            _num(s.min, s.name),
            _num(s.max, s.name),
            _num(s.mean, s.name),
            _num(s.last, s.name),
            str(s.last_step),
            bad,
        )
    return t


def render_summary(summary: RunSummary) -> Group:
    """Tables: run overview, loss, lr, throughput, data wait, other metrics, peak memory."""
    Table = require("rich.table", "tj_monitor.render_summary").Table
    Group = require("rich.console", "tj_monitor.render_summary").Group
    parts: list[Any] = []
    head = Table.grid(padding=(0, 2))
    head.add_row("run", summary.source)
    head.add_row("records", str(summary.records))
    if summary.first_step is not None:
        head.add_row("steps", f"{summary.first_step} .. {summary.last_step}")
    if summary.duration_s is not None:
        head.add_row("duration", f"{summary.duration_s:.1f} s")
    if summary.skipped_lines:
        head.add_row(
            "skipped lines",
            f"{len(summary.skipped_lines)}: " + ", ".join(summary.skipped_lines[:5]),
        )
    if summary.ignored_records:
        head.add_row("ignored records", str(summary.ignored_records))
    parts.append(head)
    grouped = set()
    for title, keys in (
        ("loss", summary.loss),
        ("learning rate", summary.lr),
        ("throughput", summary.throughput),
        ("data-wait fraction (time blocked on the loader / step time)", summary.data_wait),
    ):
        if keys:
            parts.append(_group_table(title, [summary.series[k] for k in keys]))
            grouped.update(keys)
    others = [summary.series[k] for k in sorted(summary.series) if k not in grouped]
    if others:
        parts.append(_group_table("other metrics", others))
    if summary.peak_memory:
        t = Table(title=f"peak memory ({summary.memory_samples} samples)", title_justify="left")
        t.add_column("what")
        t.add_column("peak", justify="right")
        for key, label in _MEMORY_ROWS:
            if key in summary.peak_memory:
                t.add_row(label, format_bytes(summary.peak_memory[key]))
        for key in sorted(summary.peak_memory):
            if key.startswith(("cuda", "gpu")) and not key.endswith(("util", "ooms", "retries")):
                t.add_row(key, format_bytes(summary.peak_memory[key]))
        parts.append(t)
    return Group(*parts)


def _is_num(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _plot_metric(path: Path, run: RunData, keys: list[str], title: str, ylabel: str) -> Path:
    Figure = require("matplotlib.figure", "tj_monitor.plot_run").Figure

    fig = Figure(figsize=(7, 4.2))
    ax = fig.subplots()
    positive = True
    for key in keys:
        pts = [(r["step"], float(r[key])) for r in run.metrics if _is_num(r.get(key))]
        good = [(st, v) for st, v in pts if math.isfinite(v)]
        if good:
            marker = "o" if len(good) < 30 else None
            ax.plot([p[0] for p in good], [p[1] for p in good], label=key, marker=marker)
            positive = positive and min(p[1] for p in good) > 0
        bad = [st for st, v in pts if not math.isfinite(v)]
        if bad:
            ax.axvline(bad[0], color="tab:red", linestyle=":", label=f"{key} first NaN/inf")
    if positive and title == "loss":
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def plot_run(run: RunData, out_dir: str | Path) -> list[Path]:
    """Write loss.png, lr.png, throughput.png, data_wait.png and memory.png (those with data)."""
    require("matplotlib.figure", "tj_monitor.plot_run")  # the error names this function
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    keys = sorted({k for r in run.metrics for k in r if k not in ("step", "time")})
    written = []
    for name, pred, ylabel in (
        ("loss", is_loss, "loss"),
        ("lr", is_lr, "learning rate"),
        ("throughput", _is_tp, "items / s"),
        ("data_wait", is_data_wait, "fraction of step time"),
    ):
        chosen = [k for k in keys if pred(k)]
        if chosen:
            written.append(_plot_metric(out / f"{name}.png", run, chosen, name, ylabel))
    if run.memory:
        last = run.memory[-1]
        lines = {
            "limit": last.get("limit"),
            "cleanup": last.get("cleanup_threshold"),
            "warn": last.get("warn_threshold"),
        }
        written.append(plot_rows(out / "memory.png", run.memory, lines=lines, title="memory"))
    return written
