"""Progress bars with an ETA for long loops: one set of rich columns for every caller (the
trainer's phases, the benchmark runner's suites), and ``track_progress`` for loops run inside
one ``with`` block, a bar per loop. rich comes with the ``report`` extra, imported on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from tj_monitor._extras import require

__all__ = ["Track", "progress_bar", "track_progress"]

#: ``track(items, description, total)`` yields ``items`` and advances their bar.
Track = Callable[[Iterable[Any], str, "int | None"], Iterator[Any]]


def progress_bar(*, transient: bool = False, console: Any = None, disable: bool = False) -> Any:
    """A ``rich.progress.Progress`` (not started) with the columns description, bar, done/total,
    the task's ``info`` field (``add_task(..., info="")``), elapsed time and ETA; on ``console``
    (default: rich's, on stdout); ``disable``: shows nothing (a caller's "no progress" option)."""
    rp = require("rich.progress", "tj_monitor.progress_bar")
    return rp.Progress(
        rp.TextColumn("[bold]{task.description}"), rp.BarColumn(), rp.MofNCompleteColumn(),
        rp.TextColumn("{task.fields[info]}"), rp.TimeElapsedColumn(), rp.TextColumn("eta"),
        rp.TimeRemainingColumn(), transient=transient, console=console, disable=disable,
    )  # fmt: skip


@contextmanager
def track_progress(*, transient: bool = True) -> Iterator[Track]:
    """``with track_progress() as track: for x in track(items, "what", total): ...``; each
    loop's bar goes when the loop ends (``transient``: the whole display when the block ends)."""
    with progress_bar(transient=transient) as progress:

        def track(items: Iterable[Any], description: str, total: int | None) -> Iterator[Any]:
            task = progress.add_task(description, total=total, info="")
            try:
                for item in items:
                    yield item
                    progress.advance(task)
            finally:
                progress.remove_task(task)

        yield track
