"""``RaySession``: the Ray instance of one training phase, started and stopped by the code.

Locally it runs ``ray.init`` with an object store and a ``memory`` resource capped from the run's
memory budget (``derive_caps``: the seeds' 4 GB / 8 GB on a 16 GB machine, scaled), no dashboard,
quiet logs and its files under the run directory; on exit it shuts Ray down and waits (bounded)
until every process Ray started is gone, killing stragglers, so the process tree's memory returns
to where it was. With ``address`` it attaches to an existing cluster and on exit only disconnects.

Importing this module imports Ray: ``tj_dist`` loads it only on first use of ``tj_dist.RaySession``.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil
import ray
from ray._private import ray_constants

from tj_monitor import memory_limit, shm_usage, tree_memory
from tj_monitor.processes import processes_naming, stop_processes, with_descendants

__all__ = [
    "OBJECT_STORE_MIN_BYTES",
    "RaySession",
    "RaySessionConfig",
    "RaySessionResult",
    "derive_caps",
    "fits_socket_paths",
]

log = logging.getLogger(__name__)

OBJECT_STORE_MIN_BYTES = ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES  # 75 MiB in Ray 2.x
OBJECT_STORE_SHARE = 0.25  # of the budget: the seeds' 4 GB of a 16 GB machine
MEMORY_SHARE = 0.5  # of the budget: the seeds' 8 GB `_memory` of a 16 GB machine
SHM_HEADROOM = 0.95  # of /dev/shm's free bytes (Ray's own default cap uses the same margin)

# Ray binds AF_UNIX sockets at <temp>/<session>/sockets/<name>; Linux's sun_path holds 107 bytes
# plus NUL and Ray refuses longer paths. The longest tail it builds (7-digit pid, numbered name):
_SOCKET_PATH_MAX = 107
_SOCKET_TAIL = "/session_2026-01-01_00-00-00_000000_4194304/sockets/plasma_store.99"


def derive_caps(
    budget_bytes: float, limit_bytes: float, *, shm_free_bytes: int | None = None
) -> tuple[int, int]:
    """``(object_store, memory)`` bytes for ``ray.init`` from the run's memory budget.

    Object store = 1/4 and ``memory`` = 1/2 of ``min(budget, limit)`` (4 GB and 8 GB when the budget
    is a whole 16 GB machine). The object store is kept within what ``/dev/shm`` can hold now (95%
    of ``shm_free_bytes``; Ray refuses a bigger one or moves it to disk) and never below Ray's
    minimum of 75 MiB (below that, with a tiny /dev/shm, Ray puts it in its temp dir: slower, but
    it runs). Pure: the caller reads the limit and /dev/shm (``RaySession`` does).
    """
    if not budget_bytes > 0 or not limit_bytes > 0:
        raise ValueError(
            f"derive_caps: budget_bytes={budget_bytes!r} and limit_bytes={limit_bytes!r} must be > 0"
        )
    if shm_free_bytes is not None and shm_free_bytes < 0:
        raise ValueError(f"derive_caps: shm_free_bytes={shm_free_bytes!r} must be >= 0")
    budget = min(float(budget_bytes), float(limit_bytes))
    object_store = int(budget * OBJECT_STORE_SHARE)
    if shm_free_bytes is not None:
        object_store = min(object_store, int(shm_free_bytes * SHM_HEADROOM))
    return max(object_store, OBJECT_STORE_MIN_BYTES), max(int(budget * MEMORY_SHARE), 1)


def fits_socket_paths(temp_dir: str | os.PathLike[str]) -> bool:
    """Whether Ray's socket paths under ``temp_dir`` (made absolute) stay within AF_UNIX's limit."""
    path = os.path.abspath(os.path.expanduser(os.fspath(temp_dir)))
    return len(os.fsencode(path + _SOCKET_TAIL)) <= _SOCKET_PATH_MAX


# RaySessionConfig's integer fields and their smallest values (the object store: Ray's minimum)
_INT_MINIMUMS = {
    "num_cpus": 0,
    "num_gpus": 0,
    "object_store_bytes": OBJECT_STORE_MIN_BYTES,
    "memory_bytes": 1,
}
_CLUSTER_FIELDS = ("num_cpus", "num_gpus", "object_store_bytes", "memory_bytes", "temp_dir")


@dataclass(kw_only=True)
class RaySessionConfig:
    """How ``RaySession`` gets its Ray.

    ``address``: an existing cluster to attach to (``"host:port"``, ``"auto"``, ``"ray://..."``);
    None starts a local Ray (``RAY_ADDRESS`` is ignored then). ``num_cpus``/``num_gpus``: None lets
    Ray detect them. ``object_store_bytes``/``memory_bytes``: None derives them from ``budget``
    (``derive_caps``), a fraction (<= 1) of the container-aware memory limit or bytes (> 1).
    ``temp_dir``: Ray's session files (logs, sockets, spilled objects), e.g. ``runs/<run>/phase2/ray``;
    None is Ray's default. ``shutdown_timeout_s``: how long exit waits for Ray's processes before
    killing them. ``log_to_driver``: echo workers' output here (their logs are always in the
    session dir). ``uv_runtime_env``: Ray's hook that, under ``uv run``, starts every worker through
    ``uv run`` in a packaged copy of the working dir (slow; the workers here share this venv).
    ``env_vars``: environment variables of this job's workers on a cluster (Ray's
    ``runtime_env``; e.g. ``PYTHONHASHSEED`` for a repeatable run); a local Ray's workers inherit
    this process's environment instead. The caps, CPUs, GPUs and temp dir are the cluster's own when attaching: they must stay None.
    """

    address: str | None = None
    num_cpus: int | None = None
    num_gpus: int | None = None
    object_store_bytes: int | None = None
    memory_bytes: int | None = None
    budget: float = 0.6
    temp_dir: str | Path | None = None
    include_dashboard: bool = False
    logging_level: int = logging.WARNING
    log_to_driver: bool = False
    shutdown_timeout_s: float = 20.0
    uv_runtime_env: bool = False
    env_vars: dict[str, str] | None = None

    def __post_init__(self) -> None:
        if self.env_vars is not None and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.env_vars.items()
        ):
            raise ValueError(f"RaySessionConfig.env_vars: {self.env_vars!r}, expected str -> str")
        if self.address is not None and (not isinstance(self.address, str) or not self.address):
            raise ValueError(f"RaySessionConfig.address: {self.address!r}, expected 'host:port'")
        for name, minimum in _INT_MINIMUMS.items():
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < minimum):
                raise ValueError(
                    f"RaySessionConfig.{name}: {value!r}, expected an int >= {minimum}"
                )
        if type(self.budget) not in (int, float) or not self.budget > 0:
            raise ValueError(
                f"RaySessionConfig.budget: {self.budget!r}, expected a fraction in (0, 1] or bytes"
            )
        if not self.shutdown_timeout_s >= 0:
            raise ValueError(
                f"RaySessionConfig.shutdown_timeout_s: {self.shutdown_timeout_s!r}, expected >= 0"
            )
        if self.temp_dir is not None:
            if not isinstance(self.temp_dir, str | Path) or not str(self.temp_dir):
                raise ValueError(f"RaySessionConfig.temp_dir: {self.temp_dir!r}, expected a path")
            self.temp_dir = Path(self.temp_dir).expanduser().absolute()
        given = [name for name in _CLUSTER_FIELDS if getattr(self, name) is not None]
        if self.address is not None and given:
            raise ValueError(
                f"RaySessionConfig: {', '.join(given)} belong to the cluster at "
                f"{self.address!r}; leave them None when attaching"
            )

    def budget_bytes(self, limit_bytes: int) -> float:
        """The budget in bytes against ``limit_bytes`` (the container-aware memory limit)."""
        return float(self.budget) if self.budget > 1 else float(self.budget) * limit_bytes


@dataclass(frozen=True, kw_only=True)
class RaySessionResult:
    """What one session did, for the phase's report.

    ``local``: started (and stopped) here, else attached. ``temp_dir``: where Ray's files are (a
    short directory when the requested one was too long for socket paths, ``relocated``).
    ``pss_before``/``pss_started``/``pss_after``: this process tree's PSS before ``ray.init``,
    right after it and after the shutdown. ``ray_processes``: processes Ray had started here;
    ``killed``: those still alive after ``shutdown_timeout_s`` (SIGKILLed); ``left``: alive even
    after that (should be empty).
    """

    address: str
    local: bool
    session_dir: str | None
    temp_dir: Path | None
    relocated: bool
    object_store_bytes: int | None
    memory_bytes: int | None
    pss_before: int
    pss_started: int
    pss_after: int
    ray_processes: int
    killed: tuple[int, ...]
    left: tuple[int, ...]

    @property
    def pss_delta(self) -> int:
        """``pss_after - pss_before``: what the session left behind in this process tree."""
        return self.pss_after - self.pss_before


class RaySession:
    """Context manager: ``with RaySession(RaySessionConfig(...)) as session:`` runs Ray inside.

    ``session.result`` (``RaySessionResult``) is set on exit, also when the block raised (the
    exception propagates after the shutdown). One session at a time per process: entering while
    Ray is already initialised here raises ``RuntimeError``.
    """

    def __init__(self, config: RaySessionConfig | None = None) -> None:
        self.config = config if config is not None else RaySessionConfig()
        self.result: RaySessionResult | None = None
        self.address: str | None = None
        self.session_dir: str | None = None
        self.temp_dir: Path | None = None
        self.relocated = False
        self.object_store_bytes: int | None = None
        self.memory_bytes: int | None = None
        self.pss_before = 0
        self.pss_started = 0
        self._roots: list[psutil.Process] = []
        self._entered = False

    @property
    def local(self) -> bool:
        return self.config.address is None

    def __enter__(self) -> RaySession:
        if self._entered:
            raise RuntimeError("RaySession: a session is entered once; make a new one")
        if ray.is_initialized():
            raise RuntimeError(
                "RaySession: Ray is already initialised in this process; call ray.shutdown() first"
            )
        self._entered = True
        self.pss_before = tree_memory().pss
        try:
            if self.local:
                _refresh_token_auth(attach=False)
                self._start_local()
            else:
                self._attach()
            self.pss_started = tree_memory().pss
        except BaseException as err:  # Ray up but the session not: no __exit__ would follow
            if ray.is_initialized():
                self.__exit__(type(err), err, err.__traceback__)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        ray_processes: list[psutil.Process] = []
        if self.local:
            ray_processes = with_descendants(self._roots)
        try:
            _shutdown()
        except Exception:  # the processes below are stopped all the same
            log.exception("RaySession: ray.shutdown() failed")
        _refresh_token_auth(attach=False)  # the next ray.init reads the token afresh
        killed: tuple[int, ...] = ()
        left: tuple[int, ...] = ()
        if self.local:
            if self.session_dir is not None:  # reparented or started after the snapshot
                seen = {p.pid for p in ray_processes}
                ray_processes += [
                    p for p in processes_naming(self.session_dir) if p.pid not in seen
                ]
            killed, left = stop_processes(ray_processes, self.config.shutdown_timeout_s, sig=None)
            if left:
                log.error("RaySession: Ray processes still alive after SIGKILL: %s", left)
        self.result = RaySessionResult(
            address=self.address or "",
            local=self.local,
            session_dir=self.session_dir,
            temp_dir=self.temp_dir,
            relocated=self.relocated,
            object_store_bytes=self.object_store_bytes,
            memory_bytes=self.memory_bytes,
            pss_before=self.pss_before,
            pss_started=self.pss_started,
            pss_after=tree_memory().pss,
            ray_processes=len(ray_processes),
            killed=killed,
            left=left,
        )

    # ------------------------------------------------------------------ start / attach
    def _start_local(self) -> None:
        cfg = self.config
        limit = memory_limit()
        shm = shm_usage()
        derived = derive_caps(
            cfg.budget_bytes(limit),
            limit,
            shm_free_bytes=None if shm is None else max(shm.total - shm.used, 0),
        )
        self.object_store_bytes = cfg.object_store_bytes or derived[0]
        self.memory_bytes = cfg.memory_bytes or derived[1]
        requested = cfg.temp_dir
        if requested is not None:
            self.relocated = not fits_socket_paths(requested)
            self.temp_dir = _short_temp_dir() if self.relocated else requested
            self.temp_dir.mkdir(parents=True, exist_ok=True)
        me = psutil.Process()
        before = {p.pid for p in me.children()}
        try:
            context = self._init(
                address="local",
                num_cpus=cfg.num_cpus,
                num_gpus=cfg.num_gpus,
                object_store_memory=self.object_store_bytes,
                _memory=self.memory_bytes,
                _temp_dir=None if self.temp_dir is None else str(self.temp_dir),
            )
        except BaseException:  # what a failed init started is stopped here (no __exit__ follows)
            _shutdown()
            started = [p for p in me.children() if p.pid not in before]
            stop_processes(with_descendants(started), cfg.shutdown_timeout_s, sig=None)
            raise
        # Ray's own processes (GCS, raylet, log monitor, ...) are this process's new children; the
        # workers are the raylet's
        self._roots = [p for p in me.children() if p.pid not in before]
        self.address = context.address_info.get("gcs_address") or context.address_info.get(
            "address", ""
        )
        self.session_dir = context.address_info.get("session_dir")
        if self.relocated and requested is not None and self.session_dir is not None:
            try:
                _leave_link(requested, Path(self.session_dir))
            except OSError as err:  # a pointer to the logs is not worth failing the phase for
                log.warning(
                    "RaySession: cannot point %s to %s: %s", requested, self.session_dir, err
                )

    def _attach(self) -> None:
        _refresh_token_auth(attach=True)
        try:
            context = self._init(address=self.config.address)
        except BaseException:
            _shutdown()  # a failed connect may leave the driver half set up
            raise
        self.address = context.address_info.get("gcs_address") or self.config.address
        self.session_dir = context.address_info.get("session_dir")

    def _init(self, **kwargs: Any) -> Any:
        cfg = self.config
        saved = ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV
        ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = cfg.uv_runtime_env and saved
        if cfg.env_vars and cfg.address is not None:
            kwargs["runtime_env"] = {"env_vars": dict(cfg.env_vars)}
        try:
            return ray.init(
                include_dashboard=cfg.include_dashboard,
                logging_level=cfg.logging_level,
                log_to_driver=cfg.log_to_driver,
                **kwargs,
            )
        finally:
            ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = saved


# ---------------------------------------------------------------------- helpers
def _shutdown() -> None:
    """``ray.shutdown``, waiting for the processes it stops where this Ray version can."""
    try:
        ray.shutdown(wait_for_processes=True)
    except TypeError:  # Ray < 2.5x: no wait_for_processes
        ray.shutdown()


def _short_temp_dir() -> Path:
    """A fresh private directory with a short path: under /tmp, else the system temp dir."""
    for base in ("/tmp", tempfile.gettempdir()):
        if (
            os.path.isdir(base)
            and os.access(base, os.W_OK)
            and fits_socket_paths(os.path.join(base, "tjray-xxxxxxxx"))
        ):
            return Path(tempfile.mkdtemp(prefix="tjray-", dir=base))
    raise RuntimeError(
        "RaySession: no short writable temp directory for Ray's socket paths (/tmp or TMPDIR)"
    )


def _leave_link(requested: Path, session_dir: Path) -> None:
    """In the requested temp dir, point to the session that lives elsewhere, as Ray's own temp
    dir would: ``<session name>`` and ``session_latest`` symlinks, or ``<name>.location`` notes
    where symlinks are refused."""
    requested.mkdir(parents=True, exist_ok=True)
    for name in (session_dir.name, "session_latest"):
        link = requested / name  # a pointer for people: no reader races it, so no atomic swap
        try:
            link.unlink(missing_ok=True)
            link.symlink_to(session_dir, target_is_directory=True)
        except OSError:
            (requested / f"{name}.location").write_text(f"{session_dir}\n")


def _refresh_token_auth(*, attach: bool) -> None:
    """Drop Ray's cached auth token, and when attaching send it if there is one.

    Ray caches the token per process: a long-lived driver (phase 1, then phase 2) would keep a
    stale one (e.g. a cluster's ``RAY_AUTH_TOKEN`` that is gone from the environment). Ray >= 2.5x
    enables token auth for a cluster found automatically but not for an explicit address, so a
    cluster that ``ray start`` set up with a token refuses such a driver; with ``RAY_AUTH_MODE``
    unset the token (``RAY_AUTH_TOKEN`` or Ray's token file) is sent when there is one (clusters
    without auth accept it too); with it set (the standard variable, also when set after Ray's
    import) Ray's cached config re-reads it.
    """
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
        from ray._raylet import AuthenticationTokenLoader
    except ImportError:  # a Ray without token authentication
        return
    AuthenticationTokenLoader.instance().reset_cache()
    if attach:
        if os.environ.get("RAY_AUTH_MODE") is not None:
            # set after Ray was imported: Ray's cached config must re-read it (what Ray's own
            # _enable_token_auth does), else the token is not sent and the cluster refuses us
            from ray._raylet import Config

            Config.initialize("")
        else:
            maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
