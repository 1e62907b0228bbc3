"""tj-bench: the benchmark runner. One command measures every claim of docs/BENCHMARKS.md into one
results format (machine, versions, commit, median/min/max per figure), compares two runs and
renders the benchmark page from a template.

Suites live in ``tj_bench.suites`` (one module each, a ``SUITE``); they call the packages'
public APIs only.
"""

from importlib import metadata as _metadata

from tj_bench.compare import Comparison, compare, render_comparison
from tj_bench.measure import MIB, interleaved, timed
from tj_bench.results import SCHEMA, Figure, Results, ResultsError, SuiteResult
from tj_bench.runner import RunConfig, parse_sets, run_suites
from tj_bench.suite import Suite, SuiteContext, Unavailable

__version__ = _metadata.version("tj-bench")

__all__ = [
    "MIB",
    "SCHEMA",
    "Comparison",
    "Figure",
    "Results",
    "ResultsError",
    "RunConfig",
    "Suite",
    "SuiteContext",
    "SuiteResult",
    "Unavailable",
    "compare",
    "interleaved",
    "parse_sets",
    "render_comparison",
    "run_suites",
    "timed",
]
