"""``uv run apps/bench``: run suites, compare with an old run, render docs/BENCHMARKS.md.

    uv run apps/bench                          # every suite, 3 runs each, into bench-results/
    uv run apps/bench data loader --runs 5     # some suites
    uv run apps/bench --quick                  # every suite at its smallest size (CI)
    uv run apps/bench env --compare old/results.json   # exit 1 when a figure regressed
    uv run apps/bench report results.json [more.json ...] --output docs/BENCHMARKS.md
    uv run apps/bench report results.json grid=grid/results.json   # grid's suites: SUITE@grid
    uv run apps/bench compare new.json old.json
    uv run apps/bench redact results.json --path /scratch/runs=RUNS   # before committing it

Exit status: 0 all well; 1 a suite failed or a figure regressed against --compare; 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tj_bench.compare import compare, render_comparison
from tj_bench.results import Results, ResultsError, SuiteResult
from tj_bench.suites import NAMES

__all__ = ["main"]

DEFAULT_TEMPLATE = Path("docs/BENCHMARKS.template.md")


def _run_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="apps/bench", description="TJ Transport benchmark runner.",
        epilog="Other commands: `apps/bench report RESULTS.json ...`, "
               "`apps/bench compare NEW.json OLD.json`, `apps/bench redact RESULTS.json`. "
               "Suites: " + ", ".join(NAMES),
    )  # fmt: skip
    ap.add_argument("suites", nargs="*", metavar="SUITE", help="suites to run (default: all)")
    ap.add_argument("--quick", action="store_true", help="smallest sizes: checks that suites run")
    ap.add_argument("--runs", type=int, default=None, help="repetitions (default 3; --quick: 1)")
    ap.add_argument("--out", type=Path, default=Path("bench-results"), help="results folder")
    ap.add_argument("--compare", type=Path, help="an old results.json: flag regressions")
    ap.add_argument("--threshold", type=float, default=0.10,
                    help="relative margin outside the old spread that counts as a regression")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="SUITE.OPT=V",
                    help="a suite option, e.g. data.size_gb=1 (repeatable)")
    ap.add_argument("--keep", action="store_true", help="keep generated data under OUT/work")
    ap.add_argument("--list", action="store_true", help="list the suites and their options")
    return ap


def _print_suite(result: SuiteResult) -> None:
    from rich.console import Console

    from tj_bench.markdown import render_suite

    Console(stderr=True).print(f"[bold]{result.suite}[/]: {result.status} in {result.wall_s:.0f} s")
    print(render_suite(result), flush=True)


def _list() -> int:
    from tj_bench.suites import load_suite

    for name in NAMES:
        try:
            suite = load_suite(name)
        except Exception as exc:  # listing must show every suite
            print(f"{name}: cannot load ({type(exc).__name__}: {exc})")
            continue
        print(f"{name}: {suite.summary}")
        for opt, what in suite.options.items():
            print(f"    --set {name}.{opt}=...  {what}")
    return 0


def _run(argv: Sequence[str]) -> int:
    from tj_bench.markdown import render_results
    from tj_bench.runner import RunConfig, parse_sets, run_suites

    ap = _run_parser()
    args = ap.parse_args(argv)
    if args.list:
        return _list()
    suites = tuple(args.suites) or NAMES
    runs = args.runs if args.runs is not None else (1 if args.quick else 3)
    try:
        old = Results.load(args.compare) if args.compare else None
        config = RunConfig(suites=suites, quick=args.quick, runs=runs, out_dir=args.out,
                           options=parse_sets(args.sets, suites), keep=args.keep)  # fmt: skip
    except (ValueError, ResultsError, OSError) as exc:
        ap.error(str(exc))
    results = run_suites(config, show_progress=sys.stderr.isatty(), on_suite=_print_suite)
    (config.out_dir / "results.md").write_text(render_results(results))
    print(f"results: {config.results_path} (markdown: {config.out_dir / 'results.md'})")
    failed = [s for s in results.suites if s.status == "failed"]
    for s in failed:
        print(f"suite {s.suite} FAILED: {s.error}", file=sys.stderr)
    regressed = _compared(results, old, args.threshold, args.compare) if old is not None else 0
    return 1 if failed or regressed else 0


def _compared(new: Results, old: Results, threshold: float, against: Path) -> int:
    """Print the comparison; 1 when a figure regressed (named on stderr), else 0."""
    rows = compare(new, old, threshold)
    print(render_comparison(rows))
    regressed = ", ".join(f"{r.suite}/{r.figure}" for r in rows if r.regressed)
    if regressed:
        print(f"REGRESSED against {against}: {regressed}", file=sys.stderr)
    return 1 if regressed else 0


def _tools_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="apps/bench", description="TJ Transport benchmark runner.")
    sub = ap.add_subparsers(dest="command", required=True)
    cmp = sub.add_parser("compare", description="Compare two results files.")
    cmp.add_argument("new", type=Path)
    cmp.add_argument("old", type=Path)
    cmp.add_argument("--threshold", type=float, default=0.10)
    rep = sub.add_parser("report", description="Render docs/BENCHMARKS.md from results files.")
    rep.add_argument("results", nargs="+", metavar="[LABEL=]RESULTS.json",
                     help="results files (later ones win per suite); a labelled file's suites "
                          "are SUITE@LABEL in the template and replace nothing")  # fmt: skip
    rep.add_argument("--template", type=Path, default=DEFAULT_TEMPLATE)
    rep.add_argument("--output", type=Path, default=None, help="default: print to stdout")
    red = sub.add_parser("redact", description="Replace this machine's paths in a results file.")
    red.add_argument("results", type=Path)
    red.add_argument("--path", dest="rules", action="append", default=[], metavar="PATH=STAND_IN",
                     help="replace PATH wherever it occurs (repeatable)")  # fmt: skip
    red.add_argument("--keep-home", action="store_true", help="leave the home folder as it is")
    red.add_argument("--output", type=Path, default=None, help="default: rewrite RESULTS")
    return ap


def _compare(args: argparse.Namespace) -> int:
    return _compared(Results.load(args.new), Results.load(args.old), args.threshold, args.old)


def _report(args: argparse.Namespace) -> int:
    from tj_bench.report import parse_labelled, render_report

    labelled = [parse_labelled(a) for a in args.results]
    paths = [Path(p) for _, p in labelled]
    loaded = [Results.load(p) for p in paths]
    page_dir = (args.output or Path("page.md")).resolve().parent
    folders = [p.resolve().parent for p in paths]  # a suite's PNGs lie beside it
    text = render_report(args.template.read_text(), loaded, assets=folders, page_dir=page_dir,
                         labels=[x for x, _ in labelled])  # fmt: skip
    if args.output is None:
        print(text)
    else:
        args.output.write_text(text)
        print(f"wrote {args.output}")
    return 0


def _redact(args: argparse.Namespace) -> int:
    from tj_bench.redact import parse_rule, redact_file

    home = None if args.keep_home else str(Path.home())
    out = redact_file(args.results, [parse_rule(r) for r in args.rules], output=args.output,
                      home=home)  # fmt: skip
    print(f"wrote {out}")
    return 0


TOOLS = {"compare": _compare, "report": _report, "redact": _redact}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in TOOLS:
        return _run(argv)
    ap = _tools_parser()
    args = ap.parse_args(argv)
    try:  # ResultsError and TemplateError are ValueErrors: bad usage, exit status 2
        return TOOLS[args.command](args)
    except (OSError, ValueError) as exc:
        ap.error(str(exc))
