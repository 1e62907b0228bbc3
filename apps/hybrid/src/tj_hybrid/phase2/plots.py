"""Phase 2's pictures: the learning curve (episode return, entropy, KL, env steps/s per
iteration) and, per held-out set, each policy's average delay with its spread over episodes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["PHASE2_PANELS", "plot_heldout", "plot_learning"]


def _figure() -> Any:
    from matplotlib.figure import Figure  # tj-monitor[report]: a dependency of the app

    return Figure


PHASE2_PANELS = (("episode/return_mean", "episode return (training traffic)"),
                 ("train/entropy", "policy entropy"), ("train/mean_kl", "KL per iteration"),
                 ("env_steps_per_s", "env steps / s"))  # fmt: skip


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and value == value  # NaN: an iteration without episodes


def plot_learning(metrics_jsonl: Path, out: Path,
                  panels: tuple[tuple[str, str], ...] = PHASE2_PANELS,
                  xlabel: str = "PPO iteration") -> Path | None:  # fmt: skip
    """``learning.png``: one panel per (metric key, title) that the run logged, against the
    iteration (phase 2's return, entropy, KL and env steps/s by default)."""
    if not metrics_jsonl.is_file():
        return None
    rows = [json.loads(x) for x in metrics_jsonl.read_text().splitlines() if x.strip()]
    panels = tuple((k, t) for k, t in panels if any(_number(r.get(k)) for r in rows))
    if not panels:
        return None
    fig = _figure()(figsize=(10, 2.6 * ((len(panels) + 1) // 2)))
    axes = fig.subplots((len(panels) + 1) // 2, 2, squeeze=False).ravel()
    for ax, (key, title) in zip(axes, panels, strict=False):
        pts = [(r["step"], r[key]) for r in rows if _number(r.get(key))]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if len(pts) < 40 else None)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out


def plot_heldout(evaluation: dict[str, Any], out: Path, metric: str = "avg_delay",
                 highlight: dict[str, str] | None = None) -> Path:  # fmt: skip
    """``heldout.png``: per held-out set, each policy's mean ``metric`` with min-max whiskers;
    ``highlight``: policy -> bar colour (default: phase 2's policy in green, the rest grey)."""
    highlight = {"phase2": "tab:green"} if highlight is None else highlight
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
