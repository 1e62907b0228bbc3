"""Phase-1 data: make sure a train and a held-out store exist, then describe them.

If the dataset folder (``tj_hybrid.data_paths``: ``phase1.data.path``, or by default one per
scenario and per fingerprint of the settings the dataset depends on) holds no dataset, it is
recorded from the configured SUMO scenario with tj-rl (behaviour policy ``mixed``: fixed-time
with random feasible switches, so the data shows queues forming and clearing under many signal
sequences), or imported from seed-style JSON chunks when ``data.json_source`` is set. Episodes
are time windows of ``record.episode_seconds`` inside the scenario's span (``record.windows``;
default: one at the scenario's begin), named in the log and in the stores' metadata. Each episode
runs a route file of phase 2's training pool (the same traffic the policy trains on:
``tj_hybrid.traffic``). Train and held-out episodes use disjoint SUMO seeds. A dataset made with
other settings than the current config (at an explicit ``phase1.data.path``) is refused in one
line naming that key, never silently reused; a reused one is verified against its manifest's
checksums first (each file hashed once, then only when its size or mtime changes), and a corrupt
one is recorded again, with a warning naming the file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from tj_data import GraphStore, GraphStoreWriter, StoreError, import_json_chunks
from tj_hybrid.config.layering import ConfigError
from tj_hybrid.config.schema import HybridConfig
from tj_hybrid.data_paths import phase1_data_dir, scenario_data_dir
from tj_hybrid.rl_setup import scenario_widths
from tj_hybrid.traffic import (
    build_traffic,
    demand_source,
    episode_windows,
    scenario_span,
    split_windows,
)
from tj_rl.env import Scenario
from tj_rl.recording import record_dataset, snapshot_schema

__all__ = ["DatasetInfo", "dataset_dir", "ensure_dataset", "record_scenario", "split_store"]

log = logging.getLogger(__name__)
HOLDOUT_SEED_OFFSET = 100_000


@dataclass(frozen=True, kw_only=True)
class DatasetInfo:
    """Where the stores are and the facts about them the model needs."""

    train: Path
    holdout: Path
    train_samples: int
    holdout_samples: int
    num_movements: int  # max movement index + 1
    max_actions: int  # largest phase count
    decision_interval: float  # seconds between consecutive samples of a stream
    recorded: bool  # True when this call made the dataset
    time_windows: str = ""  # the recording's episode windows in words ("" for imported data)


def _fingerprint(cfg: HybridConfig) -> str:
    """What the dataset depends on; a stored dataset with another fingerprint is refused."""
    data = cfg.phase1.data
    if data.json_source is not None:
        src = {"json_source": str(data.json_source), "holdout": data.holdout_fraction}
    else:
        r = cfg.phase1.record
        env = {k: v for k, v in asdict(cfg.scenario.env).items() if k not in ("temp_dir", "metrics", "gui", "gui_delay_ms")}
        src = {
            "scenario": str(cfg.scenario.path),
            "episode_seconds": r.episode_seconds,
            **({"windows": r.windows} if r.windows is not None else {}),  # default: as before
            "episodes": [r.train_episodes, r.holdout_episodes],
            "policy": [r.policy, dict(sorted(r.policy_kwargs.items()))],
            "env": env,
            "seed": cfg.run.seed,
            # the source of the traffic it records: phase 2's pool, whose size and levels may
            # change without making the recording stale
            "demand": demand_source(cfg, scenario_span(cfg)),
        }
    src["backend"] = data.backend
    blob = json.dumps(src, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def dataset_dir(cfg: HybridConfig) -> Path:
    """The dataset's folder: ``phase1.data.path``, or the scenario's one for these settings."""
    return phase1_data_dir(cfg, _fingerprint(cfg))


def _open(path: Path) -> GraphStore | None:
    """The store at ``path``, checked against its checksums; None when missing or unusable."""
    try:
        store = GraphStore.open(path)
        store.verify(marker=True)
        return store
    except StoreError as exc:
        if path.exists():
            log.warning("ignoring unusable dataset at %s: %s", path, exc)
        return None


def split_store(src: Path, train: Path, holdout: Path, holdout_fraction: float) -> None:
    """Copy the episodes of ``src`` into two stores: the last ``holdout_fraction`` held out."""
    store = GraphStore.open(src)
    ends = np.asarray(store.episode_ends, np.int64)
    if len(ends) < 2:
        raise ConfigError(f"{src}: {len(ends)} episode(s); a held-out split needs at least 2")
    n_hold = max(1, round(len(ends) * holdout_fraction))
    starts = np.concatenate([[0], ends[:-1]])
    for dst, episodes in (
        (train, range(len(ends) - n_hold)),
        (holdout, range(len(ends) - n_hold, len(ends))),
    ):
        with GraphStoreWriter(dst, store.schema, backend=store.backend, overwrite=True,
                              metadata={**store.manifest.metadata, "split_of": str(src)}) as w:  # fmt: skip
            for e in episodes:
                for i in range(int(starts[e]), int(ends[e])):
                    w.append(store[i])
                w.end_episode()


def record_scenario(cfg: HybridConfig) -> Scenario:
    """The configured scenario cut to the recording's episode windows (``ScenarioError`` for a
    time or a window outside the scenario's span)."""
    r = cfg.phase1.record
    return episode_windows(scenario_span(cfg), r.episode_seconds, r.windows, "phase1.record")


