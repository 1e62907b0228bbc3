"""Phase 3's collector pool: samples flow in order per collector, the byte-bounded queue blocks the
collectors (back-pressure, not memory), a SIGKILLed collector (also mid-send) is replaced and
counted, a collector that keeps dying before its first fragment fails the pool instead of
restarting forever, ``close()`` leaves no process behind, and ``SampleStream`` raises naming the
pool when nothing arrives (injected clock). The real ``collector_main`` is tested in
``test_phase3_real_collector.py``.

The collectors are spawned: each imports this module by name to find its target, so its top level
stays light (no torch; the pool is imported inside the tests) and the test collectors send a
stand-in that unpickles as a real ``tj_rl.rollout.collector.Fragment`` in the rank.
"""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import psutil
import pytest

REPO = Path(__file__).resolve().parents[3]
CTX = mp.get_context("spawn")
WAIT_S = 60.0  # the most any wait in these tests may take (they return as soon as it holds)
SAMPLE_BYTES = 1024  # a test sample: 3 int64 fields + a 1000-byte payload


@pytest.fixture(scope="module", autouse=True)
def _importable_by_children() -> Iterator[None]:
    """pytest imports this file as ``apps.hybrid.tests.<name>`` (importlib mode); spawned
    children find it by that name when the repository root is on the path spawn hands them."""
    sys.path.append(str(REPO))
    yield
    sys.path.remove(str(REPO))


# ---------------------------------------------------------------------- test collectors
def _fragment(samples: list[dict[str, np.ndarray]], episodes: list[dict[str, Any]]) -> Any:
    """A real ``tj_rl.rollout.collector.Fragment``, built where it is unpickled (the rank)."""
    from tj_rl.rollout.collector import Fragment

    return Fragment(samples=samples, version=0, steps=len(samples), episodes=episodes)


class _Wire:
    """What a test collector sends: unpickles as ``_fragment(...)``."""

    def __init__(self, samples: list[dict[str, np.ndarray]], episodes: list[dict[str, Any]]):
        self.samples, self.episodes = samples, episodes

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return _fragment, (self.samples, self.episodes)


def _send_forever(spec: Any, index: int, incarnation: int, conn: Any, parent: int) -> None:
    """Fragments of ``per`` samples (collector, incarnation, seq, payload) forever; one episode
    summary per fragment. ``sent[index]``: fragments sent; ``busy[index]``: 1 while in ``send``;
    ``allow[index]``: how many fragments it may send; ``die_after``: exit after that many."""
    p = spec.env_config
    per, payload = p.get("per", 4), p.get("payload", SAMPLE_BYTES - 24)
    sent, busy, allow = p.get("sent"), p.get("busy"), p.get("allow")
    k = 0
    with contextlib.suppress(BrokenPipeError, EOFError, ConnectionResetError, OSError):
        while True:
            while allow is not None and k >= allow[index]:  # the test releases each fragment
                time.sleep(0.01)
            samples = [{"collector": np.int64(index), "incarnation": np.int64(incarnation),
                        "seq": np.int64(k * per + j), "payload": np.full(payload, j, np.uint8)}
                       for j in range(per)]  # fmt: skip
            episodes = [{"collector": index, "incarnation": incarnation, "fragment": k}]
            if busy is not None:
                busy[index] = 1
            conn.send(_Wire(samples, episodes))
            if busy is not None:
                busy[index] = 0
            k += 1
            if sent is not None:
                sent[index] = k
            if k == p.get("die_after"):
                os._exit(1)


