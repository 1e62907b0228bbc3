"""docs/BENCHMARKS.md is what `apps/bench report` renders from the template and the committed
results files (docs/results/*.json): edit the template, re-render, commit both."""

from __future__ import annotations

from pathlib import Path

from tj_bench import Results
from tj_bench.report import parse_labelled, render_report

DOCS = Path(__file__).resolve().parents[3] / "docs"
# The order matters (a later file's suite wins; a labelled one's suites are SUITE@LABEL): the
# page's command lists them in this order.
RESULTS = ("quant.json", "monitor-dist.json", "data-loader-cache-models.json", "phase1-3.json",
           "env.json", "variants=phase2-variants.json", "grid=phase2-grid.json",
           "fresh=phase1-fresh.json", "ceiling=env-ceiling.json",
           "imitation=phase2-imitation.json", "sims1=phase2-sims1.json",
           "sims8=phase2-sims8.json", "pressure=phase2-reward-pressure.json",
           "dwt=phase2-reward-diff-waiting-time.json", "delay=phase2-reward-delay.json",
           "la=phase2-lookahead.json", "law=phase2-lookahead-weighted.json",
           "dzt=phase2-dz-teacher.json", "more=phase2-more-demos.json",
           "multinode.json", "imitation.json", "griddz=phase2-grid-dz-teacher.json",
           "gridocc=phase2-grid-occ-teacher.json")  # fmt: skip


def test_benchmarks_md_is_the_rendered_template() -> None:
    labelled = [parse_labelled(arg) for arg in RESULTS]
    results = [Results.load(DOCS / "results" / name) for _, name in labelled]
    expected = render_report((DOCS / "BENCHMARKS.template.md").read_text(), results,
                             assets=[DOCS / "results"] * len(RESULTS), page_dir=DOCS,
                             labels=[label for label, _ in labelled])  # fmt: skip
    command = " ".join(f"{label}=docs/results/{name}" if label else f"docs/results/{name}"
                       for label, name in labelled)  # fmt: skip
    assert (DOCS / "BENCHMARKS.md").read_text() == expected, (
        f"docs/BENCHMARKS.md is stale: uv run apps/bench report {command} --output docs/BENCHMARKS.md"
    )
