"""Atomic writes: old or new, never half; no temp litter; fsync of file and directory."""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tj_monitor.atomic as atomic
from tj_monitor import (
    AtomicPath,
    atomic_open,
    atomic_write,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    fsync_dir,
    publish_dir,
    remove_stale_temps,
)

DEAD_PID = 9_999_999  # above Linux's largest pid_max (2**22): never a live process


def _temps(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".tmp-"))


_BLOCKED_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from tj_monitor import atomic_open, atomic_write
    target, how = Path(sys.argv[1]), sys.argv[2]

    def block():
        print("writing", flush=True)
        time.sleep(600)  # killed here, mid-write

    if how == "path":
        def write(tmp):
            (tmp.parent / ".tmpLib123").write_bytes(b"a library's own temp file")
            tmp.write_bytes(b"NEW but only half")
            block()
        atomic_write(target, write)
    else:
        with atomic_open(target) as f:
            f.write(b"NEW but only half")
            f.flush()
            block()
    """
)


@pytest.mark.parametrize("how", ["path", "open"])
def test_writer_killed_mid_write_leaves_old_file_and_next_write_removes_litter(
    tmp_path: Path, how: str
) -> None:
    target = tmp_path / "state.bin"
    atomic_write_bytes(target, b"OLD")
    proc = subprocess.Popen(
        [sys.executable, "-c", _BLOCKED_WRITER, str(target), how],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "writing\n"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        assert proc.stdout is not None
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    assert target.read_bytes() == b"OLD"
    (litter,) = _temps(tmp_path)  # clearly named: target name and the dead writer's pid
    assert litter.startswith(f".tmp-state.bin-{proc.pid}-")
    atomic_write_bytes(target, b"NEXT")
    assert target.read_bytes() == b"NEXT"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.bin"]


def _boom(_: object) -> None:
    raise RuntimeError("writer failed")


def test_exception_in_callback_keeps_old_file_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "model.bin"
    atomic_write_bytes(target, b"OLD")

    def half_then_fail(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        (tmp.parent / ".tmpLib").write_bytes(b"library temp")
        raise RuntimeError("writer failed")

    with pytest.raises(RuntimeError, match="writer failed"):
        atomic_write(target, half_then_fail)
    with pytest.raises(RuntimeError, match="writer failed"), atomic_open(target) as f:
        f.write(b"half")
        _boom(f)
    with pytest.raises(KeyboardInterrupt), AtomicPath(target) as tmp:
        tmp.write_bytes(b"half")
        raise KeyboardInterrupt
    assert target.read_bytes() == b"OLD"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.bin"]


def test_a_callback_that_writes_nothing_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="created nothing"):
        atomic_write(tmp_path / "x", lambda tmp: None)
    assert list(tmp_path.iterdir()) == []


def test_library_temp_files_stay_inside_the_private_folder(tmp_path: Path) -> None:
    """np.save appends .npy to a name without it and safetensors writes through its own temp
    beside the path: the temp path keeps the target's name inside a folder of its own."""
    seen: list[Path] = []

    def write(tmp: Path) -> None:
        seen.append(tmp)
        (tmp.parent / ".tmpXYZ").write_bytes(b"left behind by the library")
        tmp.write_bytes(b"payload")

    atomic_write(tmp_path / "weights.safetensors", write)
    assert seen[0].name == "weights.safetensors" and seen[0].parent.parent == tmp_path
    assert seen[0].parent.name.startswith(f".tmp-weights.safetensors-{os.getpid()}-")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["weights.safetensors"]


@pytest.mark.parametrize("writer", ["bytes", "open", "path"])
def test_file_and_directory_are_fsynced_around_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    """Observe the real calls: fsync(temp file) -> rename -> fsync(directory)."""
    events: list[tuple[str, object]] = []
    real_fsync, real_replace = os.fsync, os.replace
    parent_ino = tmp_path.stat().st_ino

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
        events.append((f"fsync-{kind}", st.st_ino == parent_ino if kind == "dir" else None))
        real_fsync(fd)

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        events.append(("replace", Path(dst).name))
        real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "fsync", fsync)
    monkeypatch.setattr(atomic.os, "replace", replace)
    target = tmp_path / "f.json"
    if writer == "bytes":
        atomic_write_bytes(target, b"{}")
    elif writer == "open":
        with atomic_open(target) as f:
            f.write(b"{}")
    else:
        atomic_write(target, lambda tmp: tmp.write_bytes(b"{}"))
    assert events == [("fsync-file", None), ("replace", "f.json"), ("fsync-dir", True)]

    events.clear()
    with atomic_open(tmp_path / "cache.bin", fsync=False) as f:
        f.write(b"x")
    assert events == [("replace", "cache.bin")]  # atomic, not durable: no fsync at all


def test_round_trips(tmp_path: Path) -> None:
    obj = {"b": [1, 2.5, None], "a": {"ü": "x"}}
    atomic_write_json(tmp_path / "o.json", obj)
    text = (tmp_path / "o.json").read_text(encoding="utf-8")
    assert json.loads(text) == obj and list(json.loads(text)) == ["b", "a"]  # order kept
    assert text.endswith("\n")
    atomic_write_text(tmp_path / "t.csv", "a,b\r\nü,2\n")
    assert (tmp_path / "t.csv").read_bytes() == "a,b\r\nü,2\n".encode()  # no newline translation
    payload = bytes(range(256)) * 1000
    atomic_write_bytes(tmp_path / "b.bin", memoryview(payload))
    assert (tmp_path / "b.bin").read_bytes() == payload
    atomic_write_bytes(tmp_path / "b.bin", b"shorter")  # replaces, never appends
    assert (tmp_path / "b.bin").read_bytes() == b"shorter"
    assert _temps(tmp_path) == []


