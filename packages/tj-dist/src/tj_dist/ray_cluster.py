"""``LocalCluster``: a multi-node Ray cluster on this one machine, started with Ray's own CLI
(``ray start --head`` plus ``ray start --address=...`` per extra node), for trying what runs on
several machines (``phase2.ray_address``, ``RaySession(address=...)``) before renting them.

Each node gets its CPUs, its own ports (a second node on one machine needs its own node-manager,
object-manager and dashboard-agent ports; the head's minimal dashboard binds a port even with
``--include-dashboard=false``), token authentication with a token of its own, and a temp dir of
its own. ``stop`` ends exactly the processes naming that temp dir (raylets first, as ``ray stop``
orders them, SIGKILL after a grace period): ``ray stop`` would stop every Ray of this user.

A driver attaches with ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN=cluster.token`` in its
environment (``env()``) and the cluster's ``address``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tj_monitor import processes_naming, stop_processes

__all__ = ["LocalCluster"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _ray_cli() -> str:
    found = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
    if not os.access(found, os.X_OK):
        raise FileNotFoundError("the `ray` command-line tool is not installed next to Python")
    return found


@dataclass(kw_only=True)
class LocalCluster:
    """``nodes`` Ray nodes on this machine with ``cpus_per_node`` CPUs each (a context manager)."""

    nodes: int = 2
    cpus_per_node: int = 1
    object_store_bytes: int = 100_000_000
    token: str = field(default_factory=lambda: secrets.token_hex(32))
    address: str | None = None
    temp_dir: str | None = None

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.cpus_per_node < 1:
            raise ValueError(f"LocalCluster: nodes={self.nodes}, cpus_per_node="
                             f"{self.cpus_per_node}; both must be >= 1")  # fmt: skip

    def env(self) -> dict[str, str]:
        """The environment for ``ray start`` and for drivers that attach (token auth on)."""
        return {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token,
                "RAY_USAGE_STATS_ENABLED": "0"}  # fmt: skip

    def _start(self, args: list[str]) -> None:
        out = subprocess.run([_ray_cli(), "start", *args], env=self.env(), capture_output=True,
                             text=True, timeout=120, check=False)  # fmt: skip
        if out.returncode != 0:
            raise RuntimeError(f"ray start {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}")

    def start(self) -> LocalCluster:
        self.temp_dir = tempfile.mkdtemp(prefix="tjray")  # short: socket paths must fit
        common = [f"--num-cpus={self.cpus_per_node}", "--num-gpus=0", f"--temp-dir={self.temp_dir}",
                  f"--object-store-memory={self.object_store_bytes}", "--min-worker-port=0",
                  "--max-worker-port=0", "--disable-usage-stats"]  # fmt: skip
        port = _free_port()
        try:
            self._start(["--head", f"--port={port}", "--include-dashboard=false",
                         f"--dashboard-port={_free_port()}",
                         f"--dashboard-agent-listen-port={_free_port()}",
                         f"--ray-client-server-port={_free_port()}", *common])  # fmt: skip
            self.address = (Path(self.temp_dir) / "ray_current_cluster").read_text().strip()
            for _ in range(self.nodes - 1):
                self._start([f"--address={self.address}", f"--node-manager-port={_free_port()}",
                             f"--object-manager-port={_free_port()}",
                             f"--dashboard-agent-listen-port={_free_port()}", *common])  # fmt: skip
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, grace_s: float = 5.0) -> tuple[int, ...]:
        """Stop the cluster's processes; returns the pids still alive after SIGKILL (none)."""
        if self.temp_dir is None:
            return ()

        def is_raylet(proc: psutil.Process) -> bool:
            try:
                return proc.name() == "raylet"
            except psutil.Error:
                return False

        procs = processes_naming(self.temp_dir)
        raylets = [p for p in procs if is_raylet(p)]
        for group in (raylets, [p for p in procs if p not in raylets]):
            stop_processes(group, grace_s)  # SIGTERM, grace, SIGKILL
        _, left = stop_processes(processes_naming(self.temp_dir), grace_s)  # started meanwhile
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        return tuple(left)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
