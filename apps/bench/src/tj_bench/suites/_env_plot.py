"""``env_speed.png``: env steps per second, one panel per backend (rows) and SUMO-output setting
(columns), bars per scenario and env (tj-rl variants, sumo-rl when measured): the median with
the min-max range of the rounds.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable
from pathlib import Path

from tj_bench.suites._env_plan import Cell

__all__ = ["plot_speed"]


def plot_speed(
    path: Path, steps_per_s: dict[Cell, list[float]], scenarios: dict[str, str], title: str
) -> Path:
    """Write the bar chart of ``steps_per_s`` (values per round of each cell) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    backends = sorted({c.backend for c in steps_per_s})
    outputs = sorted({c.outputs for c in steps_per_s})
    impls: list[str] = list(dict.fromkeys(c.impl for c in steps_per_s))
    fig, axes = plt.subplots(
        len(backends),
        len(outputs),
        squeeze=False,
        sharey=True,
        figsize=(max(6.0, 5.5 * len(outputs)), 0.5 + 3.8 * len(backends)),
    )
    width = 0.8 / len(impls)
    colors = {impl: f"C{k}" for k, impl in enumerate(impls)}  # the same colour in every panel
    medians = [statistics.median(v) for v in steps_per_s.values() if v]
    log = bool(medians) and max(medians) > 10 * min(medians)  # far apart: log in every panel
    for (i, backend), (j, output) in itertools.product(enumerate(backends), enumerate(outputs)):
        ax = axes[i][j]
        for k, impl in enumerate(impls):
            xs, med, lo, hi = [], [], [], []
            for x, name in enumerate(scenarios):
                vals = steps_per_s.get(
                    Cell(scenario=name, backend=backend, outputs=output, impl=impl), []
                )
                if vals:
                    m = statistics.median(vals)
                    xs.append(x + (k - (len(impls) - 1) / 2) * width)
                    med.append(m)
                    lo.append(m - min(vals))
                    hi.append(max(vals) - m)
            if xs:
                ax.bar(xs, med, width, yerr=[lo, hi], capsize=2, color=colors[impl])
        ax.set_xticks(range(len(scenarios)), _wrap(scenarios.values()), fontsize=8)
        if log:  # bars from the decade below the smallest median
            ax.set_yscale("log")
            ax.set_ylim(bottom=10 ** math.floor(math.log10(min(medians) * 0.8)))
        ax.set_title(f"{backend}, SUMO outputs {output}", fontsize=10)
        ax.set_ylabel("env steps/s (higher is better)")
        ax.grid(axis="y", alpha=0.3, which="both")
    handles = [Patch(color=colors[i], label=_label(i)) for i in impls]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(impls), 6), fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _label(impl: str) -> str:
    return impl if impl == "sumo-rl" else f"tj-rl {impl}"


def _wrap(labels: Iterable[str]) -> list[str]:
    return [x.replace(", ", "\n", 1) for x in labels]
