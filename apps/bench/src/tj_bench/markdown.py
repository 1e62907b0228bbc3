"""Results as markdown: the machine line and one table per suite (median [min, max])."""

from __future__ import annotations

import math

from tj_bench.results import Figure, Results, SuiteResult

__all__ = ["format_range", "format_value", "machine_line", "render_results", "render_suite",
           "suite_table"]  # fmt: skip


def format_value(x: float) -> str:
    """Three significant figures, thousands separated; '-' for not measured."""
    if x is None or math.isnan(x):
        return "-"
    if x == 0:
        return "0"
    mag = abs(x)
    if mag >= 1000:
        return f"{x:,.0f}"
    if mag >= 100:
        return f"{x:.0f}"
    if mag >= 10:
        return f"{x:.1f}"
    if mag >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def format_range(f: Figure) -> str:
    """``median [min, max]``, the median alone when they are one value; '-' for not measured."""
    if not f.measured:
        return "-"
    if f.min == f.max:
        return format_value(f.median)
    return f"{format_value(f.median)} [{format_value(f.min)}, {format_value(f.max)}]"


def machine_line(results: Results) -> str:
    m = results.machine
    gpus = ", ".join(g["name"] for g in m.get("gpus", [])) or "no GPU"
    ram = m.get("ram_bytes", 0) / 2**30
    limit = m.get("memory_limit_bytes")
    lim = f" (cgroup limit {limit / 2**30:.1f} GiB)" if limit else ""
    wsl = ", WSL2" if m.get("wsl2") else ""
    head, plus, dirty = (results.commit or "unknown").partition("+")
    commit = head[:12] + plus + dirty  # keep "+dirty": numbers from uncommitted code say so
    return (f"{m.get('cpu_model', '?')}, {m.get('cpus', '?')} CPUs, {ram:.0f} GiB RAM{lim}, {gpus}"
            f"{wsl}; {m.get('os', '')}, Python {m.get('python', '')}; torch "
            f"{results.versions.get('torch', '?')}; commit {commit}; "
            f"{'quick, ' if results.quick else ''}{results.runs} run(s); {results.created}")  # fmt: skip


def suite_table(result: SuiteResult) -> str:
    """``| figure | unit | better | median [min, max] |`` for one suite."""
    lines = ["| figure | median [min, max] | unit | better |", "|---|---:|---|---|"]
    for f in result.figures:
        why = f" ({f.note})" if f.note and not f.measured else ""
        lines.append(f"| {f.name}{why} | {format_range(f)} | {f.unit} | {f.better or ''} |")
    return "\n".join(lines)


def render_suite(result: SuiteResult, assets: str = "") -> str:
    """The suite's section; ``assets``: the prefix of its PNG links (their folder, from the page)."""
    head = f"### {result.suite}"
    if result.status != "ok":
        first = result.error.strip().splitlines()[0] if result.error.strip() else ""
        return f"{head}\n\n**{result.status}**: {first}\n"
    parts = [head, ""]
    if result.params:
        parts.append("Settings: " + ", ".join(f"{k}={v}" for k, v in result.params.items()) + "\n")
    parts.append(suite_table(result))
    for part, why in result.unavailable.items():
        parts.append(f"\n- not measured: {part} ({why})")
    parts.extend(f"\n- {n}" for n in result.notes)
    parts.extend(f"\n![{a}]({assets}{a})" for a in result.artifacts)
    return "\n".join(parts) + "\n"


def render_results(results: Results) -> str:
    body = [f"# Benchmark results\n\nMachine: {machine_line(results)}\n"]
    body += [render_suite(s) for s in results.suites]
    return "\n".join(body)
