"""`WindowDataset`: T consecutive steps (+ h target steps) of one stream inside one episode.

Streams: without a stream key, an episode is one stream of consecutive samples. With
`stream_key` (a per-sample field such as `intersection`), samples of one episode are split by
that key, so a window follows one intersection through time even when a recorder interleaves
several intersections per decision step. Valid window starts are precomputed as int64 arrays;
a window never crosses an episode boundary. Batches of windows collate to a list of T + h
`GraphBatch`es (one per step; graph b of every step comes from window b).

`transforms` (e.g. a `Normalizer`, an `Augmenter`) run on every step of a collated window batch;
a transform with `apply_window(steps)` gets all steps at once, so its randomness is drawn once
per window where it must be consistent over time. An `Augmenter` with `time_shift` > 0 also moves
each window's start by a random offset inside its stream when the window is read.

A WindowDataset has no position of its own (map-style): its sampler's state is the position
(`tj_data.state`); `fingerprint` identifies the windows for that state.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from tj_data.batch import GraphBatch
from tj_data.collate import BatchTransform, GraphCollator, forward
from tj_data.errors import SampleIndexError, SchemaMismatchError
from tj_data.mapped import GraphDataset
from tj_data.store import SizeIndex

__all__ = ["WindowCollator", "WindowDataset", "match_nodes", "match_nodes_batched"]

Window = list[dict[str, Any]]


class WindowDataset(Dataset[Window]):
    """Windows over a map-style tj-data dataset (Mmap, HDF5 or Chunked).

    Args:
        base: the dataset samples are read from (its batched `__getitems__` is used).
        window: T input steps; horizon: h target steps after them; stride: step between the
            starts of consecutive windows of one stream.
        stream_key: per-sample field that names the stream (None: one stream per episode).
        transforms: applied to each step's GraphBatch after the base dataset's collate.
    """

    def __init__(
        self,
        base: GraphDataset,
        *,
        window: int,
        horizon: int = 0,
        stride: int = 1,
        stream_key: str | None = None,
        transforms: Sequence[BatchTransform] = (),
    ) -> None:
        if window < 1 or horizon < 0 or stride < 1:
            raise ValueError(
                f"window={window}, horizon={horizon}, stride={stride}: need window>=1, horizon>=0, stride>=1"
            )
        self.base, self.window, self.horizon, self.stride = base, window, horizon, stride
        self.stream_key = stream_key
        self.transforms = tuple(transforms)
        self.steps = window + horizon
        store = base.store
        n = len(store)
        ends = store.episode_ends if len(store.episode_ends) else np.array([n], np.int64)
        if len(ends) and ends[-1] != n:  # samples after the last recorded end form one episode
            ends = np.concatenate([ends, [n]])
        episode = np.repeat(np.arange(len(ends)), np.diff(np.concatenate([[0], ends])))
        if stream_key is None:
            self.order = np.arange(n, dtype=np.int64)  # stream position -> sample index
            stream_id = episode
        else:
            if stream_key not in store.schema or store.schema[stream_key].level != "sample":
                raise SchemaMismatchError(
                    f"stream_key {stream_key!r}: expected a per-sample field of the store"
                )
            if store.schema[stream_key].shape != ():
                raise SchemaMismatchError(f"stream_key {stream_key!r}: expected a scalar field")
            keys = np.concatenate(
                [
                    np.asarray(store.shard_arrays(k)[stream_key][...])
                    for k in range(store.num_shards)
                ]
                or [np.zeros(0, np.int64)]
            )
            self.order = np.lexsort((np.arange(n), keys, episode)).astype(np.int64)
            ep_o, key_o = episode[self.order], keys[self.order]
            change = np.concatenate([[True], (ep_o[1:] != ep_o[:-1]) | (key_o[1:] != key_o[:-1])])
            stream_id = np.cumsum(change) - 1
            stream_id = stream_id.astype(np.int64)
        if stream_key is None:
            stream_id = stream_id[self.order]
        # position p starts a window when p + steps - 1 is in the same stream, on the stride grid
        first = (
            np.concatenate([[0], np.flatnonzero(np.diff(stream_id)) + 1])
            if n
            else np.zeros(0, np.int64)
        )
        stream_first = np.repeat(first, np.diff(np.concatenate([first, [n]])))
        pos = (
            np.arange(n - self.steps + 1, dtype=np.int64)
            if n >= self.steps
            else np.zeros(0, np.int64)
        )
        ok = stream_id[pos] == stream_id[pos + self.steps - 1]
        ok &= (pos - stream_first[pos]) % stride == 0
        self.starts = pos[ok]
        self.stream_of_start = stream_id[self.starts]
        # valid start positions of each window's stream (bounds of a time shift)
        last = np.concatenate([first[1:], [n]]) - self.steps if n else np.zeros(0, np.int64)
        stream_last = np.repeat(last, np.diff(np.concatenate([first, [n]])))
        self.start_bounds = (stream_first[self.starts], stream_last[self.starts])

    def __len__(self) -> int:
        return len(self.starts)

    def window_indices(self, windows: Sequence[int] | np.ndarray) -> np.ndarray:
        """Sample indices [len(windows), T + h] of the given windows."""
        w = np.asarray(windows, np.int64).reshape(-1)
        if w.size and (w.min() < -len(self) or w.max() >= len(self)):
            raise SampleIndexError(f"window index out of range for {len(self)} windows")
        pos = self.starts[w]
        for t in self.transforms:
            if getattr(t, "time_shift", 0) > 0:
                pos = t.shift_starts(pos, self.start_bounds[0][w], self.start_bounds[1][w])
        p = pos[:, None] + np.arange(self.steps)[None, :]
        return self.order[p]

    def __getitem__(self, index: int) -> Window:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[Window]:
        idx = self.window_indices(indices)
        flat = self.base.__getitems__(idx.reshape(-1).tolist())  # one sorted, coalesced read
        return [flat[i * self.steps : (i + 1) * self.steps] for i in range(len(idx))]

    @property
    def collate_fn(self) -> WindowCollator:
        return WindowCollator(self.base.collate_fn, self.transforms)

    @property
    def store(self) -> Any:
        return self.base.store

    @property
    def schema(self) -> Any:
        return self.base.schema

    def size_index(self) -> SizeIndex:
        """Nodes, edges and stored bytes of every window: sums over its T + h steps (from the
        store's size index, nothing read)."""
        s = self.base.size_index()
        out = []
        for a in (s.nodes, s.edges, s.nbytes):
            cs = np.concatenate([[0], np.cumsum(a[self.order])])
            out.append(cs[self.starts + self.steps] - cs[self.starts])
        return SizeIndex(nodes=out[0], edges=out[1], nbytes=out[2])

    @property
    def fingerprint(self) -> str:
        """Identity of the windows (store content + window settings): a sampler's saved
        position over other windows is refused."""
        key = [self.base.store.fingerprint, self.window, self.horizon, self.stride]
        key += [self.stream_key, len(self)]
        return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]

    def chunk_layout(self) -> tuple[np.ndarray, np.ndarray]:
        """(windows sorted by the shard of their first sample, offsets of each shard's group):
        lets `DistributedChunkSampler` shuffle windows shard-locally."""
        shard, _ = self.base.store.locate(self.order[self.starts])
        perm = np.argsort(shard, kind="stable").astype(np.int64)
        counts = np.bincount(shard, minlength=self.base.store.num_shards)
        return perm, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def set_epoch(self, epoch: int) -> None:
        forward(self.transforms, "set_epoch", epoch)

    def set_rank(self, rank: int) -> None:
        forward(self.transforms, "set_rank", rank)


