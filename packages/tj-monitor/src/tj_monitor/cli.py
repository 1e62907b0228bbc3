"""The ``tj-monitor`` command: ``watch`` (live memory view) and ``analyze`` (run summary + plots)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tj_monitor._extras import require

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["main"]


def _fraction_or_bytes(text: str) -> float:
    """0.75 (fraction of the limit), 12e9 or 12G/12GiB (bytes)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}.get(t[-1:], 1)
    try:
        value = float(t[:-1] if scale > 1 else t) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(  # noqa: B904 (argparse prints this message only)
            f"expected a fraction (0.75) or a size (12G), got {text!r}"
        )
    return value


def _bytes(text: str) -> float:
    """A size: 16e9 or 16G/16GiB (bytes; a fraction has no limit to be a fraction of here)."""
    value = _fraction_or_bytes(text)
    if value <= 1:
        raise argparse.ArgumentTypeError(f"expected a size (16G), got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tj-monitor", description="Memory/GPU monitoring and run analysis for TJ Transport."
    )
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser(
        "watch",
        help="live view of a process tree's RAM/PSS/swap/shm and GPU memory",
        description="Live view of memory. Without --pid or a command: the system only. "
        "Example: tj-monitor watch -- python train.py",
    )
    w.add_argument("--pid", type=int, help="watch this process and its descendants")
    w.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes")
    w.add_argument(
        "--warn",
        type=_fraction_or_bytes,
        default=0.75,
        help="warn line: fraction of the limit or a size like 12G (default 0.75)",
    )
    w.add_argument(
        "--cleanup",
        type=_fraction_or_bytes,
        default=0.875,
        help="cleanup line: fraction of the limit or a size (default 0.875)",
    )
    w.add_argument("--once", action="store_true", help="print one sample and exit")
    w.add_argument("--json", action="store_true", help="JSON (one object per sample) for scripts")
    w.add_argument("--count", type=int, help="stop after this many refreshes")
    w.add_argument("--top", type=int, default=8, help="processes listed (default 8)")
    w.add_argument(
        "--max-cpu",
        type=float,
        default=0.05,
        help="CPU budget for PSS reads, fraction of one core (default 0.05); RSS is read every time",
    )
    w.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ...: start CMD and watch it")
    a = sub.add_parser(
        "analyze",
        help="summary and PNG plots of a run directory or JSONL file",
        description="Summarise loss, lr, throughput, data-wait fraction and peak memory of a "
        "run (a directory of *.jsonl files or one JSONL file) and write PNG plots. A directory "
        "with no *.jsonl of its own is read as a run made of stages: each subfolder with "
        "*.jsonl files (directly or in logs/) is one, summarised in turn and compared in one "
        "table, with the memory curve across all of them.",
    )
    a.add_argument("path", type=Path, help="run directory (or staged run) or JSONL file")
    a.add_argument("--out", type=Path, help="plot directory (default: <run>/analysis)")
    a.add_argument("--no-plots", action="store_true", help="summary only")
    a.add_argument("--json", action="store_true", help="print the summary as JSON")
    a.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="skip malformed lines (counted and listed) instead of failing",
    )
    a.add_argument(
        "--budget",
        type=_bytes,
        help="memory budget drawn on a staged run's memory plot, a size like 16G",
    )
    return p


def _watch(args: argparse.Namespace, console: Console) -> int:
    from tj_monitor.watch import WatchOptions, watch

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    try:
        opts = WatchOptions(
            pid=args.pid,
            cmd=cmd,
            interval_s=args.interval,
            warn=args.warn,
            cleanup=args.cleanup,
            once=args.once,
            as_json=args.json,
            count=args.count,
            top=args.top,
            max_cpu_fraction=args.max_cpu,
        )
    except ValueError as exc:
        print(f"tj-monitor watch: error: {exc}", file=sys.stderr)
        return 2
    return watch(opts, console=console)


def _load_error(args: argparse.Namespace, exc: Exception) -> int:
    line = getattr(exc, "line", None)
    hint = "" if args.skip_bad_lines or line is None else " (--skip-bad-lines skips it)"
    print(f"tj-monitor analyze: error: {exc}{hint}", file=sys.stderr)
    return 2


def _warn_skipped(skipped: list[str]) -> None:
    if skipped:
        print(
            f"tj-monitor analyze: warning: skipped {len(skipped)} malformed "
            f"line(s): {', '.join(skipped[:5])}",
            file=sys.stderr,
        )


def _is_staged(path: Path) -> bool:
    """A directory with no *.jsonl of its own: read as stages (load_stages says if there are)."""
    return path.is_dir() and not any(p.is_file() for p in path.glob("*.jsonl"))


def _analyze_stages(args: argparse.Namespace, console: Console) -> int:
    from tj_monitor.analyze import RunFormatError
    from tj_monitor.report import plot_memory_stages, plot_run, render_stages
    from tj_monitor.stages import load_stages, summarize_stages

    try:
        stages = load_stages(args.path, skip_bad_lines=args.skip_bad_lines)
    except RunFormatError as exc:
        return _load_error(args, exc)
    staged = summarize_stages(stages, source=args.path)
    plots: list[Path] = []
    if not args.no_plots:
        out = args.out or (args.path / "analysis")
        for name, run in stages.items():
            plots += plot_run(run, out / name)
        memory = plot_memory_stages(stages, out / "memory_stages.png", budget=args.budget)
        plots += [memory] if memory is not None else []
    _warn_skipped([line for s in staged.stages.values() for line in s.skipped_lines])
    if args.json:
        console.out(json.dumps({**staged.to_dict(), "plots": [str(p) for p in plots]}))
    else:
        console.print(render_stages(staged))
        for p in plots:
            console.print(f"plot: {p}", markup=False, highlight=False)
    return 0


def _analyze(args: argparse.Namespace, console: Console) -> int:
    from tj_monitor.analyze import RunFormatError, load_run, summarize
    from tj_monitor.report import plot_run, render_summary

    if _is_staged(args.path):
        return _analyze_stages(args, console)
    try:
        run = load_run(args.path, skip_bad_lines=args.skip_bad_lines)
    except RunFormatError as exc:
        return _load_error(args, exc)
    summary = summarize(run)
    plots: list[Path] = []
    if not args.no_plots:
        base = args.path if args.path.is_dir() else args.path.parent
        out = args.out or (base / "analysis")
        plots = plot_run(run, out)
    _warn_skipped(summary.skipped_lines)
    if args.json:
        console.out(json.dumps({**summary.to_dict(), "plots": [str(p) for p in plots]}))
    else:
        console.print(render_summary(summary))
        for p in plots:
            console.print(f"plot: {p}", markup=False, highlight=False)
    return 0


def main(argv: Sequence[str] | None = None, *, console: Console | None = None) -> int:
    """Entry point; returns the exit code (2 for bad input)."""
    args = _parser().parse_args(argv)
    console = console or require("rich.console", "the tj-monitor command").Console()
    if args.command == "watch":
        return _watch(args, console)
    return _analyze(args, console)
