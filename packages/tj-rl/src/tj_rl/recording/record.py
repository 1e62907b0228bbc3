"""Phase-1 dataset recording: N processes (one SUMO each) -> one tj-data graph store.

Each worker (a ``spawn`` process, so libsumo's one-simulation-per-process rule holds) runs its share
of the episodes with a behaviour policy given by name, builds the snapshots of every controlled
light at every decision step (``snapshot.SnapshotBuilder``: next-step targets matched by vehicle id,
risk labels) and sends each finished (episode, light) stream to the parent through a bounded queue.
The parent is the only writer: every stream is appended contiguously and closed with
``end_episode()``, so the manifest's episode boundaries delimit (episode, intersection) streams and
a time window can never cross one. A worker that fails or dies aborts the recording with its error
(the writer then publishes nothing); an episode in which SUMO died is kept up to its last good step
and listed in ``metadata["truncated_episodes"]``.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import multiprocessing as mp
import shutil
import tempfile
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from multiprocessing.connection import wait as wait_ready
from pathlib import Path
from typing import Any, Literal

from tj_data import GraphStoreWriter
from tj_monitor import progress_bar
from tj_rl.control.baselines import POLICIES, make_policy
from tj_rl.env.config import EnvConfig
from tj_rl.env.core import TrafficSignalCore
from tj_rl.env.features import EDGE_FEATURES, NODE_FEATURES
from tj_rl.env.graphs import build_graph
from tj_rl.env.runtime import SUMO_VERSION
from tj_rl.env.scenario import Scenario
from tj_rl.recording.snapshot import RiskConfig, SnapshotBuilder, snapshot_schema

__all__ = ["record_dataset"]

log = logging.getLogger(__name__)
_POLL_S = 1.0


def _record_episode(
    env: TrafficSignalCore, policy: Any, episode: int, seed: int, risk: RiskConfig
) -> tuple[dict[int, list[dict]], str]:
    agents = env.possible_agents
    builder = SnapshotBuilder(episode=episode, risk=risk)
    streams: dict[int, list[dict]] = {i: [] for i in range(len(agents))}

    def collect() -> None:
        t = env.sim_time
        graphs = {
            i: build_graph(env.last_frames[a], env.lights[a].centre, env.config.graph)
            for i, a in enumerate(agents)
        }
        phase = {
            i: (sh.current, sh.program.n_greens, sh.time_in_green(t))
            for i, sh in enumerate(env.shields[a] for a in agents)
        }
        for light, sample in builder.step(graphs, phase, t):
            streams[light].append(sample)

    obs, infos = env.reset(seed=seed)
    policy.reset(env)
    collect()
    status = "time_limit"
    while True:
        obs, _, term, trunc, infos = env.step(policy.compute_actions(obs, infos))
        reason = next(iter(infos.values())).get("truncated_reason", "")
        if reason.startswith("sumo_died"):
            status = reason  # the frames are the last good step's: nothing new to collect
            break
        collect()
        if term["__all__"] or trunc["__all__"]:
            break
    for light, sample in builder.finish():
        streams[light].append(sample)
    return streams, status


def _worker(
    wid: int,
    scenario: Scenario,
    config: EnvConfig,
    policy: str,
    policy_kwargs: Mapping[str, Any],
    jobs: Sequence[tuple[int, int]],
    risk: RiskConfig,
    out: Any,
) -> None:
    env = None
    try:
        env = TrafficSignalCore(config, scenario=scenario)
        for episode, seed in jobs:
            kwargs = dict(policy_kwargs)
            if "seed" in inspect.signature(POLICIES[policy]).parameters:
                kwargs.setdefault("seed", seed)  # stochastic policies: one stream per episode
            streams, status = _record_episode(
                env, make_policy(policy, **kwargs), episode, seed, risk
            )
            for samples in streams.values():
                out.send(("stream", wid, episode, samples))
            out.send(("episode", wid, episode, status))
        out.send(("done", wid, None, None))
    except BaseException:
        out.send(("error", wid, None, traceback.format_exc()))
    finally:
        if env is not None:
            env.close()
        out.close()


class _InOrder:
    """Writes streams in episode order whatever order the workers finish in, so the same seeds
    give the same store, byte for byte, with any number of workers. Streams of an episode that
    finishes ahead of an earlier one wait in memory (at most the episodes finished ahead of the
    slowest worker's current one)."""

    def __init__(self, writer: GraphStoreWriter) -> None:
        self.writer = writer
        self.next = 0
        self.waiting: dict[int, list[Any]] = {}
        self.finished: set[int] = set()

    def _write(self, samples: Any) -> None:
        if samples:
            self.writer.append_many(samples)
            self.writer.end_episode()

    def add(self, episode: int, samples: Any) -> None:
        if episode == self.next:
            self._write(samples)
        else:
            self.waiting.setdefault(episode, []).append(samples)

    def finish(self, episode: int) -> None:
        self.finished.add(episode)
        while self.next in self.finished:
            self.finished.discard(self.next)
            self.next += 1
            for samples in self.waiting.pop(self.next, []):
                self._write(samples)

    def check_drained(self) -> None:
        if self.waiting or self.finished:
            raise RuntimeError(f"recording: episodes {sorted(self.waiting)} never completed")


def record_dataset(
    scenario: Scenario,
    policy: str = "random",
    episodes: int = 1,
    out_path: str | Path = "runs/dataset",
    workers: int = 1,
    *,
    seeds: Sequence[int] | None = None,
    policy_kwargs: Mapping[str, Any] | None = None,
    env_config: EnvConfig | None = None,
    risk: RiskConfig | None = None,
    shard_size: int = 4096,
    backend: Literal["npy", "hdf5"] = "npy",
    overwrite: bool = False,
    progress: bool = True,
) -> Path:
    """Record ``episodes`` episodes of ``policy`` (a baseline name) with ``workers`` processes into
    a tj-data store at ``out_path``; returns the path. See the module docstring for the layout."""
    if episodes < 1 or workers < 1:
        raise ValueError(f"record_dataset: episodes={episodes}, workers={workers}; need >= 1")
    make_policy(
        policy, **dict(policy_kwargs or {})
    )  # unknown names / kwargs fail here, not in a worker
    seeds = list(seeds) if seeds is not None else [scenario.seed + i for i in range(episodes)]
    if len(seeds) != episodes:
        raise ValueError(f"record_dataset: {len(seeds)} seeds for {episodes} episodes")
    config = env_config if env_config is not None else EnvConfig(metrics=False)
    risk = risk if risk is not None else RiskConfig()
    probe = TrafficSignalCore(config, scenario=scenario)  # validates scenario + config up front
    intersections = list(probe.possible_agents)
    probe.close()
    workers = min(workers, episodes)
    jobs = [[(e, int(seeds[e])) for e in range(w, episodes, workers)] for w in range(workers)]
    metadata = {
        "producer": "tj_rl.record_dataset",
        "sumo_version": SUMO_VERSION,
        "scenario": {"name": scenario.name, "sumocfg": str(scenario.sumocfg or ""), "net": str(scenario.net_file),
                     "begin": scenario.begin, "end": scenario.end},
        "intersections": intersections,
        "node_features": list(NODE_FEATURES),
        "edge_features": list(EDGE_FEATURES),
        "env": {k: v for k, v in asdict(config).items() if k not in ("reward", "temp_dir")},
        "risk": asdict(risk),
        "policy": {"name": policy, "kwargs": dict(policy_kwargs or {})},
        "seeds": [int(s) for s in seeds],
        "streams": "each manifest episode is one (episode, intersection) stream in time order",
    }  # fmt: skip
    # workers' episode dirs live here, so a killed worker's leftovers are removed with it
    scratch = tempfile.mkdtemp(prefix="tj-rl-record-")
    config = dataclasses.replace(config, temp_dir=scratch)
    ctx = mp.get_context("spawn")
    # one pipe per worker, its write end only in the worker: a worker killed in the middle of a
    # message gives EOF here (a shared Queue's pipe stays open in this process, and a half-sent
    # message would block its reader for ever)
    pipes = [ctx.Pipe(duplex=False) for _ in range(workers)]
    procs = [
        ctx.Process(
            target=_worker,
            args=(w, scenario, config, policy, dict(policy_kwargs or {}), jobs[w], risk,
                  pipes[w][1]),
            name=f"tj-rl-record-{w}",
            daemon=True,
        )
        for w in range(workers)
    ]  # fmt: skip
    for p in procs:
        p.start()
    readers = {pipes[w][0]: w for w in range(workers)}
    for _, send_end in pipes:
        send_end.close()
    statuses: dict[int, str] = {}
    try:
        with (
            GraphStoreWriter(out_path, snapshot_schema(), shard_size=shard_size, backend=backend,
                             metadata=metadata, overwrite=overwrite) as writer,
            progress_bar(disable=not progress) as bar,
        ):  # fmt: skip
            task = bar.add_task("recording episodes", total=episodes, info="")
            order = _InOrder(writer)
            done: set[int] = set()
            for kind, wid, episode, payload in _messages(readers, procs, done):
                if kind == "stream":
                    order.add(episode, payload)
                elif kind == "episode":
                    statuses[episode] = payload
                    order.finish(episode)
                    bar.advance(task)
                elif kind == "done":
                    done.add(wid)
                else:
                    raise RuntimeError(f"recording worker {wid} failed:\n{payload}")
            order.check_drained()
            writer.metadata["episode_status"] = {str(k): v for k, v in sorted(statuses.items())}
            writer.metadata["truncated_episodes"] = sorted(
                k for k, v in statuses.items() if v != "time_limit"
            )
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join(timeout=30)
        for reader in readers:
            reader.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return Path(out_path)


def _messages(readers: dict[Any, int], procs: list[Any], done: set[int]) -> Any:
    """The workers' messages as they arrive, until every worker said ``done`` (the caller adds
    it to ``done``); a worker whose pipe ends before that died: ``RuntimeError`` naming it."""
    live = dict(readers)
    while len(done) < len(procs):
        for reader in wait_ready(list(live), timeout=_POLL_S):
            wid = live[reader]
            try:
                message = reader.recv()
            except (EOFError, OSError):
                del live[reader]
                if wid in done:
                    continue
                proc = procs[wid]
                proc.join(timeout=10)
                raise RuntimeError(
                    f"recording worker {proc.name} died (exit code {proc.exitcode})"
                ) from None
            yield message