class WindowCollator:
    """Windows -> list of T + h GraphBatches; step t holds step t of every window. Then each
    transform runs on the steps: `t.apply_window(steps)` when it has it, else per step."""

    def __init__(self, collate: GraphCollator, transforms: Sequence[BatchTransform] = ()) -> None:
        self.collate = collate
        self.transforms = tuple(transforms)

    def __call__(self, windows: Sequence[Window]) -> list[GraphBatch]:
        n = len(windows[0])
        steps = [self.collate([w[t] for w in windows]) for t in range(n)]
        for tr in self.transforms:
            fn = getattr(tr, "apply_window", None)
            steps = list(fn(steps)) if callable(fn) else [tr(s) for s in steps]
        return steps

    def set_epoch(self, epoch: int) -> None:
        self.collate.set_epoch(epoch)
        forward(self.transforms, "set_epoch", epoch)

    def set_rank(self, rank: int) -> None:
        self.collate.set_rank(rank)
        forward(self.transforms, "set_rank", rank)


def match_nodes(ids_a: np.ndarray, ids_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions (ia, ib) with ids_a[ia] == ids_b[ib] for ids present in both steps (ids unique
    within a step), e.g. the same vehicle at t and t+1."""
    _, ia, ib = np.intersect1d(
        np.asarray(ids_a), np.asarray(ids_b), assume_unique=True, return_indices=True
    )
    return ia.astype(np.int64), ib.astype(np.int64)


def match_nodes_batched(
    a: GraphBatch | Mapping[str, Any], b: GraphBatch | Mapping[str, Any], id_field: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Node positions (ia, ib) of two step batches where graph and per-node id both agree:
    vectorised over the whole batch (torch ops, any device)."""
    ga, gb = _get(a, "batch"), _get(b, "batch")
    ida, idb = _get(a, id_field).long(), _get(b, id_field).long()
    span = int(torch.cat([ida, idb]).max().item()) + 1 if ida.numel() + idb.numel() else 1
    lo = int(torch.cat([ida, idb]).min().item()) if ida.numel() + idb.numel() else 0
    ka, kb = ga * (span - lo) + (ida - lo), gb * (span - lo) + (idb - lo)
    keys, inv = torch.unique(torch.cat([ka, kb]), return_inverse=True)
    pos_a = torch.full((keys.numel(),), -1, dtype=torch.long, device=ka.device)
    pos_b = pos_a.clone()
    pos_a[inv[: ka.numel()]] = torch.arange(ka.numel(), device=ka.device)
    pos_b[inv[ka.numel() :]] = torch.arange(kb.numel(), device=kb.device)
    both = (pos_a >= 0) & (pos_b >= 0)
    return pos_a[both], pos_b[both]


def _get(obj: Any, name: str) -> torch.Tensor:
    return obj[name] if isinstance(obj, Mapping) else getattr(obj, name)
