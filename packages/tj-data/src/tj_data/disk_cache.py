"""`DiskCache`: a directory of checksummed entry files, bounded in bytes, LRU, shared by processes.

Why not the `diskcache` library: tj-data stays numpy/h5py/torch/psutil/cachetools (DESIGN §3);
diskcache pickles values (reading a cache directory would run code) and has no checksum, so a
file truncated by a crash could be returned; its LRU policy writes SQLite on every read, one
lock shared by all DataLoader workers. `uv run apps/bench cache` measures both.

Design: one file per entry under a 256-way fan-out, named by a hash of the key. A write goes
through tj-monitor's `atomic_open` (a temp file in the same directory renamed into place: a reader
sees the old entry or the new one, and a process killed mid-write leaves only a ``.tmp-`` file,
removed when a cache is opened on the directory). Reads
verify length + crc32 (`tj_data._codec`); a corrupt entry is logged, deleted and reported as a
miss, never returned. Recency is the file's mtime, touched on every hit. Eviction takes an
exclusive `flock` on `.lock`, scans the entries and deletes the least recently used until the
total is under `low_water * max_bytes`; readers racing a deletion just miss.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tj_data._codec import CorruptEntry, decode, encode, key_json
from tj_data.errors import CacheError
from tj_data.lru_cache import CacheStats
from tj_monitor import atomic_open, remove_stale_temps

__all__ = ["DiskCache"]

log = logging.getLogger(__name__)
_SUFFIX = ".tjc"
_STALE_TMP_S = 3600.0  # a temp this old is stale even if its pid runs (reused, or another host)


class DiskCache:
    """Byte-bounded LRU cache of values in files under `directory` (safe across processes).

    Args:
        directory: created if missing; must be writable (checked now: `CacheError`).
        max_bytes: bound on the summed file sizes; eviction brings it to `low_water` x that.
        fsync: fsync each entry before publishing it (durable across power loss; off by
            default: a torn entry after a power cut fails its checksum and is refetched).
        checksum: crc32 over each entry (default). False checks the recorded lengths only
            (catches truncation, not damaged content): gets ~2x faster on large values.
    Values: numpy arrays, tensors, bytes, numbers, str, None and dicts/lists/tuples of them.
    Counters (`stats()`) are per process; contents are shared by every process using the dir.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        max_bytes: int,
        *,
        fsync: bool = False,
        low_water: float = 0.9,
        checksum: bool = True,
    ) -> None:
        if max_bytes < 1:
            raise ValueError(f"DiskCache.max_bytes={max_bytes}: expected >= 1")
        if not 0.0 < low_water <= 1.0:
            raise ValueError(f"DiskCache.low_water={low_water}: expected 0 < low_water <= 1")
        self.directory = Path(directory)
        self.max_bytes, self.fsync, self.low_water = int(max_bytes), fsync, low_water
        self.checksum = checksum
        self._check_writable()
        self._reset_counters()
        remove_stale_temps(self.directory, max_age_s=_STALE_TMP_S, recursive=True)

    def _reset_counters(self) -> None:
        self.hits = self.misses = self.evictions = self.corrupt = self.rejected = 0
        self._total: int | None = None  # total at the last scan (None: scan at the next put)
        self._since = 0  # bytes this process wrote since then

    def __getstate__(self) -> dict[str, Any]:
        keys = ("directory", "max_bytes", "fsync", "low_water", "checksum")
        return {k: getattr(self, k) for k in keys}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_counters()

    def _check_writable(self) -> None:
        probe = self.directory / f".tmp-probe-{os.getpid()}-{id(self):x}"  # a live writer's temp
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(probe, "wb") as f:
                f.write(b"ok")
            probe.unlink(missing_ok=True)
            (self.directory / ".lock").touch(exist_ok=True)
        except OSError as exc:
            raise CacheError(
                f"{self.directory}: cache directory is not writable ({exc.strerror or exc}); "
                "choose another directory or fix its permissions"
            ) from exc

    # ----- paths ------------------------------------------------------------------------
    def _path(self, key: Any) -> Path:
        digest = hashlib.blake2b(json.dumps(key_json(key)).encode(), digest_size=16).hexdigest()
        return self.directory / digest[:2] / f"{digest}{_SUFFIX}"

    def _entries(self) -> Iterator[os.DirEntry[str]]:
        try:
            subdirs = list(os.scandir(self.directory))
        except FileNotFoundError:
            return
        for d in subdirs:
            if not (len(d.name) == 2 and d.is_dir()):
                continue
            with contextlib.suppress(FileNotFoundError), os.scandir(d.path) as it:
                for e in it:
                    if e.name.endswith(_SUFFIX):
                        yield e

    def _scan(self) -> list[tuple[float, int, str]]:
        out = []
        for e in self._entries():
            try:
                st = e.stat()
            except FileNotFoundError:
                continue
            out.append((st.st_mtime, st.st_size, e.path))
        return out

    def _scan_total(self) -> int:
        return sum(size for _, size, _ in self._scan())

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.directory / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    # ----- mapping API ------------------------------------------------------------------
    def get(self, key: Any, default: Any = None) -> Any:
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                data = bytearray(size)
                n = f.readinto(data)
        except FileNotFoundError:
            self.misses += 1
            return default
        try:
            if n != size:
                raise CorruptEntry(f"short read ({n} of {size} bytes)")
            value = decode(data, key)
        except CorruptEntry as exc:
            self.corrupt += 1
            self.misses += 1
            log.warning("%s: corrupt cache entry for key %r dropped (%s)", path, key, exc)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return default
        with contextlib.suppress(FileNotFoundError):
            os.utime(path)  # recency for the LRU
        self.hits += 1
        return value

    def __contains__(self, key: object) -> bool:
        return self._path(key).is_file()

    def put(self, key: Any, value: Any) -> bool:
        """Store `value` atomically; False when it is larger than `max_bytes` (not stored)."""
        buffers = encode(key, value, checksum=self.checksum)
        size = sum(len(b) for b in buffers)
        if size > self.max_bytes:
            self.rejected += 1
            return False
        path = self._path(key)
        path.parent.mkdir(exist_ok=True)
        # no per-put sweep (it lists the folder): dead writers' temps go when a cache is opened
        with atomic_open(path, fsync=self.fsync, sweep=False) as f:
            for b in buffers:
                f.write(b)
        self._since += size
        slack = (1.0 - self.low_water) * self.max_bytes / 2  # other processes write too
        if self._total is None or self._total + self._since > self.max_bytes or self._since > slack:
            self._enforce()
        return True

    def _enforce(self) -> None:
        with self._locked():
            self._total, self._since = self._scan_total(), 0
        if self._total > self.max_bytes:
            self.evict()

    __setitem__ = put

    def get_or_load(self, key: Any, loader: Callable[[Any], Any]) -> Any:
        sentinel = object()
        value = self.get(key, sentinel)
        if value is sentinel:
            value = loader(key)
            self.put(key, value)
        return value

    def pop(self, key: Any) -> bool:
        """Delete `key`'s entry; True when there was one."""
        try:
            self._path(key).unlink()
        except FileNotFoundError:
            return False
        return True

    def clear(self) -> None:
        with self._locked():
            for e in list(self._entries()):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(e.path)
        self._total, self._since = 0, 0

    def __len__(self) -> int:
        return sum(1 for _ in self._entries())

    @property
    def nbytes(self) -> int:
        """Summed size of the entry files (scans the directory)."""
        return self._scan_total()

    # ----- eviction and memory ----------------------------------------------------------
    def evict(self, target: int | None = None) -> int:
        """Delete least recently used entries until the total is <= `target` (default
        `low_water * max_bytes`, run automatically when a put goes over `max_bytes`);
        returns the bytes deleted. Serialised across processes by an flock."""
        target = int(self.low_water * self.max_bytes) if target is None else int(target)
        deleted = 0
        with self._locked():
            entries = sorted(self._scan())
            total = sum(size for _, size, _ in entries)
            for _, size, p in entries:
                if total <= target:
                    break
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(p)
                    self.evictions += 1
                    deleted += size
                total -= size
            self._total, self._since = total, 0
        return deleted

    def shrink(self, nbytes: int) -> int | None:
        """Memory-pressure hook (tj-monitor's shrinker signature). The cache holds no process
        memory, only page cache of its files (which counts against a cgroup limit): drop the
        cached pages of the least recently used entries covering ~`nbytes` (entries are kept).
        Returns None: how much the kernel frees is not known here."""
        covered = 0
        for _, size, p in sorted(self._scan()):
            if covered >= nbytes:
                break
            try:
                fd = os.open(p, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            covered += size
        return None

    def stats(self) -> CacheStats:
        entries = self._scan()
        return CacheStats(
            hits=self.hits,
            misses=self.misses,
            evictions=self.evictions,
            rejected=self.rejected,
            corrupt=self.corrupt,
            entries=len(entries),
            nbytes=sum(size for _, size, _ in entries),
            max_bytes=self.max_bytes,
        )

    def __repr__(self) -> str:
        return f"DiskCache({str(self.directory)!r}, max_bytes={self.max_bytes})"
