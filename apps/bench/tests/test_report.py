"""BENCHMARKS.md from a template: placeholders filled from results, later files win, and a
placeholder that nothing measured is an error naming it (never a stale number)."""

from __future__ import annotations

import pytest

from tj_bench import Figure, SuiteResult
from tj_bench.report import HEADER, TemplateError, render_report


def suite(name: str, *values: float, status: str = "ok") -> SuiteResult:
    return SuiteResult(suite=name, status=status, error="boom" if status != "ok" else "",  # type: ignore[arg-type]
                       figures=[Figure(name="read/mmap", unit="samples/s", better="higher",
                                       values=list(values))])  # fmt: skip


def test_placeholders_are_filled(make_results) -> None:
    template = ("On {{machine}}: {{value:data/read/mmap}} or {{ range:data/read/mmap }} "
                "over {{runs:data}} runs.\n{{table:data}}\n{{suite:data}}")  # fmt: skip
    text = render_report(template, [make_results(suite("data", 1000, 2000, 1500))])
    assert text.startswith(HEADER)
    assert "test cpu, 2 CPUs" in text
    assert ": 1,500 or 1,500 [1,000, 2,000] over 3 runs." in text
    assert "| read/mmap | 1,500 [1,000, 2,000] | samples/s | higher |" in text
    assert "{{" not in text


def test_later_results_replace_a_suite_but_not_with_a_failure(make_results) -> None:
    first = make_results(suite("data", 10), suite("env", 1))
    second = make_results(suite("data", 20))
    failed = make_results(suite("env", status="failed"))
    text = render_report("{{value:data/read/mmap}} {{value:env/read/mmap}}", [first, second, failed])
    assert text.endswith("20.0 1.00")


def test_unfillable_placeholders_are_all_named(make_results) -> None:
    res = make_results(suite("data", 1), suite("env", status="failed"),
                       SuiteResult(suite="quant", figures=[Figure(name="f", unit="x", values=[float("nan")])]))  # fmt: skip
    with pytest.raises(TemplateError) as err:
        render_report("{{value:data/nope}} {{table:cache}} {{value:env/read/mmap}} {{value:quant/f}}", [res])
    message = str(err.value)
    for part in ("has no figure 'nope'", "no suite 'cache'", "suite 'env' failed", "not measured"):
        assert part in message


def test_machine_line_keeps_a_dirty_marker(make_results) -> None:
    from tj_bench.markdown import machine_line

    res = make_results()
    res.commit = "0123456789abcdef0123+dirty"
    assert "commit 0123456789ab+dirty;" in machine_line(res)
    res.commit = None
    assert "commit unknown;" in machine_line(res)


def test_suite_pngs_link_from_the_page_and_must_exist(make_results, tmp_path) -> None:
    """A suite's PNGs lie beside its results.json; the page links them relative to its own
    folder, and a PNG that was not copied along is an error naming it."""
    with_png = suite("loader", 1.0)
    with_png.artifacts.append("loader_sweep.png")
    res = make_results(with_png)
    results_dir = tmp_path / "docs" / "results"
    results_dir.mkdir(parents=True)
    with pytest.raises(TemplateError, match=r"loader_sweep\.png is missing"):
        render_report("{{suite:loader}}", [res], assets=[results_dir], page_dir=tmp_path / "docs")
    (results_dir / "loader_sweep.png").write_bytes(b"png")
    text = render_report("{{suite:loader}}", [res], assets=[results_dir],
                         page_dir=tmp_path / "docs")  # fmt: skip
    assert "![loader_sweep.png](results/loader_sweep.png)" in text
    assert "![loader_sweep.png](loader_sweep.png)" in render_report("{{suite:loader}}", [res])


def test_a_labelled_file_adds_its_suites_under_the_label(make_results) -> None:
    """Phase 2 measured on two scenarios: the labelled file's suite is ``phase2@grid`` and
    does not replace the unlabelled ``phase2``; an unknown label is an error naming it."""
    default = make_results(suite("phase2", 9.0))
    grid = make_results(suite("phase2", 14.0))
    text = render_report("{{value:phase2/read/mmap}} {{value:phase2@grid/read/mmap}}",
                         [default, grid], labels=[None, "grid"])  # fmt: skip
    assert text.endswith("9.00 14.0")
    with pytest.raises(TemplateError, match="no suite 'phase2@heavy'"):
        render_report("{{value:phase2@heavy/read/mmap}}", [default, grid], labels=[None, "grid"])
    with pytest.raises(ValueError, match="each at most once"):
        render_report("x", [default, grid], labels=["grid", "grid"])


def test_labels_on_the_command_line() -> None:
    from tj_bench.report import parse_labelled

    assert parse_labelled("grid=out/results.json") == ("grid", "out/results.json")
    assert parse_labelled("out/results.json") == (None, "out/results.json")
    for bad in ("=out.json", "a b=out.json", "grid="):
        with pytest.raises(ValueError, match=r"LABEL=RESULTS\.json"):
            parse_labelled(bad)
