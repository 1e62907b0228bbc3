"""DataLoader memory of the data suite: peak process-tree PSS (main + workers) per epoch of a
``DataLoader(persistent_workers=True)`` over one dataset, in a fresh process, so what the suite
held before (in-RAM copies, PyG, the runner) does not count.

``pss_run`` starts this file as a script (it imports tj_data, torch and tj-monitor only) and
reads its one line of JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tj_monitor import parent_death_hook

__all__ = ["DATASETS", "pss_run"]

DATASETS = ("mmap", "hdf5", "chunked", "streaming")


def pss_run(
    name: str, store: Path, *, epochs: int, batch_size: int, workers: int, interval: float = 0.5
) -> dict[str, Any]:
    """``{"idle_pss": bytes before the loader, "epochs": [{"peak_pss", "samples_per_s"}, ...]}``
    for dataset ``name`` (one of ``DATASETS``) over ``store``, measured in a child process."""
    if name not in DATASETS:
        raise ValueError(f"pss dataset {name!r}: expected one of {DATASETS}")
    # -P: the suites' folder is not put on sys.path (its module names would shadow others)
    cmd = [sys.executable, "-P", __file__, name, str(store), str(epochs), str(batch_size),
           str(workers), str(interval)]  # fmt: skip
    # the parent-death signal: no measurement runs on when the suite's process is killed
    proc = subprocess.run(
        cmd, capture_output=True, text=True, check=False, preexec_fn=parent_death_hook()
    )
    if proc.returncode != 0:
        raise RuntimeError(f"DataLoader PSS run ({name}) failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _child(
    name: str, store: str, epochs: int, batch_size: int, workers: int, interval: float
) -> None:
    from torch.utils.data import DataLoader

    from tj_data import (
        ChunkedGraphDataset,
        ChunkShuffleSampler,
        HDF5GraphDataset,
        MmapGraphDataset,
        StreamingGraphDataset,
    )
    from tj_monitor import PeakPssSampler, tree_memory

    kw: dict[str, Any] = {"num_workers": workers, "persistent_workers": workers > 0,
                          "prefetch_factor": 2 if workers > 0 else None}  # fmt: skip
    sampler = None
    if name == "streaming":  # batches collated in the dataset (its workers stream their part)
        ds: Any = StreamingGraphDataset(store, batch_size=batch_size, seed=0)
        idle = tree_memory().pss
        loader = DataLoader(ds, batch_size=None, **kw)
    else:
        if name == "chunked":
            ds = ChunkedGraphDataset(store, cache_chunks=3)
            sampler = ChunkShuffleSampler(ds, seed=0)
        else:
            ds = (HDF5GraphDataset if name == "hdf5" else MmapGraphDataset)(store)
        idle = tree_memory().pss
        loader = DataLoader(ds, batch_size=batch_size, shuffle=sampler is None, sampler=sampler,
                            collate_fn=ds.collate_fn, **kw)  # fmt: skip
    out = []
    for epoch in range(epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        n = 0
        with PeakPssSampler(interval) as peak:
            t0 = time.perf_counter()
            for batch in loader:
                n += batch.num_graphs
            dt = time.perf_counter() - t0
        out.append({"peak_pss": peak.peak_pss, "samples_per_s": n / dt})
    del loader
    print(json.dumps({"idle_pss": idle, "epochs": out}))


if __name__ == "__main__":
    a = sys.argv[1:]
    _child(a[0], a[1], int(a[2]), int(a[3]), int(a[4]), float(a[5]))
