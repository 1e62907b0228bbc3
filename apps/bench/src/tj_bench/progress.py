"""The rich progress bar suites draw through ``SuiteContext.progress`` (one task per loop)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["rich_progress"]


@contextmanager
def rich_progress() -> Iterator[Any]:
    """``with rich_progress() as track: for x in track(items, "what", total): ...``"""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TimeRemainingColumn())  # fmt: skip
    with Progress(*columns, transient=True) as progress:

        def track(items: Iterable[Any], description: str, total: int | None) -> Iterator[Any]:
            task = progress.add_task(description, total=total)
            try:
                for item in items:
                    yield item
                    progress.advance(task)
            finally:
                progress.remove_task(task)

        yield track
