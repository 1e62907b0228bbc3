"""Verified reuse of a store: each array hashed once, a `verified.json` marker keyed by size and
mtime_ns; a changed file is hashed again and a corrupt one named; bad markers are rewritten."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import h5py
import pytest
from tjdata_testutil import write_store

from tj_data import GraphStore, StoreCorruptError
from tj_data.verify import MARKER


class CountingSha256:
    """hashlib.sha256 factory that counts the arrays it is asked to hash."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return hashlib.sha256()


def _age(path: Path, seconds: int = 3600) -> None:
    """Make every file look written `seconds` ago: a store recorded by an earlier run (a file
    modified within the racy window of its hash is, by design, hashed again)."""
    ns = time.time_ns() - seconds * 1_000_000_000
    for f in path.rglob("*"):
        if f.is_file():
            os.utime(f, ns=(ns, ns))


def _arrays(store: GraphStore) -> int:
    return sum(len(s.files) for s in store.manifest.shards)


def _corrupt(path: Path, backend: str) -> str:
    """Flip data of shard-00000's x in place (same size); returns the name the error must give."""
    if backend == "npy":
        f = path / "shard-00000" / "x.npy"
        with open(f, "r+b") as fh:
            fh.seek(-3, os.SEEK_END)
            b = fh.read(1)
            fh.seek(-3, os.SEEK_END)
            fh.write(bytes([b[0] ^ 0x01]))
        return r"shard-00000/x\.npy: sha256"
    with h5py.File(path / "data-00000.h5", "r+") as h:
        h["shard-00000/x"][0, 0] += 1.0
    return r"data-00000\.h5:shard-00000/x: sha256"


@pytest.fixture
def store_path(tmp_path: Path, backend: str) -> Path:
    path = tmp_path / "s"
    write_store(path, 60, shard_size=16, backend=backend, seed=3)
    _age(path)
    return path


def test_marker_hit_reads_nothing_and_a_flip_is_named(store_path: Path, backend: str) -> None:
    store = GraphStore.open(store_path)
    first = CountingSha256()
    report = store.verify(marker=True, hasher=first)
    assert first.calls == report.hashed == _arrays(store) and report.reused == 0
    assert (store_path / MARKER).is_file()
    again = CountingSha256()
    report = store.verify(marker=True, hasher=again)
    assert again.calls == 0 and report.reused == _arrays(store)  # a marker hit reads no array
    GraphStore.open(store_path, verify="once")  # the cheap check of a reused store passes

    store.close()  # HDF5: a file open for reading cannot be opened for writing
    match = _corrupt(store_path, backend)  # changes the file's mtime: the marker no longer holds
    GraphStore.open(store_path)  # sizes unchanged: the cheap validation cannot see it
    with pytest.raises(StoreCorruptError, match=match):
        GraphStore.open(store_path, verify="once")
    after = CountingSha256()
    with pytest.raises(StoreCorruptError, match=match):
        GraphStore.open(store_path).verify(marker=True, hasher=after)
    # only the changed file is read again (HDF5: the arrays of the changed container, up to x)
    assert (
        after.calls == 1
        if backend == "npy"
        else 1 <= after.calls <= len(store.manifest.shards[0].files)
    )


def test_truncated_or_garbage_marker_is_ignored_and_rewritten(store_path: Path) -> None:
    store = GraphStore.open(store_path)
    store.verify(marker=True)
    good = (store_path / MARKER).read_text()
    for bad in (good[: len(good) // 2], "garbage", json.dumps({"format": "other"}), "[]"):
        (store_path / MARKER).write_text(bad)
        counter = CountingSha256()
        assert store.verify(marker=True, hasher=counter).hashed == _arrays(store)
        assert counter.calls == _arrays(store)
        assert json.loads((store_path / MARKER).read_text())["format"] == "tj-data-verified"
        assert store.verify(marker=True, hasher=CountingSha256()).hashed == 0


def test_racy_entries_and_plain_verify(store_path: Path, backend: str) -> None:
    """A file whose mtime is not older than its hash (here: in the future) might change again
    within the same timestamp tick unseen, so it is hashed again next time. A plain verify
    hashes everything and leaves the marker alone."""
    store = GraphStore.open(store_path)
    if backend == "npy":
        x, in_x = store_path / "shard-00001" / "x.npy", 1
    else:  # one container holds every array
        x, in_x = store_path / "data-00000.h5", _arrays(store)
    future = time.time_ns() + 3600 * 1_000_000_000
    os.utime(x, ns=(future, future))
    store.verify(marker=True)
    counter = CountingSha256()
    assert store.verify(marker=True, hasher=counter).hashed == in_x == counter.calls
    before = (store_path / MARKER).read_bytes()
    full = CountingSha256()
    assert store.verify(hasher=full).hashed == _arrays(store) == full.calls
    assert (store_path / MARKER).read_bytes() == before
    with pytest.raises(ValueError, match="verify='yes'"):
        GraphStore.open(store_path, verify="yes")  # type: ignore[arg-type]
