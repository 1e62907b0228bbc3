"""``loader_sweep.png``: each loader setting as a point, batches/s against peak tree PSS (median
throughput, highest peak over the repetitions), with the RAM budget as a vertical line: the
points left of it fit, the fastest of them is what autotune should find.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["SweepPoint", "plot_sweep"]

_STYLE = {  # kind -> (marker, colour, legend)
    "seed_style": ("x", "tab:red", "seed style: DataLoader(shuffle=True), nothing bounded"),
    "tj": ("o", "tab:blue", "same workers x prefetch through build_loader"),
    "plan": ("s", "tab:green", "plan_loader's plan"),
    "autotune": ("*", "tab:purple", "autotune_loader's pick"),
}


@dataclass(frozen=True, kw_only=True)
class SweepPoint:
    label: str  # e.g. "safe 2x2"
    kind: str  # a key of _STYLE
    batches_per_s: float
    peak_pss_mib: float


def plot_sweep(path: Path, points: list[SweepPoint], budget_mib: float, title: str) -> Path:
    """Write the scatter of ``points`` with the budget line to ``path``; returns ``path``."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5))
    ax = fig.subplots()
    for kind, (marker, colour, legend) in _STYLE.items():
        pts = [p for p in points if p.kind == kind]
        if not pts:
            continue
        ax.scatter([p.peak_pss_mib for p in pts], [p.batches_per_s for p in pts], marker=marker,
                   color=colour, s=90 if marker == "*" else 50, label=legend, zorder=3)  # fmt: skip
        for p in pts:
            ax.annotate(p.label, (p.peak_pss_mib, p.batches_per_s), fontsize=7,
                        xytext=(4, 4), textcoords="offset points")  # fmt: skip
    ax.axvline(budget_mib, color="black", linestyle="--", label=f"budget {budget_mib:,.0f} MiB")
    ax.set_xlabel("peak process-tree PSS (MiB, lower is better)")
    ax.set_ylabel("batches/s (higher is better)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path
