"""Memory curves: bounded in-memory history, CSV/JSONL export and a PNG plot.

The history must not become the memory problem it watches: it keeps at most ``capacity`` samples
and, when full, drops every other one and halves its sampling rate, so a week-long run keeps its
whole shape at bounded size (stream every sample to disk with ``MonitorConfig.jsonl_path`` when
full resolution matters).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from tj_monitor.atomic import atomic_write_text
from tj_monitor.sample import MemorySample

__all__ = ["SampleHistory", "plot_rows", "save_rows"]


class SampleHistory:
    """Append-only sample list of bounded size that decimates itself when full."""

    def __init__(self, capacity: int) -> None:
        if capacity < 2:
            raise ValueError(f"capacity must be >= 2, got {capacity}")
        self.capacity = capacity
        self.stride = 1
        self._seen = 0
        self._items: list[MemorySample] = []

    def append(self, sample: MemorySample) -> None:
        keep = self._seen % self.stride == 0
        self._seen += 1
        if not keep:
            return
        self._items.append(sample)
        if len(self._items) > self.capacity:
            self._items = self._items[::2]
            self.stride *= 2

    def snapshot(self) -> list[MemorySample]:
        return list(self._items)

    def __len__(self) -> int:
        return len(self._items)


def save_rows(path: Path, rows: Sequence[Mapping[str, object]]) -> Path:
    """Write flat rows as CSV (``.csv``) or JSON lines (``.jsonl``), atomically."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        text = "".join(json.dumps(dict(r)) + "\n" for r in rows)
    elif suffix == ".csv":
        columns: dict[str, None] = {}
        for r in rows:
            columns.update(dict.fromkeys(r))
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        text = buf.getvalue()
    else:
        raise ValueError(f"{path}: unsupported format {suffix!r}; use .csv or .jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    return path


_GIB = 2**30


def _series(rows: Sequence[Mapping[str, object]], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    t0 = next((float(r["time"]) for r in rows if isinstance(r.get("time"), int | float)), 0.0)
    for r in rows:
        t, v = r.get("time"), r.get(key)
        if isinstance(t, int | float) and isinstance(v, int | float):
            xs.append(float(t) - t0)
            ys.append(float(v) / _GIB)
    return xs, ys


def plot_rows(
    path: Path,
    rows: Sequence[Mapping[str, object]],
    *,
    lines: Mapping[str, float | None] | None = None,
    title: str = "memory",
) -> Path:
    """PNG of the memory curve (GiB over seconds) with horizontal lines (warn, cleanup, limit).

    Draws tree PSS/USS/RSS, memory used against the limit, swap and /dev/shm; a second panel
    shows CUDA allocated/reserved per device when the rows have them.
    """
    from tj_monitor._extras import require

    # matplotlib comes with the report extra; Figure, no pyplot: never touches the host's backend
    Figure = require("matplotlib.figure", "tj_monitor.curves.plot_rows").Figure

    keys = [
        k for k in _keys(rows) if k.startswith("cuda") and k.endswith(("_allocated", "_reserved"))
    ]
    ncols = 2 if keys else 1
    fig = Figure(figsize=(7 * ncols, 4.2))
    axes = fig.subplots(1, ncols, squeeze=False)
    ax = axes[0][0]
    for key, label in (
        ("tree_pss", "tree PSS"),
        ("tree_uss", "tree USS"),
        ("tree_rss", "tree RSS (double-counts shared)"),
        ("container_used", "used against limit"),
        ("swap_used", "swap used"),
        ("shm_used", "/dev/shm used"),
    ):
        xs, ys = _series(rows, key)
        if xs and any(ys):
            ax.plot(xs, ys, label=label, linestyle=":" if key == "tree_rss" else "-")
    styles = {"limit": ("black", "-"), "cleanup": ("tab:red", "--"), "warn": ("tab:orange", "--")}
    for name, value in (lines or {}).items():
        if value is not None:
            color, style = styles.get(name, ("gray", "--"))
            ax.axhline(value / _GIB, color=color, linestyle=style, linewidth=1, label=name)
    ax.set_xlabel("seconds")
    ax.set_ylabel("GiB")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="upper left")
    if keys:
        gx = axes[0][1]
        for key in keys:
            xs, ys = _series(rows, key)
            gx.plot(xs, ys, label=key)
        gx.set_xlabel("seconds")
        gx.set_ylabel("GiB")
        gx.set_title("CUDA")
        gx.grid(alpha=0.3)
        gx.legend(fontsize="small", loc="upper left")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def _keys(rows: Iterable[Mapping[str, object]]) -> list[str]:
    seen: dict[str, None] = {}
    for r in rows:
        seen.update(dict.fromkeys(r))
    return list(seen)
