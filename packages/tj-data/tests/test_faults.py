"""Injected faults: corrupt/truncated/missing shards, newer format, bad indices, SIGKILL mid-write."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from tjdata_testutil import write_store

from tj_data import (
    GraphStore,
    SampleIndexError,
    StoreCorruptError,
    StoreFormatVersionError,
    StoreIncompleteError,
    StoreNotFoundError,
)


def test_bad_checksum_named(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "s"
    write_store(path, 40, backend=backend)
    if backend == "npy":
        f = path / "shard-00001" / "x.npy"
        data = bytearray(f.read_bytes())
        data[-5] ^= 0xFF  # same size, different content
        f.write_bytes(bytes(data))
        match = r"shard-00001/x\.npy: sha256"
    else:
        with h5py.File(path / "data-00000.h5", "r+") as h:
            h["shard-00001/x"][0, 0] += 1.0
        match = r"data-00000\.h5:shard-00001/x: sha256"
    GraphStore.open(path)  # cheap validation does not read data
    with pytest.raises(StoreCorruptError, match=match):
        GraphStore.open(path, verify=True)


def test_truncated_and_missing_npy(tmp_path: Path) -> None:
    path = tmp_path / "s"
    write_store(path, 40)
    f = path / "shard-00000" / "edge_attr.npy"
    size = f.stat().st_size
    os.truncate(f, size - 8)
    with pytest.raises(
        StoreCorruptError, match=rf"edge_attr\.npy: {size - 8} bytes on disk.*says {size}"
    ):
        GraphStore.open(path)
    f.unlink()
    with pytest.raises(StoreCorruptError, match=r"shard-00000/edge_attr\.npy: missing"):
        GraphStore.open(path)


def test_wrong_array_length(tmp_path: Path, backend: str) -> None:
    """An array whose row count disagrees with the manifest fails on first read, naming it."""
    path = tmp_path / "s"
    write_store(path, 20, backend=backend)
    if backend == "npy":
        f = path / "shard-00000" / "x.npy"
        np.save(f, np.load(f)[:-1])
        m = json.loads((path / "manifest.json").read_text())
        m["shards"][0]["files"]["x.npy"]["nbytes"] = f.stat().st_size  # size check passes
        (path / "manifest.json").write_text(json.dumps(m))
    else:
        with h5py.File(path / "data-00000.h5", "r+") as h:
            x = h["shard-00000/x"][:-1]
            del h["shard-00000/x"]
            h["shard-00000/x"] = x
    store = GraphStore.open(path)
    with pytest.raises(StoreCorruptError, match=r"shard-00000/x: shape \(\d+, 3\), expected"):
        store[0]


def test_missing_hdf5_file_and_group(tmp_path: Path) -> None:
    path = tmp_path / "s"
    write_store(path, 20, backend="hdf5")
    with h5py.File(path / "data-00000.h5", "r+") as h:
        del h["shard-00001"]
    store = GraphStore.open(path)
    with pytest.raises(StoreCorruptError, match=r"shard-00001: group or dataset missing"):
        store[19]
    (path / "data-00000.h5").unlink()
    with pytest.raises(StoreCorruptError, match=r"data-00000\.h5: missing"):
        GraphStore.open(path)


def test_manifest_errors(tmp_path: Path) -> None:
    path = tmp_path / "s"
    write_store(path, 5)
    m = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps({**m, "format_version": 99}))
    with pytest.raises(
        StoreFormatVersionError, match=r"format_version 99 .* \(reads versions 1\.\.1"
    ):
        GraphStore.open(path)
    (path / "manifest.json").write_text('{"format": "tj-graph-store", "format_v')
    with pytest.raises(StoreCorruptError, match=r"manifest\.json: not a readable JSON"):
        GraphStore.open(path)
    (path / "manifest.json").write_text(json.dumps({**m, "episode_ends": [3, 2]}))
    with pytest.raises(StoreCorruptError, match="episode_ends must increase"):
        GraphStore.open(path)
    with pytest.raises(StoreNotFoundError):
        GraphStore.open(tmp_path / "nope")


def test_out_of_range_index(tmp_path: Path) -> None:
    write_store(tmp_path / "s", 5)
    store = GraphStore.open(tmp_path / "s")
    assert int(store[-1]["sid"]) == 4
    with pytest.raises(SampleIndexError, match="index 5 out of range for 5 samples"):
        store[5]
    with pytest.raises(IndexError):
        store[-6]


WRITER = textwrap.dedent(
    """
    import sys, numpy as np
    from tj_data import GraphStoreWriter, Schema
    path, backend, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    schema = Schema.graph(node_features=3, edge_features=2, sample_fields={"sid": "int64"})
    rng = np.random.default_rng(0)
    with GraphStoreWriter(path, schema if mode == "w" else None, shard_size=64,
                          backend=backend, mode=mode) as w:
        i = 0
        while True:  # until killed
            n = int(rng.integers(1, 30))
            w.append({"x": rng.random((n, 3)), "edge_index": rng.integers(0, n, (2, 2 * n)),
                      "edge_attr": rng.random((2 * n, 2)), "sid": i})
            i += 1
            if i % 500 == 0:
                w.end_episode()
    """
)


def _write_until_killed(path: Path, backend: str, mode: str, ready) -> None:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), backend, mode])
    try:
        deadline = time.monotonic() + 60
        while not ready() and time.monotonic() < deadline:
            assert proc.poll() is None, "writer exited early"
            time.sleep(0.01)
        time.sleep(0.05)  # land somewhere inside the next shard's writes
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


def test_sigkill_fresh_store_is_incomplete(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "s"
    if backend == "npy":
        ready = lambda: (path / "manifest.partial.json").exists()  # noqa: E731
    else:
        ready = lambda: any(path.glob(".tmp-data-00000.h5-*")) if path.exists() else False  # noqa: E731
    _write_until_killed(path, backend, "w", ready)
    assert not (path / "manifest.json").exists()
    with pytest.raises(StoreIncompleteError, match="interrupted"):
        GraphStore.open(path)
    if backend == "npy":  # the committed prefix is intact and readable
        store = GraphStore.open(path, allow_incomplete=True, verify=True)
        assert len(store) > 0 and len(store) % 64 == 0
        assert [int(store[i]["sid"]) for i in (0, len(store) - 1)] == [0, len(store) - 1]


def test_sigkill_append_keeps_previous_state(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "s"
    write_store(path, 100, shard_size=64, backend=backend)
    before = (path / "manifest.json").read_bytes()
    if backend == "npy":
        ready = lambda: (path / "manifest.partial.json").exists()  # noqa: E731
    else:
        ready = lambda: any(path.glob(".tmp-data-00001.h5-*"))  # noqa: E731
    _write_until_killed(path, backend, "a", ready)
    assert (path / "manifest.json").read_bytes() == before
    store = GraphStore.open(path, verify=True)  # previous state, leftovers ignored
    assert len(store) == 100 and int(store[99]["sid"]) == 99
