"""The data suite's timed cases: read + collate of batches from each dataset, and collate alone
against PyG's ``Batch.from_data_list``.

A ``Reader`` is prepared (untimed: a stream's iterator and shuffle buffer) then run (timed) once
per repetition; the suite runs all readers inside each repetition, interleaved.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tj_data import StreamingGraphDataset, collate_graphs

__all__ = ["Reader", "batch_reader", "collate_cases", "streaming_reader"]


@dataclass(frozen=True, kw_only=True)
class Reader:
    """``prepare()`` returns the timed run; the run returns the samples it read. ``mb`` is the
    stored size of what one run reads (NaN when the reader picks its own samples)."""

    prepare: Callable[[], Callable[[], int]]
    mb: float


def batch_reader(
    read: Callable[[list[int]], Any], batches: Sequence[list[int]], nbytes: np.ndarray
) -> Reader:
    """Read + collate each of ``batches`` (lists of sample indices) with ``read``."""
    samples = sum(len(b) for b in batches)
    mb = float(sum(int(nbytes[b].sum()) for b in batches)) / 1e6

    def run() -> int:
        for b in batches:
            read(b)
        return samples

    return Reader(prepare=lambda: run, mb=mb)


def streaming_reader(ds: StreamingGraphDataset, n_batches: int) -> Reader:
    """``n_batches`` collated batches of a ``StreamingGraphDataset`` (built with ``batch_size``)
    in its own order; the first batch of each pass (the shuffle buffer filling) is not timed."""
    epoch = [0]

    def prepare() -> Callable[[], int]:
        ds.set_epoch(epoch[0])
        epoch[0] += 1
        it = [iter(ds)]
        next(it[0])

        def run() -> int:
            n = 0
            for _ in range(n_batches):
                try:
                    batch = next(it[0])
                except StopIteration:  # a store smaller than the run: next pass
                    it[0] = iter(ds)
                    batch = next(it[0])
                n += batch.num_graphs
            return n

        return run

    return Reader(prepare=prepare, mb=float("nan"))


def collate_cases(
    samples: Sequence[Sequence[dict[str, Any]]], schema: Any, pyg: bool
) -> dict[str, Callable[[], None]]:
    """``{"tj": collate_graphs over every list, "pyg": Batch.from_data_list over the same lists
    as PyG ``Data``}`` (``pyg`` False: tj only). Conversion to ``Data`` is not timed."""
    cases: dict[str, Callable[[], None]] = {}

    def tj() -> None:
        for lst in samples:
            collate_graphs(lst, schema=schema)

    cases["tj"] = tj
    if pyg:
        from torch_geometric.data import Batch

        from tj_data import sample_to_pyg

        datas = [[sample_to_pyg(s, schema) for s in lst] for lst in samples]

        def theirs() -> None:
            for d in datas:
                Batch.from_data_list(d)

        cases["pyg"] = theirs
    return cases