def test_new_files_get_umask_permissions_not_private_temp_ones(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write_bytes(tmp_path / "a", b"x")
        atomic_write(tmp_path / "b", lambda tmp: tmp.write_bytes(b"x"))
    finally:
        os.umask(old)
    for name in ("a", "b"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name


def test_publish_dir_replaces_a_folder_wholly(tmp_path: Path) -> None:
    final = tmp_path / "shard-00000"
    final.mkdir()
    (final / "a.npy").write_bytes(b"old a")
    (final / "b.npy").write_bytes(b"old b")
    new = tmp_path / ".tmp-shard-00000-build"
    (new / "sub").mkdir(parents=True)
    (new / "a.npy").write_bytes(b"new a")
    (new / "sub" / "c").write_bytes(b"c")
    publish_dir(new, final)
    assert sorted(str(p.relative_to(final)) for p in final.rglob("*")) == ["a.npy", "sub", "sub/c"]
    assert (final / "a.npy").read_bytes() == b"new a"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard-00000"]  # old one deleted


def test_atomic_path_publishes_a_folder_and_survives_a_failed_one(tmp_path: Path) -> None:
    final = tmp_path / "shard"
    with AtomicPath(final) as tmp:
        tmp.mkdir()
        (tmp / "x.npy").write_bytes(b"v1")
    assert (final / "x.npy").read_bytes() == b"v1"
    with pytest.raises(RuntimeError), AtomicPath(final) as tmp:
        tmp.mkdir()
        (tmp / "x.npy").write_bytes(b"v2 half")
        raise RuntimeError
    assert (final / "x.npy").read_bytes() == b"v1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard"]


def test_atomic_path_kept_across_calls_publishes_once(tmp_path: Path) -> None:
    out = AtomicPath(tmp_path / "data.h5")
    with open(out.tmp, "wb") as f:  # a file kept open between writes (HDF5 shard by shard)
        f.write(b"shard 0")
        assert not (tmp_path / "data.h5").exists()
        f.write(b"shard 1")
    assert out.publish() == tmp_path / "data.h5"
    assert (tmp_path / "data.h5").read_bytes() == b"shard 0shard 1"
    with pytest.raises(RuntimeError, match="already published"):
        out.publish()
    out.discard()  # harmless once published
    aborted = AtomicPath(tmp_path / "data-1.h5")
    aborted.tmp.write_bytes(b"half")
    aborted.discard()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.h5"]


def test_temps_of_live_writers_are_never_swept(tmp_path: Path) -> None:
    live = tmp_path / f".tmp-t-{os.getpid()}-aaaa1111"  # this process: a write in progress
    dead = tmp_path / f".tmp-t-{DEAD_PID}-bbbb2222"
    other_target = tmp_path / f".tmp-t-2-{DEAD_PID}-cccc3333"  # temp of target "t-2"
    for p in (live, dead, other_target):
        p.write_bytes(b"x")
    with atomic_open(tmp_path / "t", sweep=False) as f:  # a cache's hot path: no listing
        f.write(b"v")
    assert _temps(tmp_path) == sorted([live.name, dead.name, other_target.name])
    atomic_write_bytes(tmp_path / "t", b"v")
    assert _temps(tmp_path) == sorted([live.name, other_target.name])  # only "t"'s dead temp


def test_remove_stale_temps(tmp_path: Path) -> None:
    sub = tmp_path / "ab"
    sub.mkdir()
    keep = tmp_path / f".tmp-x-{os.getpid()}-aaaa1111"
    old_live = sub / f".tmp-y-{os.getpid()}-bbbb2222"
    for p in (
        keep,
        old_live,
        tmp_path / f".tmp-x-{DEAD_PID}-cccc3333",
        tmp_path / ".tmp-ckpt-stale.partial",  # no pid: an older writer's
        sub / f".tmp-z-{DEAD_PID}-dddd4444",
        tmp_path / "regular-file",
    ):
        p.write_bytes(b"x")
    (tmp_path / f".tmp-d-{DEAD_PID}-eeee5555").mkdir()  # a dead writer's private folder
    os.utime(old_live, (0, 0))
    assert remove_stale_temps(tmp_path) == 3  # not recursive
    assert remove_stale_temps(tmp_path, recursive=True, max_age_s=3600) == 2
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == sorted(
        ["ab", keep.name, "regular-file"]
    )
    assert remove_stale_temps(tmp_path / "missing") == 0


def test_fsync_dir_tolerates_filesystems_that_refuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsync_dir(tmp_path)  # the real call on a real directory

    def refuse(code: int):
        def fsync(fd: int) -> None:
            raise OSError(code, os.strerror(code))

        return fsync

    monkeypatch.setattr(atomic.os, "fsync", refuse(errno.EINVAL))  # WSL2 drvfs answers this
    fsync_dir(tmp_path)
    monkeypatch.setattr(atomic.os, "fsync", refuse(errno.EIO))  # a real failure is not hidden
    with pytest.raises(OSError, match="Input/output"):
        fsync_dir(tmp_path)
    with pytest.raises(FileNotFoundError):
        fsync_dir(tmp_path / "missing")
