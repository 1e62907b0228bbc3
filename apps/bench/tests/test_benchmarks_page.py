"""docs/BENCHMARKS.md is what `apps/bench report` renders from the template and the committed
results files (docs/results/*.json): edit the template, re-render, commit both."""

from __future__ import annotations

from pathlib import Path

from tj_bench import Results
from tj_bench.report import render_report

DOCS = Path(__file__).resolve().parents[3] / "docs"
# The order matters (a later file's suite wins): the page's command lists them in this order.
RESULTS = ("quant.json", "monitor-dist.json", "data-loader-cache-models.json", "phase1-3.json",
           "env.json")


def test_benchmarks_md_is_the_rendered_template() -> None:
    results = [Results.load(DOCS / "results" / name) for name in RESULTS]
    expected = render_report((DOCS / "BENCHMARKS.template.md").read_text(), results,
                             assets=[DOCS / "results"] * len(RESULTS), page_dir=DOCS)  # fmt: skip
    assert (DOCS / "BENCHMARKS.md").read_text() == expected, (
        "docs/BENCHMARKS.md is stale: uv run apps/bench report "
        + " ".join(f"docs/results/{n}" for n in RESULTS)
        + " --output docs/BENCHMARKS.md"
    )
