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
        "run (a directory of *.jsonl files or one JSONL file) and write PNG plots.",
    )
    a.add_argument("path", type=Path, help="run directory or JSONL file")
    a.add_argument("--out", type=Path, help="plot directory (default: <run>/analysis)")
    a.add_argument("--no-plots", action="store_true", help="summary only")
    a.add_argument("--json", action="store_true", help="print the summary as JSON")
    a.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="skip malformed lines (counted and listed) instead of failing",
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


def _analyze(args: argparse.Namespace, console: Console) -> int:
    from tj_monitor.analyze import RunFormatError, load_run, summarize
    from tj_monitor.report import plot_run, render_summary

    try:
        run = load_run(args.path, skip_bad_lines=args.skip_bad_lines)
    except RunFormatError as exc:
        hint = "" if args.skip_bad_lines or exc.line is None else " (--skip-bad-lines skips it)"
        print(f"tj-monitor analyze: error: {exc}{hint}", file=sys.stderr)
        return 2
    summary = summarize(run)
    plots: list[Path] = []
    if not args.no_plots:
        base = args.path if args.path.is_dir() else args.path.parent
        out = args.out or (base / "analysis")
        plots = plot_run(run, out)
    if summary.skipped_lines:
        print(
            f"tj-monitor analyze: warning: skipped {len(summary.skipped_lines)} malformed "
            f"line(s): {', '.join(summary.skipped_lines[:5])}",
            file=sys.stderr,
        )
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
