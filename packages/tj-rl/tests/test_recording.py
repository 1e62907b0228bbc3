"""Phase-1 recording: the pure snapshot builder, and multi-process recording into a tj-data store
whose targets line up with the next step (plus a worker killed mid-recording)."""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tj_data import GraphStore, StoreError
from tj_rl.env import NODE_FEATURES, Scenario
from tj_rl.env.features import VehicleGraph
from tj_rl.recording import RiskConfig, SnapshotBuilder, record_dataset, snapshot_schema


def _graph(ids: list[str], x: np.ndarray, edges=(), attr=()) -> VehicleGraph:
    return VehicleGraph(
        ids=tuple(ids),
        x=np.asarray(x, np.float32).reshape(len(ids), 9),
        movement=np.zeros(len(ids), np.int64),
        edge_index=np.asarray(edges, np.int64).reshape(2, -1),
        edge_attr=np.asarray(attr, np.float32).reshape(-1, 4),
        dropped_nodes=0,
        dropped_edges=0,
    )


def test_schema_names_units_once() -> None:
    schema = snapshot_schema()
    assert schema["x"].columns == NODE_FEATURES and schema["y_next"].shape == (9,)
    assert schema["y_mask"].dtype == "bool" and schema["vehicle_id"].dtype == "int64"
    assert "m/s" in schema["x"].description and "1/s" in schema["edge_attr"].description
    assert {f.name for f in schema.at_level("sample")} == {
        "intersection", "episode", "sim_time", "time_in_phase", "phase", "phase_count"
    }  # fmt: skip


def test_snapshot_builder_targets_and_risk() -> None:
    b = SnapshotBuilder(episode=7, risk=RiskConfig(ttc_threshold=2.0, brake_decel=4.5, horizon=1))
    x0 = np.arange(27).reshape(3, 9)
    out = b.step({0: _graph(["a", "b", "c"], x0)}, {0: (1, 4, 12.0)}, 10.0)
    assert out == []  # waits for the next step
    # next step: c left, a and b swapped order, d arrived; b is braking hard; a-d low TTC (1/s > 0.5)
    x1 = np.full((3, 9), 5.0)
    x1[1, 3] = -6.0  # b brakes
    out = b.step(
        {0: _graph(["d", "b", "a"], x1 + np.arange(3)[:, None], [[0], [2]], [[1, 1, 3, 1.0]])},
        {0: (1, 4, 22.0)},
        20.0,
    )
    ((light, s),) = out
    assert light == 0 and s["episode"] == 7 and s["sim_time"] == 10.0 and s["phase"] == 1
    assert s["vehicle_id"].tolist() == [0, 1, 2] and s["y_mask"].tolist() == [True, True, False]
    np.testing.assert_array_equal(s["y_next"][0], x1[2] + 2)  # a's features at the next step
    np.testing.assert_array_equal(s["y_next"][1], x1[1] + 1)
    assert (s["y_next"][2] == 0).all()
    assert s["risk"].tolist() == [1.0, 1.0, 0.0]  # a: low TTC with d; b: hard braking
    ((_, last),) = b.finish()  # the episode's last step: no next step
    assert last["vehicle_id"].tolist() == [3, 1, 0] and not last["y_mask"].any()


def test_snapshot_builder_horizon() -> None:
    b = SnapshotBuilder(episode=0, risk=RiskConfig(horizon=2))
    calm, brake = np.zeros((1, 9)), np.zeros((1, 9))
    brake[0, 3] = -9.0
    assert b.step({0: _graph(["a"], calm)}, {0: (0, 2, 0.0)}, 0.0) == []
    assert b.step({0: _graph(["a"], calm)}, {0: (0, 2, 0.0)}, 10.0) == []
    ((_, s0),) = b.step({0: _graph(["a"], brake)}, {0: (0, 2, 0.0)}, 20.0)
    assert s0["sim_time"] == 0.0 and s0["risk"].tolist() == [1.0]  # braking 2 steps ahead counts
    assert s0["y_mask"].tolist() == [True] and (s0["y_next"] == 0).all()  # next step is t=10


def _check_alignment(store: GraphStore, delta: float) -> int:
    """Within every stream, y_next / y_mask of sample k equal the matched vehicles of sample k+1."""
    ends = list(store.manifest.episode_ends)
    starts = [0, *ends[:-1]]
    matched = 0
    for a, b in zip(starts, ends, strict=True):
        stream = [store[i] for i in range(a, b)]
        assert len({int(s["intersection"]) for s in stream}) == 1
        assert len({int(s["episode"]) for s in stream}) == 1
        times = [float(s["sim_time"]) for s in stream]
        assert np.allclose(np.diff(times), delta)
        for cur, nxt in itertools.pairwise(stream):
            pos = {int(v): i for i, v in enumerate(nxt["vehicle_id"])}
            for i, v in enumerate(cur["vehicle_id"]):
                if cur["y_mask"][i]:
                    np.testing.assert_array_equal(cur["y_next"][i], nxt["x"][pos[int(v)]])
                    matched += 1
                else:
                    assert int(v) not in pos and not cur["y_next"][i].any()
        assert not stream[-1]["y_mask"].any()
    return matched