def _silent(spec: Any, index: int, incarnation: int, conn: Any, parent: int) -> None:
    """Never sends (``stubborn``: ignores SIGTERM, so only SIGKILL stops it; ``ready[index]``: 1
    once it does)."""
    if spec.env_config.get("stubborn"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if (ready := spec.env_config.get("ready")) is not None:
        ready[index] = 1
    while True:
        time.sleep(0.05)


def _crash(spec: Any, index: int, incarnation: int, conn: Any, parent: int) -> None:
    """Dies at once, every time (a collector that cannot start: a bad env, a bad agent)."""
    sys.exit(3)


def _send_garbage(spec: Any, index: int, incarnation: int, conn: Any, parent: int) -> None:
    """Sends something that is not a fragment, then waits."""
    conn.send(12345)
    while True:
        time.sleep(0.05)


# ---------------------------------------------------------------------- helpers
def _pool(target: Callable[..., None], n: int = 1, *, max_bytes: int = 1 << 20,
          name: str = "rank-test", **params: Any) -> Any:  # fmt: skip
    from tj_data import LiveQueue
    from tj_hybrid.phase3.collectors import CollectorPool

    # the pool hands ``spec`` to the target untouched: a plain namespace spares each test
    # collector unpickling a ``CollectorSpec`` (importing tj_hybrid.phase3, hence torch)
    spec = SimpleNamespace(env_config=params)
    queue = LiveQueue(max_items=1 << 20, max_bytes=max_bytes)
    return CollectorPool(spec, n, queue, name=name, target=target)  # type: ignore[arg-type]


def _until(cond: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.02)


def _get(pool: Any, timeout: float = WAIT_S) -> Any:
    sample = pool.queue.get(timeout=timeout)
    assert sample is not None, "the queue closed"
    return sample


def _gone(pid: int) -> bool:
    """Stopped and reaped (a zombie still has its pid)."""
    return not psutil.pid_exists(pid)


def _children() -> dict[int, psutil.Process]:
    """This process's descendants, without multiprocessing's resource tracker."""
    out = {}
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if not any("resource_tracker" in a for a in p.cmdline()):
                out[p.pid] = p
    return out


class _Clock:
    """A clock the test advances."""

    def __init__(self) -> None:
        self.now, self.calls = 0.0, 0

    def __call__(self) -> float:
        self.calls += 1
        return self.now


def _drain_in_thread(stream: Any) -> tuple[threading.Thread, list[Any], list[BaseException]]:
    got: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            for sample in stream:
                got.append(sample)
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, got, errors


# ---------------------------------------------------------------------- flow
def test_samples_flow_in_order_per_collector_and_episodes_drain() -> None:
    pool = _pool(_send_forever, n=2)
    with pool:
        seen: dict[int, list[int]] = {0: [], 1: []}
        while min(len(v) for v in seen.values()) < 40:
            s = _get(pool)
            assert int(s["incarnation"]) == 0
            assert s["payload"].shape == (SAMPLE_BYTES - 24,)
            seen[int(s["collector"])].append(int(s["seq"]))
        first = pool.episodes()
    rest, after = pool.episodes(), pool.episodes()  # the pump has stopped: nothing comes after
    for seqs in seen.values():
        assert seqs == list(range(len(seqs)))  # in order, nothing lost or repeated
    assert after == [] and first
    for c in (0, 1):
        fragments = [e["fragment"] for e in first + rest if e["collector"] == c]
        assert fragments == list(range(len(fragments)))  # each summary exactly once
        assert len(fragments) >= len(seen[c]) // 4
    assert pool.stats.restarts == 0 and pool.stats.deaths == []
    assert pool.stats.samples >= 80 and pool.stats.fragments >= 20


def test_a_full_queue_blocks_the_collectors_instead_of_growing() -> None:
    max_bytes = 16 * SAMPLE_BYTES
    sent, busy = CTX.Array("q", 1), CTX.Array("b", 1)
    pool = _pool(_send_forever, max_bytes=max_bytes, sent=sent, busy=busy)
    reader, _writer = CTX.Pipe(duplex=False)
    pipe_bytes = fcntl.fcntl(reader.fileno(), fcntl.F_GETPIPE_SZ)  # what a pipe buffers
    with pool:
        _until(lambda: pool.stats.samples == 16, "the queue to fill")
        # nothing is consumed: the collector fills the pipe, then stays blocked in send
        history: list[tuple[int, int]] = []

        def settled() -> bool:
            history.append((sent[0], busy[0]))
            assert pool.queue.nbytes <= max_bytes and len(pool.queue) == 16
            return len(history) > 10 and set(history[-10:]) == {(history[-1][0], 1)}

        _until(settled, "the collector to stay blocked in send")
        stalled = sent[0]
        assert pool.stats.samples == 16
        # what it sent fits in the queue, the pump's hand (one fragment) and the pipe's buffer
        assert stalled * 4 <= 16 + 4 + pipe_bytes // (SAMPLE_BYTES - 24)
        seqs = [int(_get(pool)["seq"]) for _ in range(200)]  # consuming unblocks it
        assert seqs == list(range(200))
        assert sent[0] > stalled
        assert pool.queue.nbytes <= max_bytes
    assert pool.stats.queue_peak == max_bytes  # it filled, and never went over


# ---------------------------------------------------------------------- faults
def test_sigkilled_collector_is_replaced_and_samples_keep_flowing() -> None:
    pool = _pool(_send_forever, n=2)
    with pool:
        _get(pool)
        victim = pool.pids()[0]
        os.kill(victim, signal.SIGKILL)
        fresh = 0
        deadline = time.monotonic() + WAIT_S
        while fresh < 8:  # samples of the replacement (incarnation 1) arrive, from seq 0
            assert time.monotonic() < deadline, pool.describe()
            s = _get(pool)
            if int(s["collector"]) == 0 and int(s["incarnation"]) == 1:
                assert int(s["seq"]) == fresh
                fresh += 1
        assert pool.stats.restarts == 1
        assert pool.pids()[0] != victim and pool.pids()[1] != victim
        assert _gone(victim)
        (death,) = pool.stats.deaths
        assert "collector 0" in death and "SIGKILL" in death and str(victim) in death
        assert pool.error is None


def test_collector_killed_mid_send_breaks_only_its_own_pipe() -> None:
    """8 MiB fragments and a queue smaller than one sample: the pump holds a fragment, the
    collector is blocked half-way through sending the next one when it is killed."""
    payload, bound = 2 << 20, 1 << 20
    sent, busy = CTX.Array("q", 1), CTX.Array("b", 1)
    pool = _pool(_send_forever, max_bytes=bound, payload=payload, sent=sent, busy=busy)
    with pool:
        _until(lambda: pool.stats.fragments == 1 and sent[0] == 1 and busy[0] == 1,
               "the collector to be blocked mid-send")  # fmt: skip
        victim = pool.pids()[0]
        os.kill(victim, signal.SIGKILL)
        got = [_get(pool) for _ in range(4)]  # the fragment the pump held arrives whole
        assert [(int(s["incarnation"]), int(s["seq"])) for s in got] == [(0, j) for j in range(4)]
        s = _get(pool)  # then the replacement's first sample, never a piece of the half-sent one
        assert (int(s["incarnation"]), int(s["seq"])) == (1, 0)
        assert all(x["payload"].shape == (payload,) for x in [*got, s])
        assert pool.stats.restarts == 1 and pool.pids()[0] != victim and _gone(victim)
        assert "collector 0" in pool.stats.deaths[0] and "SIGKILL" in pool.stats.deaths[0]
    # a sample larger than the bound is accepted only into an empty queue: never more than one
    assert pool.stats.queue_peak <= max(bound, payload + 24)


def test_a_collector_that_keeps_dying_before_its_first_fragment_fails_the_pool() -> None:
    """A collector that cannot start (bad env, bad agent) is not restarted forever: the stream
    raises after a few deaths in a row, long before ``timeout_s`` (the clock never moves)."""
    from tj_hybrid.phase3.collectors import CollectorsStalled, SampleStream

    pool = _pool(_crash, name="rank3")
    with pool:
        stream = SampleStream(pool, timeout_s=600, clock=_Clock(), poll_s=0.05)
        thread, got, errors = _drain_in_thread(stream)
        thread.join(WAIT_S)
        alive = thread.is_alive()
    assert not alive, f"still restarting: {pool.describe()}"
    (err,) = errors
    assert isinstance(err, CollectorsStalled) and got == []
    assert "rank3" in str(err) and "before its first fragment" in str(err)
    assert "exit code 3" in str(err)
    assert pool.stats.restarts == pool.max_early_deaths - 1


def test_a_collector_that_dies_after_producing_is_restarted_every_time() -> None:
    pool = _pool(_send_forever, die_after=1)
    with pool:
        incarnations: set[int] = set()
        while len(incarnations) < pool.max_early_deaths + 2:
            s = _get(pool)
            incarnations.add(int(s["incarnation"]))
            assert pool.error is None, pool.error
    assert pool.stats.restarts >= pool.max_early_deaths + 1


def test_what_a_collector_sent_before_dying_still_arrives() -> None:
    """The pump is busy (full queue) while a collector sends its last fragment and exits: that
    fragment is read from the pipe before the death is handled, not dropped with it."""
    sent = CTX.Array("q", 1)
    pool = _pool(_send_forever, die_after=2, max_bytes=4 * SAMPLE_BYTES, sent=sent)
    with pool:
        victim = pool.pids()[0]

        def exited() -> bool:
            try:
                return psutil.Process(victim).status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return True

        _until(lambda: sent[0] == 2 and exited(), "the collector to send twice and exit")
        got = [_get(pool) for _ in range(9)]
        assert [(int(s["incarnation"]), int(s["seq"])) for s in got] == [
            *((0, j) for j in range(8)), (1, 0)]  # fmt: skip
        assert pool.stats.restarts == 1 and "exit code 1" in pool.stats.deaths[0]
        assert [e["fragment"] for e in pool.episodes() if e["incarnation"] == 0] == [0, 1]


def test_a_pump_failure_reaches_the_reader() -> None:
    from tj_hybrid.phase3.collectors import CollectorsStalled, SampleStream

    pool = _pool(_send_garbage, name="rank5")
    with pool, pytest.raises(CollectorsStalled, match=r"rank5.*the pump failed.*AttributeError"):
        next(iter(SampleStream(pool, timeout_s=600, clock=_Clock(), poll_s=0.05)))


def _pump_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"collector-pump-{name}" and t.is_alive()]


