"""``RaySession`` with real Ray (one CPU, small caps): starts and stops leaving no Ray process, its
caps reach Ray, an exception inside the block still shuts down, a run dir too long for Ray's
socket paths works, stragglers are killed, and attaching to a ``ray start`` cluster leaves that
cluster running. ``derive_caps`` is checked on its own (pure)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import psutil
import pytest

from tj_dist.ray_session import (
    OBJECT_STORE_MIN_BYTES,
    RaySession,
    RaySessionConfig,
    derive_caps,
    fits_socket_paths,
)
from tj_monitor import memory_limit, shm_usage

GiB, MiB = 2**30, 2**20
SMALL = 320 * MiB  # a budget whose derived object store (80 MiB) is just above Ray's minimum


# ---------------------------------------------------------------------- derive_caps (pure)
@pytest.mark.parametrize(
    ("budget", "limit", "shm", "expected"),
    [
        (16 * GiB, 16 * GiB, None, (4 * GiB, 8 * GiB)),  # the seeds' numbers
        (0.6 * 16 * GiB, 16 * GiB, None, (int(2.4 * GiB), int(4.8 * GiB))),  # default budget
        (64 * GiB, 8 * GiB, None, (2 * GiB, 4 * GiB)),  # a budget above the machine: the machine
        (4 * GiB, 64 * GiB, 32 * GiB, (1 * GiB, 2 * GiB)),  # /dev/shm big enough: not binding
        (16 * GiB, 16 * GiB, 1 * GiB, (int(0.95 * GiB), 8 * GiB)),  # 95% of what /dev/shm holds
        (16 * GiB, 16 * GiB, 64 * MiB, (OBJECT_STORE_MIN_BYTES, 8 * GiB)),  # Docker's 64 MiB
        (100 * MiB, 16 * GiB, None, (OBJECT_STORE_MIN_BYTES, 50 * MiB)),  # Ray's minimum
    ],
)
def test_derive_caps(budget, limit, shm, expected) -> None:
    assert derive_caps(budget, limit, shm_free_bytes=shm) == expected


def test_derive_caps_and_config_refuse_bad_values() -> None:
    for args in ((0, GiB), (GiB, 0), (-1, GiB), (float("nan"), GiB)):
        with pytest.raises(ValueError, match="derive_caps"):
            derive_caps(*args)
    with pytest.raises(ValueError, match="shm_free_bytes"):
        derive_caps(GiB, GiB, shm_free_bytes=-1)
    with pytest.raises(ValueError, match="num_cpus, temp_dir belong to the cluster"):
        RaySessionConfig(address="127.0.0.1:6379", num_cpus=1, temp_dir="runs/x/ray")
    with pytest.raises(
        ValueError, match=r"object_store_bytes: 1048576, expected an int >= 78643200"
    ):
        RaySessionConfig(object_store_bytes=MiB)
    for bad in (
        {"budget": 0},
        {"budget": True},
        {"num_cpus": -1},
        {"num_gpus": 1.5},
        {"memory_bytes": 0},
        {"address": ""},
        {"shutdown_timeout_s": -1.0},
        {"temp_dir": ""},
        {"env_vars": {"PYTHONHASHSEED": 0}},
    ):
        with pytest.raises(ValueError, match="RaySessionConfig"):
            RaySessionConfig(**bad)
    assert RaySessionConfig(budget=0.5).budget_bytes(8 * GiB) == 4 * GiB
    assert RaySessionConfig(budget=3 * GiB).budget_bytes(8 * GiB) == 3 * GiB
    assert RaySessionConfig(temp_dir="rel/ray").temp_dir == Path.cwd() / "rel/ray"


def test_fits_socket_paths() -> None:
    assert fits_socket_paths("/tmp/tjray-abcdefgh")
    assert not fits_socket_paths("/tmp/" + "x" * 40)
    assert fits_socket_paths("/tmp/" + "x" * 35)  # 107 bytes with Ray's longest tail


# ---------------------------------------------------------------------- real Ray
@pytest.fixture
def ray_tmp():
    """A short private temp dir for Ray's session files (not the shared /tmp/ray)."""
    path = Path(tempfile.mkdtemp(prefix="tjray-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _ray_tree() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


def _gone(procs: list[psutil.Process]) -> bool:
    def dead(p: psutil.Process) -> bool:
        try:
            return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    return all(dead(p) for p in procs)


@pytest.mark.timeout(120)
def test_local_session_starts_stops_and_caps_reach_ray(tmp_path: Path) -> None:
    import ray

    before = {p.pid for p in _ray_tree()}
    config = RaySessionConfig(num_cpus=1, budget=SMALL, temp_dir=tmp_path / "ray")
    shm = shm_usage()
    expected = derive_caps(SMALL, memory_limit(), shm_free_bytes=shm and shm.total - shm.used)
    with RaySession(config) as session:
        resources = ray.cluster_resources()
        assert resources["CPU"] == 1
        assert resources["object_store_memory"] == expected[0] == session.object_store_bytes
        assert resources["memory"] == expected[1] == session.memory_bytes
        (node,) = ray.nodes()
        assert node["Resources"]["object_store_memory"] == expected[0]
        assert node["ObjectStoreSocketName"].startswith(session.session_dir)

        @ray.remote
        def pid() -> int:
            return os.getpid()

        worker = ray.get(pid.remote())
        inside = [p for p in _ray_tree() if p.pid not in before]
        names = {p.name() for p in inside}
        assert {"raylet", "gcs_server"} <= names and worker in {p.pid for p in inside}
    result = session.result
    assert not ray.is_initialized()
    assert _gone(inside)  # raylet, GCS, helpers and the worker
    assert _cluster_processes(result.session_dir) == []  # nothing of it elsewhere either
    assert {p.pid for p in _ray_tree()} <= before
    assert result.local and result.killed == () and result.left == ()
    assert result.ray_processes >= len(inside)
    assert result.pss_started > result.pss_before and result.pss_after < result.pss_started
    assert result.session_dir.startswith(str(result.temp_dir))
    assert result.temp_dir == tmp_path / "ray" or result.relocated
    if result.relocated:
        shutil.rmtree(result.temp_dir, ignore_errors=True)


@pytest.mark.timeout(120)
def test_exception_inside_the_block_still_shuts_down(ray_tmp: Path) -> None:
    import ray

    before = {p.pid for p in _ray_tree()}  # e.g. earlier tests' resource trackers: not Ray's
    session = RaySession(RaySessionConfig(num_cpus=1, budget=SMALL, temp_dir=ray_tmp))
    with pytest.raises(KeyboardInterrupt), session:  # what Ctrl-C raises in the driver
        inside = [p for p in _ray_tree() if p.pid not in before]
        assert inside
        raise KeyboardInterrupt
    assert not ray.is_initialized() and _gone(inside) and session.result.left == ()
    with pytest.raises(RuntimeError, match="entered once"), session:
        pass


@pytest.mark.timeout(120)
def test_long_temp_dir_is_relocated_and_linked(tmp_path: Path) -> None:
    """A run dir too long for AF_UNIX socket paths: Ray gets a short private dir, the requested
    dir gets symlinks to the session (as Ray's own temp dir has ``session_latest``)."""
    requested = tmp_path / ("long-run-name-" * 6) / "phase2" / "ray"
    assert not fits_socket_paths(requested)
    with RaySession(RaySessionConfig(num_cpus=1, budget=SMALL, temp_dir=requested)) as session:
        session_dir = Path(session.session_dir)
        assert session.relocated and fits_socket_paths(session.temp_dir)
        assert (session_dir / "sockets").is_dir()
        latest = requested / "session_latest"
        assert latest.is_symlink() and latest.resolve() == session_dir.resolve()
        assert (requested / session_dir.name).resolve() == session_dir.resolve()
        assert (latest / "logs").is_dir()  # the logs are reachable from the run dir
    try:
        assert session.result.relocated and session.result.temp_dir == session.temp_dir
        assert session.result.left == ()
    finally:
        shutil.rmtree(session.temp_dir, ignore_errors=True)


# A launcher (as a SUMO start script would be) that starts a SUMO stand-in ignoring SIGTERM in its
# own session, prints its pid and waits. Ray kills a worker's process group and direct children
# when the worker exits, not what those started: the stand-in outlives Ray's shutdown.
_STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
_LAUNCHER = (
    "import subprocess, sys, time\n"
    f"p = subprocess.Popen([sys.executable, '-c', {_STUBBORN!r}], start_new_session=True)\n"
    "print(p.pid, flush=True)\n"
    "time.sleep(120)\n"
)


@pytest.mark.timeout(120)
def test_stragglers_are_killed(ray_tmp: Path) -> None:
    """A process below a worker that ignores SIGTERM (a stuck SUMO) outlives Ray's shutdown:
    after ``shutdown_timeout_s`` the session SIGKILLs it and reports it."""
    import ray

    config = RaySessionConfig(num_cpus=1, budget=SMALL, shutdown_timeout_s=1.0, temp_dir=ray_tmp)
    stubborn = None
    try:
        with RaySession(config) as session:

            @ray.remote
            def spawn() -> int:
                launcher = subprocess.Popen(
                    [sys.executable, "-c", _LAUNCHER], stdout=subprocess.PIPE, text=True
                )
                return int(launcher.stdout.readline())

            stubborn = psutil.Process(ray.get(spawn.remote()))
        assert _gone([stubborn])
        assert stubborn.pid in session.result.killed and session.result.left == ()
    finally:
        if stubborn is not None and not _gone([stubborn]):
            stubborn.kill()


def test_ray_session_is_lazy() -> None:
    """``import tj_dist`` does not import Ray; ``tj_dist.RaySession`` does."""
    code = (
        "import sys\n"
        "import tj_dist\n"
        "before = 'ray' in sys.modules\n"
        "from tj_dist.ray_session import RaySession\n"
        "print(before, tj_dist.RaySession is RaySession)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False True"


# ---------------------------------------------------------------------- attach
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cluster_processes(temp_dir: str) -> list[psutil.Process]:
    """The processes of a ``ray start`` cluster whose temp dir is ``temp_dir``, with descendants
    (its workers), this test's own process tree excepted."""
    me = psutil.Process()
    skip = {me.pid, *(p.pid for p in me.parents())}
    roots = [
        p
        for p in psutil.process_iter(["cmdline"])
        if p.pid not in skip and any(temp_dir in a for a in p.info["cmdline"] or ())
    ]
    found = {p.pid: p for p in roots}
    for p in roots:
        try:
            found.update((c.pid, c) for c in p.children(recursive=True))
        except psutil.Error:
            continue
    return list(found.values())


def _stop_cluster(temp_dir: str) -> None:
    """Stop only this cluster: ``ray stop`` would stop every Ray of this machine (other users'
    and other tests' too)."""
    procs = _cluster_processes(temp_dir)
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(procs, timeout=5)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(alive, timeout=5)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_attach_leaves_the_cluster_running(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster from ``ray start --head`` plus a second node, with token auth: the session
    attaches through its address (the token is sent though ``RAY_AUTH_MODE`` is unset here), sees
    both nodes and the cluster's resources, and on exit only disconnects, leaving no stale token
    for a later ``ray.init`` in this process."""
    import ray

    temp_dir = tempfile.mkdtemp(prefix="tjray-")
    port = _free_port()
    token = uuid.uuid4().hex  # this cluster's own token: nothing read from or written to $HOME
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    env.pop("RAY_ADDRESS", None)
    ray_cli = Path(sys.executable).with_name("ray")
    node = ["--num-cpus=1", f"--object-store-memory={80 * MiB}", "--disable-usage-stats"]
    try:
        for extra in (
            ["--head", f"--port={port}", f"--temp-dir={temp_dir}", "--include-dashboard=false"],
            [f"--address=127.0.0.1:{port}"],
        ):
            out = subprocess.run(
                [str(ray_cli), "start", *extra, *node],
                env=env, capture_output=True, text=True, timeout=90, check=False,
            )  # fmt: skip
            assert out.returncode == 0, out.stderr[-2000:]
        cluster = [p for p in _cluster_processes(temp_dir) if p.name() in ("raylet", "gcs_server")]
        assert len(cluster) == 3  # one GCS, two raylets
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        monkeypatch.delenv("RAY_AUTH_MODE", raising=False)  # as a fresh driver has it
        monkeypatch.setenv("RAY_AUTH_TOKEN", token)
        with RaySession(RaySessionConfig(address=f"127.0.0.1:{port}")) as session:
            resources = ray.cluster_resources()
            assert resources["CPU"] == 2 and resources["object_store_memory"] == 2 * 80 * MiB
            assert len([n for n in ray.nodes() if n["Alive"]]) == 2
        result = session.result
        assert not ray.is_initialized()
        assert not result.local and result.ray_processes == 0 and result.killed == ()
        assert result.address.endswith(f":{port}")
        assert not _gone(cluster) and all(p.is_running() for p in cluster)
    finally:
        _stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert _gone(cluster)
    # The session left no stale token behind: with the cluster's token gone from the environment,
    # a plain ray.init in this process (other code, other tests) starts a local Ray
    monkeypatch.undo()
    monkeypatch.setattr(ray._private.ray_constants, "RAY_ENABLE_UV_RUN_RUNTIME_ENV", False)
    local_dir = tempfile.mkdtemp(prefix="tjray-")
    try:
        ray.init(
            address="local", num_cpus=1, object_store_memory=80 * MiB, include_dashboard=False,
            _temp_dir=local_dir,
        )  # fmt: skip
        assert ray.cluster_resources()["CPU"] == 1
    finally:
        ray.shutdown()
        shutil.rmtree(local_dir, ignore_errors=True)