def test_record_dataset_two_workers(grid_sc: Scenario, tmp_path: Path) -> None:
    sc = grid_sc.replace(end=100.0)
    path = record_dataset(
        sc,
        "max-pressure",
        episodes=2,
        out_path=tmp_path / "ds",
        workers=2,
        seeds=[1, 2],
        progress=False,
    )
    store = GraphStore.open(path, verify=True)
    meta = store.manifest.metadata
    assert meta["intersections"] == ["A0", "A1", "B0", "B1"] and meta["truncated_episodes"] == []
    assert meta["policy"]["name"] == "max-pressure" and meta["seeds"] == [1, 2]
    assert len(store.manifest.episode_ends) == 2 * 4  # one stream per (episode, light)
    assert len(store) == 2 * 4 * 11  # t = 0, 10, ..., 100
    assert store.manifest.schema["x"].columns == NODE_FEATURES
    assert _check_alignment(store, 10.0) > 50
    episodes = {int(store[i]["episode"]) for i in range(len(store))}
    assert episodes == {0, 1}


def test_same_seeds_give_the_same_store_with_any_number_of_workers(
    grid_sc: Scenario, tmp_path: Path
) -> None:
    """Streams are written in episode order, not in the order workers finish."""
    sc = grid_sc.replace(end=40.0)
    stores = {}
    for workers in (1, 3):
        path = record_dataset(
            sc, "random", episodes=3, out_path=tmp_path / f"w{workers}", workers=workers,
            seeds=[5, 6, 7], progress=False,
        )  # fmt: skip
        stores[workers] = GraphStore.open(path)
    one, three = stores[1], stores[3]
    assert one.manifest.episode_ends == three.manifest.episode_ends
    assert [int(one[i]["episode"]) for i in range(len(one))] == sorted(
        int(one[i]["episode"]) for i in range(len(one))
    )
    for i in range(len(one)):
        a, b = one[i], three[i]
        for name in ("x", "edge_index", "vehicle_id", "episode", "intersection"):
            np.testing.assert_array_equal(a[name], b[name], err_msg=f"sample {i} {name}")


def test_streams_arriving_out_of_order_are_written_in_episode_order(tmp_path: Path) -> None:
    from tj_data import GraphStoreWriter
    from tj_rl.recording.record import _InOrder
    from tj_rl.recording.snapshot import snapshot_schema

    schema = snapshot_schema()

    def sample(episode: int) -> dict[str, np.ndarray]:
        rows = {"node": 2, "edge": 0}  # two vehicles, no edges
        out = {
            f.name: np.zeros(
                ((rows[f.level],) if f.level in rows else ()) + tuple(f.shape), dtype=f.dtype
            )
            for f in schema.fields
        }
        out["edge_index"] = np.zeros((2, 0), dtype=np.int64)
        out["episode"] = np.asarray(episode, dtype=np.int64)
        return out

    def stream(episode: int, n: int) -> list[dict[str, np.ndarray]]:
        return [sample(episode) for _ in range(n)]

    with GraphStoreWriter(tmp_path / "s", schema) as writer:
        order = _InOrder(writer)
        order.add(2, stream(2, 1))  # episode 2 finishes first
        order.finish(2)
        order.add(1, stream(1, 2))
        order.add(0, stream(0, 3))  # written at once: it is next
        order.finish(0)  # -> 1's waiting stream is written; 1 is not finished yet
        order.add(1, stream(1, 1))
        order.finish(1)  # -> 2 (finished earlier) follows
        order.check_drained()
    store = GraphStore.open(tmp_path / "s")
    assert [int(store[i]["episode"]) for i in range(len(store))] == [0, 0, 0, 1, 1, 1, 2]
    assert store.manifest.episode_ends == [3, 5, 6, 7]
    unfinished = _InOrder(writer)
    unfinished.add(1, stream(1, 1))
    with pytest.raises(RuntimeError, match=r"episodes \[1\] never completed"):
        unfinished.check_drained()


def test_unknown_policy_fails_before_spawning(grid_sc: Scenario, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="policy 'smart' unknown"):
        record_dataset(grid_sc, "smart", out_path=tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_worker_killed_mid_recording_publishes_nothing(
    default_sc: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = default_sc.replace(end=1800.0)  # long enough to be killed while running
    scratch = tmp_path / "tmp"  # the parent's scratch dir goes here, not in the shared /tmp
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    def killer() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for p in mp.active_children():
                if p.name == "tj-rl-record-0" and p.pid:
                    time.sleep(3.0)  # let it import and start SUMO
                    os.kill(p.pid, signal.SIGKILL)
                    return
            time.sleep(0.05)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    with pytest.raises(RuntimeError, match="tj-rl-record-0 died"):
        record_dataset(
            sc, "random", episodes=50, out_path=tmp_path / "ds", workers=1, progress=False
        )
    t.join()
    with pytest.raises(StoreError):
        GraphStore.open(tmp_path / "ds")
    assert [p for p in mp.active_children() if p.name.startswith("tj-rl-record")] == []
    assert list(scratch.iterdir()) == []  # the killed worker's files are gone too


def test_a_message_cut_by_a_dead_worker_is_a_death_not_a_hang() -> None:
    """A worker killed while sending leaves half a message: its pipe ends (EOF), and the reader
    names the dead worker instead of waiting for the rest for ever (a shared Queue's pipe, open
    in the reading process too, never ends)."""
    import struct

    from tj_rl.recording.record import _messages

    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=time.sleep, args=(0.0,), name="tj-rl-record-0")
    proc.start()
    proc.join()
    reader, writer = ctx.Pipe(duplex=False)
    os.write(writer.fileno(), struct.pack("!i", 1_000_000) + b"x" * 10)  # a header, then cut
    writer.close()
    try:
        with pytest.raises(RuntimeError, match="tj-rl-record-0 died"):
            next(_messages({reader: 0}, [proc], set()))
    finally:
        reader.close()