def test_close_stops_every_collector_and_is_idempotent() -> None:
    """Close while one collector is blocked in send (full queue) and one ignores SIGTERM."""
    ready = CTX.Array("b", 1)
    blocked = _pool(_send_forever, max_bytes=4 * SAMPLE_BYTES, name="blocked").start()
    stubborn = _pool(_silent, stubborn=True, ready=ready, name="stubborn").start()
    try:
        _until(lambda: blocked.stats.samples == 4, "the queue to fill")
        _until(lambda: ready[0] == 1, "the stubborn collector to ignore SIGTERM")
    finally:
        pids = blocked.pids() + stubborn.pids()
        blocked.close()
        stubborn.close()
    for pid in pids:
        assert _gone(pid)
    assert not set(_children()) & set(pids)
    assert not _pump_threads("blocked") and not _pump_threads("stubborn")
    blocked.close()  # idempotent
    stubborn.close()
    assert blocked.queue.get(timeout=1) is not None  # what was queued can still be drained
    assert blocked.stats.restarts == 0 and stubborn.stats.restarts == 0


def test_close_as_collectors_die_leaves_nothing_running() -> None:
    """Collectors dying as the pool closes (Ctrl-C reaches the whole process group): the pump
    must neither start replacements that nobody stops nor fail on a pipe being closed. (Before
    the pump was stopped first, about one close in four left a collector running here.)"""
    for i in range(8):
        pool = _pool(_send_forever, n=2, per=1, payload=8, name=f"dying{i}")
        with pool:
            _get(pool)
            for pid in pool.pids():
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.002 * i)  # close at different points of the pump's handling
        left = _children()
        for p in left.values():  # never leave them running, whatever the outcome
            with contextlib.suppress(psutil.Error):
                p.kill()
        assert not left, f"close {i}: collectors left running: {sorted(left)}"
        assert pool.error is None, f"close {i}: {pool.error!r}"
        assert all(_gone(pid) for pid in pool.pids())
        assert not _pump_threads(f"dying{i}")


