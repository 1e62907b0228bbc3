"""The compiled vehicle reader (``EnvConfig(reader="native")``, libsumo backend only).

Why: on libsumo the env's remaining cost against sumo-rl is reading the vehicles. A context
subscription makes SUMO build a result map every step, libsumo's SWIG layer turns it into Python
dicts and ``features.subscription_rows`` parses them back into numbers (~67 us per decision on one
light; README "Benchmark"). ``native/vehicle_reader.cpp`` reads the same vehicles through libsumo's
C++ API and writes the rows straight into a numpy array: the same numbers in the same order.

How: the source is compiled on first use with the machine's C++ compiler (~1.3 s) against the
``_libsumo.so`` that the ``libsumo`` module loads, so the library and the module drive one
simulation (the dynamic loader maps that file once per process), and cached by a key of the
source, the compiler, its flags and that file, like numba's cache. It is a plain C ABI loaded with ctypes: no
Python headers and no Python ABI. Why no build library: the ones that build an extension at run
time (torch's ``cpp_extension``, cppimport) need torch and ninja or pybind11 and setuptools for one
small source; a compiler call with three include and link flags is simpler to read and to debug.

Differences from the subscription reader, by design: vehicles parked on a lane (a stop with
``parking="true"``) are not on the road and are not read; the subscription lists them.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tj_monitor import AtomicPath, remove_stale_temps
from tj_rl.env.features import PAD_ROW, ROW_COLUMNS

__all__ = [
    "NativeReaderError",
    "NativeVehicleReader",
    "ReaderLight",
    "build_native_reader",
    "reader_for",
]

SOURCE = Path(__file__).with_name("native") / "vehicle_reader.cpp"
_NCOL = len(ROW_COLUMNS)


class NativeReaderError(RuntimeError):
    """The compiled vehicle reader could not be built or loaded (the message says how to fix it)."""


@dataclass(frozen=True, kw_only=True)
class ReaderLight:
    """What the reader needs of one light: its lane table in order (lane id, movement, stop-line
    offset), the centre the rows are relative to, and the point and radius of the context
    subscription it replaces (the junction's position in SUMO)."""

    lanes: tuple[str, ...]
    moves: tuple[int, ...]
    offsets: tuple[float, ...]
    centre: tuple[float, float]
    origin: tuple[float, float]
    radius: float

    def __post_init__(self) -> None:
        if not (len(self.lanes) == len(self.moves) == len(self.offsets)):
            raise ValueError("ReaderLight: lanes, moves and offsets must have one entry per lane")
        if not self.radius > 0:
            raise ValueError(f"ReaderLight.radius: {self.radius}, must be > 0")


def _libsumo_file() -> Path:
    try:
        import libsumo
    except ImportError as exc:
        raise NativeReaderError(
            f"reader='native' needs libsumo, which failed to import: {exc}"
        ) from exc
    lib = next(Path(libsumo.__file__).parent.glob("_libsumo*.so"), None)
    if lib is None:
        raise NativeReaderError(f"reader='native': no _libsumo*.so next to {libsumo.__file__}")
    return lib


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tj-rl" / "native"


def build_native_reader(*, compiler: str | None = None, cache_dir: Path | None = None) -> Path:
    """Compile the reader if no cached build matches, and return the library's path (the cache
    key: the source, the compiler, its flags and the ``_libsumo.so`` file).

    ``compiler`` defaults to ``c++`` on PATH; ``cache_dir`` to ``~/.cache/tj-rl/native``. A build
    goes to a temporary file first and is renamed into place, so processes building at once, or a
    build killed half way, never leave a partial library under the final name."""
    if platform.system() != "Linux":
        raise NativeReaderError(
            f"reader='native' is built for Linux (WSL2 included), not {platform.system()}; "
            "use reader='subscription'"
        )
    cxx = compiler or "c++"
    cxx_path = shutil.which(cxx)
    if cxx_path is None:
        raise NativeReaderError(
            f"reader='native' needs a C++ compiler and {cxx!r} was not found. Install one "
            "(Debian, Ubuntu, WSL2: apt install g++) or use reader='subscription'."
        )
    lib = _libsumo_file()
    import sumo

    include = Path(sumo.__file__).parent / "include"
    # no contraction into fused multiply-adds (aarch64 compilers do it by default): the rows
    # must equal the Python reader's bit for bit
    flags = [
        "-O2", "-std=c++17", "-ffp-contract=off", "-shared", "-fPIC", str(SOURCE), f"-I{include}",
        f"-L{lib.parent}", f"-l:{lib.name}", f"-Wl,-rpath,{lib.parent}",
    ]  # fmt: skip
    stat = lib.stat()
    key = hashlib.sha256(
        b"\0".join(
            [
                SOURCE.read_bytes(),
                cxx_path.encode(),
                " ".join(flags).encode(),
                str(lib.resolve()).encode(),
                f"{stat.st_size}:{stat.st_mtime_ns}".encode(),
            ]
        )
    ).hexdigest()[:16]
    root = cache_dir if cache_dir is not None else _cache_root()
    target = root / f"tj_vehicle_reader-{key}.so"
    if target.exists():
        return target
    try:
        root.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(root)  # builds killed half-way (other builds' temps are kept)
        out = AtomicPath(target)  # compiled into a temp, renamed into place once complete
    except OSError as exc:
        raise NativeReaderError(
            f"reader='native': cannot write its build cache {root}: {exc}. Make it writable, or "
            "point XDG_CACHE_HOME at a writable directory."
        ) from exc
    cmd = [cxx_path, *flags, "-o", str(out.tmp)]
    with out:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
        except subprocess.TimeoutExpired as exc:
            raise NativeReaderError(f"reader='native': compiling took over 300 s: {cmd}") from exc
        if proc.returncode != 0:
            raise NativeReaderError(
                f"reader='native': compiling {SOURCE.name} failed (exit {proc.returncode}):\n"
                f"{' '.join(cmd)}\n{proc.stderr[-3000:]}"
            )
    return target


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    lib.tj_reader_new.restype = ctypes.c_void_p
    lib.tj_reader_free.argtypes = [ctypes.c_void_p]
    lib.tj_reader_error.restype = ctypes.c_char_p
    lib.tj_reader_error.argtypes = [ctypes.c_void_p]
    dbl = ctypes.POINTER(ctypes.c_double)
    lib.tj_reader_add_light.argtypes = [
        ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, dbl, dbl,
        ctypes.c_double, ctypes.c_double, ctypes.c_double, ctypes.c_double, ctypes.c_double,
    ]  # fmt: skip
    lib.tj_reader_set_pad.argtypes = [ctypes.c_void_p, dbl]
    lib.tj_reader_read.restype = ctypes.c_int
    lib.tj_reader_read.argtypes = [
        ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(dbl),
        ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_long),
    ]  # fmt: skip
    return lib


