"""JSON chunk import (library and CLI) and its errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tj_data import GraphStore, JsonImportError, import_json_chunks
from tj_data.cli import main


def _record(rng, i: int, episode: int, objects: bool) -> dict:
    n = int(rng.integers(0, 5))
    e = int(rng.integers(0, 4)) if n else 0
    feats = rng.random((n, 3)).round(3).tolist()
    pairs = rng.integers(0, max(n, 1), (e, 2)).tolist()
    efeats = rng.random((e, 2)).round(3).tolist()
    rec = {"intersection": i % 2, "sim_time": float(i), "episode": episode, "name": f"rec{i}"}
    if objects:
        rec["nodes"] = [{"features": f, "id": 100 + j} for j, f in enumerate(feats)]
        rec["edges"] = [
            {"source": s, "target": t, "features": ef}
            for (s, t), ef in zip(pairs, efeats, strict=True)
        ]
    else:
        rec["nodes"] = [[*f] for f in feats]
        rec["edges"] = pairs
        rec["edge_features"] = efeats
    return rec


def make_layout(root: Path, objects: bool) -> list[dict]:
    rng = np.random.default_rng(1)
    records, i = [], 0
    for phase, n_chunks in (("phase1", 3), ("phase2", 2)):
        (root / phase / "chunks").mkdir(parents=True)
        for c in range(n_chunks):
            chunk = [_record(rng, i + j, episode=(i + j) // 7, objects=objects) for j in range(5)]
            i += 5
            records += chunk
            (root / phase / "chunks" / f"chunk_{c:03d}.json").write_text(json.dumps(chunk))
    (root / "metadata.json").write_text(json.dumps({"scenario": "grid"}))
    (root / "statistics.json").write_text(json.dumps({"speed": {"mean": 3.0}}))
    return records


@pytest.mark.parametrize("objects", [False, True])
def test_import_round_trip(tmp_path, objects) -> None:
    records = make_layout(tmp_path / "src", objects)
    import_json_chunks(tmp_path / "src", tmp_path / "dst", shard_size=8, progress=False)
    store = GraphStore.open(tmp_path / "dst", verify=True)
    assert len(store) == len(records) == 25
    for i, rec in enumerate(records):
        s = store[i]
        feats = [n["features"] for n in rec["nodes"]] if objects else rec["nodes"]
        np.testing.assert_allclose(s["x"], np.asarray(feats, np.float32).reshape(-1, 3))
        assert (
            int(s["intersection"]) == rec["intersection"]
            and float(s["sim_time"]) == rec["sim_time"]
        )
        assert s["edge_index"].shape[1] == len(rec["edges"])
        if objects:
            assert s["id"].tolist() == [100 + j for j in range(len(rec["nodes"]))]
    meta = store.manifest.metadata["import"]
    assert meta["metadata"] == {"scenario": "grid"} and meta["statistics"] == {
        "speed": {"mean": 3.0}
    }
    assert meta["phases"] == {"phase1": [0, 15], "phase2": [15, 25]} and meta["ignored_fields"] == [
        "name"
    ]
    # episode changes at 7, 14, 21 and the phase boundary at 15
    assert store.episode_ends.tolist() == [7, 14, 15, 21, 25]


@pytest.mark.parametrize(
    ("patch", "match"),
    [
        (
            lambda r: r.update(nodes="bad"),
            r"chunk_001\.json record 2 field 'nodes': missing or not a list",
        ),
        (
            lambda r: r["nodes"].append([1.0, 2.0]),
            r"chunk_001\.json record 2 field 'x': expected x",
        ),
        (lambda r: r.pop("sim_time"), r"chunk_001\.json record 2 field 'sim_time': missing key"),
        (
            lambda r: r.update(edges=[[0, 99]], edge_features=[[0, 0]]),
            r"record 2 field 'edges': node ids",
        ),
    ],
)
def test_malformed_record_named(tmp_path, patch, match) -> None:
    make_layout(tmp_path / "src", objects=False)
    f = tmp_path / "src" / "phase1" / "chunks" / "chunk_001.json"
    chunk = json.loads(f.read_text())
    chunk[2]["nodes"] = chunk[2]["nodes"] or [[0.0, 0.0, 0.0]]
    patch(chunk[2])
    f.write_text(json.dumps(chunk))
    with pytest.raises(JsonImportError, match=match):
        import_json_chunks(tmp_path / "src", tmp_path / "dst", progress=False)


def test_cli(tmp_path) -> None:
    make_layout(tmp_path / "src", objects=True)
    rc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tj_data.cli",
            "import-json",
            str(tmp_path / "src"),
            str(tmp_path / "dst"),
            "--backend",
            "hdf5",
            "--compression",
            "lzf",
            "--verify",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert rc.returncode == 0, rc.stderr
    assert "samples=25" in rc.stdout
    assert main(["info", str(tmp_path / "dst")]) == 0
    assert main(["verify", str(tmp_path / "dst")]) == 0
    assert main(["import-json", str(tmp_path / "nope"), str(tmp_path / "d2")]) == 2
