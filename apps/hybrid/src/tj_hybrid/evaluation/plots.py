"""The phases' pictures: learning curves (one panel per logged metric against the iteration) and,
per held-out set, each policy's mean of a metric with its spread over episodes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["plot_heldout", "plot_learning", "series"]


def _figure() -> Any:
    from matplotlib.figure import Figure  # tj-monitor[report]: a dependency of the app

    return Figure


def series(rows: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of ``key`` in a metrics log's rows, where it was logged as a number (NaN,
    e.g. an iteration without a finished episode, left out)."""
    pts = [(r["step"], r[key]) for r in rows
           if isinstance(r.get(key), (int, float)) and r[key] == r[key]]  # fmt: skip
    return [p[0] for p in pts], [p[1] for p in pts]


def plot_learning(rows: Sequence[Mapping[str, Any]], out: Path,
                  panels: Sequence[tuple[str, str]], xlabel: str) -> Path | None:  # fmt: skip
    """``learning.png``: one panel per (metric key, title) that the log holds, against the
    iteration; None when it holds none."""
    drawn = [(title, *series(rows, key)) for key, title in panels]
    drawn = [d for d in drawn if d[1]]
    if not drawn:
        return None
    fig = _figure()(figsize=(10, 2.6 * ((len(drawn) + 1) // 2)))
    axes = fig.subplots((len(drawn) + 1) // 2, 2, squeeze=False).ravel()
    for ax, (title, x, y) in zip(axes, drawn, strict=False):
        ax.plot(x, y, marker="o" if len(x) < 40 else None)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    for ax in axes[len(drawn):]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out


def plot_heldout(evaluation: Mapping[str, Any], out: Path, metric: str = "avg_delay",
                 highlight: Mapping[str, str] | None = None) -> Path:  # fmt: skip
    """``heldout.png``: per held-out set, each policy's mean ``metric`` with min-max whiskers;
    ``highlight``: policy -> bar colour (the others grey)."""
    highlight = highlight or {}
    labels = list(evaluation)
    fig = _figure()(figsize=(5 * len(labels), 3.8))
    axes = fig.subplots(1, len(labels), squeeze=False)[0]
    for ax, label in zip(axes, labels, strict=True):
        summary = evaluation[label]["summary"]
        names = list(summary)
        mean = [summary[p][metric]["mean"] for p in names]
        low = [m - summary[p][metric]["min"] for p, m in zip(names, mean, strict=True)]
        high = [summary[p][metric]["max"] - m for p, m in zip(names, mean, strict=True)]
        colors = [highlight.get(p, "tab:gray") for p in names]
        ax.bar(names, mean, yerr=[low, high], color=colors, capsize=4)
        ax.set_title(label.replace("_", " "))
        ax.set_ylabel(f"{metric} (s)" if "delay" in metric or "time" in metric else metric)
        ax.tick_params(axis="x", labelrotation=20)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out