def _open(path: Path, cache_dir: Path | None, compiler: str | None) -> ctypes.CDLL:
    try:
        return _load(path)
    except OSError:  # a damaged cached build (disk full, manual edit): build it again once
        path.unlink(missing_ok=True)
        return _load(build_native_reader(compiler=compiler, cache_dir=cache_dir))


class NativeVehicleReader:
    """Reads every light's vehicles per step as ``(data [L, m, 16] float64, counts, ids)``, the
    layout of ``session.LightReads``. Build once per env; reads go to the running libsumo
    simulation, whichever episode it is."""

    def __init__(
        self,
        lights: Sequence[ReaderLight],
        *,
        compiler: str | None = None,
        cache_dir: Path | None = None,
    ) -> None:
        self._lib = _open(build_native_reader(compiler=compiler, cache_dir=cache_dir),
                          cache_dir, compiler)  # fmt: skip
        self._handle = self._lib.tj_reader_new()
        self.n_lights = len(lights)
        for lt in lights:
            moves = (ctypes.c_double * len(lt.moves))(*map(float, lt.moves))
            offsets = (ctypes.c_double * len(lt.offsets))(*lt.offsets)
            lanes = b"".join(x.encode() + b"\0" for x in lt.lanes)
            self._lib.tj_reader_add_light(self._handle, lanes, len(lt.lanes), moves, offsets,
                                          *lt.centre, *lt.origin, lt.radius)  # fmt: skip
        self._lib.tj_reader_set_pad(self._handle, (ctypes.c_double * _NCOL)(*PAD_ROW))
        # the read's out-parameters, made once: the hot path creates no ctypes objects
        self._counts = (ctypes.c_int * max(self.n_lights, 1))()
        self._rows = ctypes.POINTER(ctypes.c_double)()
        self._ids = ctypes.c_void_p()
        self._id_bytes = ctypes.c_long()
        self._args = (
            self._handle, self._counts, ctypes.byref(self._rows), ctypes.byref(self._ids),
            ctypes.byref(self._id_bytes),
        )  # fmt: skip

    def read(self) -> tuple[np.ndarray, list[int], list[list[str]]]:
        """The vehicles of the simulation's current step; raises ``RuntimeError`` with libsumo's
        message when it cannot read (no simulation running, an unknown lane)."""
        width = self._lib.tj_reader_read(*self._args)
        if width < 0:
            why = self._lib.tj_reader_error(self._handle).decode()
            raise RuntimeError(f"native vehicle read: {why}")
        counts = self._counts[: self.n_lights]
        n = self.n_lights * width * _NCOL
        # copies of the reader's buffers (valid until its next read); from bytes: read-only,
        # as LightReads promises
        data = np.frombuffer(ctypes.string_at(self._rows, 8 * n), np.float64)
        names = ctypes.string_at(self._ids, self._id_bytes.value).decode().split("\0")
        out, start = [], 0
        for c in counts:
            out.append(names[start : start + c])
            start += c
        return data.reshape(self.n_lights, width, _NCOL), counts, out

    def close(self) -> None:
        """Free the C++ side (idempotent)."""
        if getattr(self, "_handle", None):
            self._lib.tj_reader_free(self._handle)
            self._handle = None

    def __del__(self) -> None:
        self.close()


def reader_for(lights: Sequence[Any], radius: float) -> NativeVehicleReader:
    """The compiled reader for every light of a net's topology (built, or loaded from its cache,
    here: a missing compiler is an error when the env is built, not in an episode)."""
    return NativeVehicleReader(
        [
            ReaderLight(
                lanes=tuple(lt.lane_table),
                moves=tuple(m for m, _ in lt.lane_table.values()),
                offsets=tuple(o for _, o in lt.lane_table.values()),
                centre=lt.centre,
                origin=lt.junction_pos,
                radius=radius + lt.radius_pad,
            )
            for lt in lights
        ]
    )
