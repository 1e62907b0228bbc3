"""Presentation of an analysed run: rich summary tables and PNG curves, for one run or a run
made of stages (the cross-stage table and the memory curve across stages).

rich and matplotlib come with the ``report`` extra and are imported when a function needs them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tj_monitor._extras import require
from tj_monitor.analyze import RunData, RunSummary, SeriesSummary, is_data_wait, is_loss, is_lr
from tj_monitor.analyze import is_throughput as _is_tp
from tj_monitor.curves import plot_rows
from tj_monitor.sample import format_bytes
from tj_monitor.stages import StagedSummary, stage_span

if TYPE_CHECKING:
    from rich.console import Group
    from rich.table import Table

__all__ = ["plot_memory_stages", "plot_run", "render_stages", "render_summary"]

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


# ---- runs made of stages ---------------------------------------------------------------------
def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def render_stages(staged: StagedSummary) -> Group:
    """Each stage's ``render_summary`` under a rule with its name, then the cross-stage table."""
    Table = require("rich.table", "tj_monitor.render_stages").Table
    Group = require("rich.console", "tj_monitor.render_stages").Group
    Rule = require("rich.rule", "tj_monitor.render_stages").Rule
    Text = require("rich.text", "tj_monitor.render_stages").Text
    parts: list[Any] = []
    for name, summary in staged.stages.items():
        parts.append(Rule(Text(f"stage {name}"), align="left"))
        parts.append(render_summary(summary))
    parts.append(Rule(Text(f"{len(staged.table)} stages of {staged.source}"), align="left"))
    t = Table(title=f"across stages ({_duration(staged.duration_s)} in all)", title_justify="left")
    t.add_column("stage")
    for col in ("start", "wall time", "steps", "peak tree PSS", "data wait"):
        t.add_column(col, justify="right")
    for row in staged.table:
        steps = str(row.steps)
        if row.first_step is not None:
            steps += f" ({row.first_step} .. {row.last_step})"
        pss, wait = row.peak_tree_pss, row.data_wait_fraction
        t.add_row(
            Text(row.name),
            "-" if row.start_s is None else f"+{_duration(row.start_s)}",
            _duration(row.wall_s),
            steps,
            "-" if pss is None else format_bytes(pss),
            "-" if wait is None else f"{wait:.1%}",
        )
    parts.append(t)
    return Group(*parts)


_GIB = 2**30
_STAGE_CURVES = (
    ("tree_pss", "tree PSS", "tab:blue"),
    ("container_used", "used against limit", "tab:purple"),
)
_THRESHOLDS = (
    ("warn_threshold", "warn", "tab:orange"),
    ("cleanup_threshold", "cleanup", "tab:red"),
)


def _last(rows: list[dict[str, Any]], key: str) -> float | None:
    vals = [float(r[key]) for r in rows if _is_num(r.get(key)) and math.isfinite(r[key])]
    return vals[-1] if vals else None


def plot_memory_stages(
    stages: Mapping[str, RunData], out: str | Path, *, budget: float | None = None
) -> Path | None:
    """One PNG at ``out``: tree PSS (and used against the limit) over the whole run, in minutes
    since its first record, each stage's span shaded and labelled, the warn and cleanup lines of
    the records (per stage when stages disagree) and ``budget`` (bytes) when given.

    Returns ``None`` (and writes nothing) when no stage has timed memory records.
    """
    Figure = require("matplotlib.figure", "tj_monitor.plot_memory_stages").Figure
    if budget is not None and not (math.isfinite(budget) and budget > 0):
        raise ValueError(f"budget must be a positive number of bytes, got {budget!r}")
    timed = {
        name: sorted((r for r in run.memory if _is_num(r.get("time"))), key=lambda r: r["time"])
        for name, run in stages.items()
    }
    if not any(timed.values()):
        return None
    spans = {name: span for name, run in stages.items() if (span := stage_span(run))}
    t0 = min(span[0] for span in spans.values())

    def minutes(t: float) -> float:
        return (float(t) - t0) / 60

    fig = Figure(figsize=(9, 4.5))
    ax = fig.subplots()
    for i, (name, (a, b)) in enumerate(spans.items()):
        ax.axvspan(minutes(a), minutes(b), color="tab:gray", alpha=0.08 + 0.08 * (i % 2), lw=0)
        ax.axvline(minutes(a), color="tab:gray", linewidth=0.6)
        ax.text(
            (minutes(a) + minutes(b)) / 2,
            1.01 + 0.05 * (i % 2),  # staggered: labels of short neighbouring stages stay apart
            name,
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize="small",
        )
    for key, label, color in _STAGE_CURVES:
        first = True
        for rows in timed.values():
            pts = [(minutes(r["time"]), float(r[key]) / _GIB) for r in rows if _is_num(r.get(key))]
            if pts:  # one line per stage: no line drawn across a gap between stages
                marker = "." if len(pts) < 30 else None
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, color=color, marker=marker, label=label if first else None)
                first = False
    for key, label, color in _THRESHOLDS:
        per = {n: v for n, rows in timed.items() if (v := _last(rows, key)) is not None}
        if len(set(per.values())) == 1:
            ax.axhline(next(iter(per.values())) / _GIB, color=color, ls="--", lw=1, label=label)
            continue
        for j, (name, value) in enumerate(per.items()):
            a, b = spans[name]
            lab = label if j == 0 else None
            ax.hlines(value / _GIB, minutes(a), minutes(b), colors=color, ls="--", lw=1, label=lab)
    if budget is not None:
        ax.axhline(budget / _GIB, color="black", lw=1.2, label=f"budget {format_bytes(budget)}")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("minutes since the first record")
    ax.set_ylabel("GiB")
    ax.set_title("memory across stages", pad=24)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    return out