# ---------------------------------------------------------------------- the stream's timeout
def test_stream_raises_naming_the_pool_when_no_sample_comes() -> None:
    """The timeout runs on the injected clock and restarts with every sample."""
    from tj_hybrid.phase3.collectors import CollectorsStalled, SampleStream

    clock, allow = _Clock(), CTX.Array("q", 1)
    pool = _pool(_send_forever, allow=allow, name="rank7")
    with pool:
        stream = SampleStream(pool, timeout_s=5, clock=clock, poll_s=0.02)
        thread, got, errors = _drain_in_thread(stream)
        _until(lambda: clock.calls >= 10, "the stream to poll")
        assert thread.is_alive() and not errors  # real time passes, the injected clock does not
        for k in range(1, 5):  # 4 s between fragments: 16 s in all, each under the timeout
            clock.now += 4.0
            allow[0] = k
            _until(lambda: len(got) == 4 * k, f"fragment {k}")  # noqa: B023
            calls = clock.calls
            _until(lambda: clock.calls > calls + 3, "the stream to poll again")  # noqa: B023
            assert not errors, errors
        clock.now += 5.5
        thread.join(WAIT_S)
        assert not thread.is_alive()
    (err,) = errors
    assert isinstance(err, CollectorsStalled)
    assert [int(s["seq"]) for s in got] == list(range(16))
    text = str(err)
    assert "no rollout sample for 5 s" in text and "rank7" in text
    assert "1/1 collector(s) alive" in text and str(pool.pids()[0]) in text
    assert "4 fragment(s)" in text and "deaths: none" in text
