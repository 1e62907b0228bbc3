"""Progress display for long work (imports, verification, benchmark generation).

rich is an optional dependency (extra `progress`): tj-data's core stays numpy/h5py/torch/psutil.
Without rich, progress goes to the `tj_data` logger every ~10% instead of a live bar.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import TypeVar

__all__ = ["progress_iter"]

T = TypeVar("T")
log = logging.getLogger("tj_data")


def progress_iter(
    items: Iterable[T], description: str, *, total: int | None = None, enabled: bool = True
) -> Iterator[T]:
    """Yield `items`, showing a rich progress bar (or log lines) when `enabled`."""
    if not enabled:
        yield from items
        return
    if total is None:
        try:
            total = len(items)  # type: ignore[arg-type]
        except TypeError:
            total = None
    try:
        from rich.progress import track
    except ImportError:
        step = max(1, (total or 10) // 10)
        for i, item in enumerate(items):
            if i % step == 0:
                log.info("%s: %d/%s", description, i, total if total is not None else "?")
            yield item
        return
    yield from track(items, description=description, total=total, transient=False)
