"""The compiled vehicle reader (``EnvConfig(reader="native")``): the env gives exactly the
observations, rewards and infos of the subscription reader; its build fails with a clear error,
never leaves a partial library under its final name (a build killed half way included), and a
damaged cached build is rebuilt."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tj_rl.env import EnvConfig
from tj_rl.env.native_reader import (
    NativeReaderError,
    NativeVehicleReader,
    ReaderLight,
    build_native_reader,
)

LIGHT = ReaderLight(
    lanes=("a_0", "b_0"), moves=(0, 1), offsets=(5.0, 0.0), centre=(0.0, 0.0),
    origin=(1.0, 1.0), radius=50.0,
)  # fmt: skip


@pytest.mark.parametrize("which", ["default_sc", "grid_sc"])
def test_native_reader_gives_the_subscription_readers_episode(
    which, request, episode_trace, assert_identical
) -> None:
    sc = request.getfixturevalue(which)
    ref, nat = (
        episode_trace(EnvConfig(reader=r, kernel="numpy", metrics=False), sc, seed=5, action_seed=5)
        for r in ("subscription", "native")
    )
    assert len(ref) == len(nat) > 5
    assert_identical(ref, nat)
    assert sum(len(f.ids) for step in ref for f in step[3].values()) > 0  # vehicles were read


def test_config_refuses_native_reader_without_libsumo() -> None:
    with pytest.raises(ValueError, match=r"reader='native'.*traci"):
        EnvConfig(backend="traci", reader="native")
    with pytest.raises(ValueError, match=r"EnvConfig\.reader"):
        EnvConfig(reader="fast")


def test_read_without_a_simulation_is_an_error_naming_libsumos_reason(tmp_path) -> None:
    reader = NativeVehicleReader([LIGHT], cache_dir=tmp_path)
    with pytest.raises(RuntimeError, match="Lane 'a_0' is not known"):
        reader.read()
    reader.close()
    reader.close()  # idempotent


def test_missing_compiler_says_how_to_fix_it(tmp_path) -> None:
    with pytest.raises(NativeReaderError, match=r"apt install g\+\+.*reader='subscription'"):
        build_native_reader(compiler="no-such-c++-compiler", cache_dir=tmp_path)


def test_unwritable_cache_says_which_directory(tmp_path) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache directory should be")
    with pytest.raises(NativeReaderError, match=r"cannot write its build cache .*cache"):
        build_native_reader(cache_dir=blocker / "native")


def test_failed_build_leaves_no_library(tmp_path) -> None:
    with pytest.raises(NativeReaderError, match=r"compiling vehicle_reader\.cpp failed"):
        build_native_reader(compiler="false", cache_dir=tmp_path)  # a "compiler" that fails
    assert list(tmp_path.iterdir()) == []


def test_cached_build_is_reused_and_a_damaged_one_rebuilt(tmp_path) -> None:
    path = build_native_reader(cache_dir=tmp_path)
    stamp = path.stat().st_mtime_ns
    assert build_native_reader(cache_dir=tmp_path) == path
    assert path.stat().st_mtime_ns == stamp  # not compiled again
    path.write_bytes(path.read_bytes()[:100])  # a truncated library under the final name
    reader = NativeVehicleReader([LIGHT], cache_dir=tmp_path)  # loads, fails, rebuilds
    with pytest.raises(RuntimeError, match="not known"):
        reader.read()
    assert path.stat().st_size > 1000


def test_build_killed_half_way_leaves_no_library_and_the_next_build_works(tmp_path) -> None:
    code = (
        "from pathlib import Path; from tj_rl.env.native_reader import build_native_reader; "
        f"build_native_reader(cache_dir=Path({str(tmp_path)!r}))"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".tmp-tj_vehicle_reader-*")):  # the compiler is running
        assert proc.poll() is None and time.monotonic() < deadline, "no build started"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)  # the builder and its compiler
    proc.wait()
    assert list(tmp_path.glob("tj_vehicle_reader-*.so")) == []
    path = build_native_reader(cache_dir=tmp_path)
    assert path.name.startswith("tj_vehicle_reader-") and path.stat().st_size > 1000
    assert isinstance(NativeVehicleReader([LIGHT], cache_dir=tmp_path), NativeVehicleReader)