def _training_routes(cfg: HybridConfig) -> tuple[str, ...]:
    """Phase 2's training pool (made here if missing): phase 1 records the same traffic."""
    p2 = cfg.phase2
    span = scenario_span(cfg)
    source = demand_source(cfg, span)
    train, _ = split_windows(span, episode_windows(span, p2.episode_seconds, p2.windows),
                             p2.windows, source)  # fmt: skip
    traffic = build_traffic(cfg, span, train, scenario_data_dir(cfg), source)
    return tuple(str(f) for f in traffic.pool_files)


def _record(cfg: HybridConfig, train: Path, holdout: Path) -> str:
    """Record both stores; returns the episode windows in words."""
    r = cfg.phase1.record
    scenario = record_scenario(cfg)
    windows = scenario.describe_windows()
    env = replace(cfg.scenario.env, route_files=_training_routes(cfg))
    base = cfg.run.seed * 1000
    for path, n, offset in (
        (train, r.train_episodes, 0),
        (holdout, r.holdout_episodes, HOLDOUT_SEED_OFFSET),
    ):
        log.info("recording %d episode(s) of %s in time window(s) %s into %s", n,
                 cfg.scenario.path.name, windows, path)  # fmt: skip
        record_dataset(
            scenario,
            r.policy,
            episodes=n,
            out_path=path,
            workers=min(r.workers, n),
            seeds=[base + offset + i for i in range(n)],
            policy_kwargs=dict(r.policy_kwargs),
            env_config=env,
            shard_size=cfg.phase1.data.shard_size,
            backend=cfg.phase1.data.backend,
            overwrite=True,
        )
    return windows


def _facts(store: GraphStore) -> tuple[int, int]:
    """(max movement + 1, max phase count) over the store, read shard by shard (memory-mapped)."""
    movements, actions = 1, 1
    names = set(store.schema.names)
    for k in range(store.num_shards):
        arrays = store.shard_arrays(k)
        if "movement" in names and len(arrays["movement"]):
            movements = max(movements, int(np.max(arrays["movement"][...])) + 1)
        if "phase_count" in names and len(arrays["phase_count"]):
            actions = max(actions, int(np.max(arrays["phase_count"][...])))
    return movements, actions


def ensure_dataset(cfg: HybridConfig) -> DatasetInfo:
    """Reuse the dataset in its folder if it matches the config, else record/import it."""
    data = cfg.phase1.data
    fp = _fingerprint(cfg)
    root = phase1_data_dir(cfg, fp)  # dataset_dir, the fingerprint kept for the check below
    train_p, hold_p = root / "train", root / "holdout"
    train, hold = _open(train_p), _open(hold_p)
    recorded = False
    if train is not None and hold is not None:
        meta = train.manifest.metadata.get("tj_hybrid", {})
        found, windows = meta.get("fingerprint"), str(meta.get("time_windows", ""))
        if found != fp:
            raise ConfigError(
                f"the dataset at {root} was made with other settings (fingerprint {found}, config "
                f"{fp}); delete it, point phase1.data.path elsewhere, or unset it (--set "
                "phase1.data.path=null: a folder per scenario and recording setting)"
            )
        log.info("using the dataset at %s (%d + %d samples%s)", root, len(train), len(hold),
                 f"; time windows {windows}" if windows else "")  # fmt: skip
    else:
        windows = ""
        if data.json_source is not None:
            tmp = root / "imported"
            # records must carry the traffic-snapshot fields (docs/ARCHITECTURE.md): the
            # schema is tj-rl's, so a missing field fails with the file, record and field
            import_json_chunks(data.json_source, tmp, schema=snapshot_schema(),
                               backend=data.backend, shard_size=data.shard_size,
                               overwrite=True)  # fmt: skip
            split_store(tmp, train_p, hold_p, data.holdout_fraction)
            shutil.rmtree(tmp)
        else:
            windows = _record(cfg, train_p, hold_p)
        meta = {"fingerprint": fp, **({"time_windows": windows} if windows else {})}
        for p in (train_p, hold_p):
            GraphStore.open(p).update_manifest(metadata={"tj_hybrid": meta})
        train, hold = GraphStore.open(train_p), GraphStore.open(hold_p)
        recorded = True
    movements, actions = _facts(train)
    if data.json_source is None:  # a recording need not use every lane: the net says how many
        greens, lanes = scenario_widths(cfg)
        movements, actions = max(movements, lanes), max(actions, greens)
    # recorded stores carry the env config; imported JSON has none: the configured interval applies
    env_meta = train.manifest.metadata.get("env", {})
    dt = float(env_meta.get("delta_time", cfg.scenario.env.delta_time))
    return DatasetInfo(
        train=train_p,
        holdout=hold_p,
        train_samples=len(train),
        holdout_samples=len(hold),
        num_movements=movements,
        max_actions=actions,
        decision_interval=dt,
        recorded=recorded,
        time_windows=windows,
    )
