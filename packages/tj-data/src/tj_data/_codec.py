"""Checksummed, pickle-free encoding of cache values (numpy arrays, tensors, dicts/lists of them).

Layout: a fixed 32-byte prefix (magic, version, header and payload lengths, crc32 of both), a
JSON header (the cache key, the value's structure, each array's dtype/shape/offset), then the
array bytes, each 64-byte aligned. A truncated or damaged file fails the length or crc check
and is reported as `CorruptEntry`, so a cache never returns half a value. No pickle: a cache
directory can never execute code on read.
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

import numpy as np
import torch

__all__ = ["CorruptEntry", "decode", "encode", "key_json"]

MAGIC = b"TJDC"
VERSION = 1
_PREFIX = struct.Struct("<4sBBxxIQIxxxxxxxx")  # magic, version, flags, header/payload len, crc
_CRC = 1  # flag: the crc32 field is set
_ALIGN = 64


class CorruptEntry(ValueError):
    """A cache file that is truncated, damaged or not a cache entry."""


def key_json(key: Any) -> Any:
    """A JSON form of a cache key (str, int, bytes, bool, None or tuples/lists of them)."""
    if isinstance(key, bool | int | str) or key is None:
        return key
    if isinstance(key, np.integer):
        return int(key)
    if isinstance(key, bytes):
        return {"b": key.hex()}
    if isinstance(key, tuple | list):
        return [key_json(k) for k in key]
    raise TypeError(
        f"cache key {key!r} of type {type(key).__name__}: expected str, int, bytes, None or a "
        "tuple of them"
    )


def encode(key: Any, value: Any, *, checksum: bool = True) -> list[bytes | memoryview]:
    """Buffers whose concatenation is the file content for (key, value); `checksum=False`
    leaves the crc32 out (the lengths still catch truncation)."""
    arrays: list[np.ndarray] = []

    def tree(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            arrays.append(np.ascontiguousarray(v.detach().cpu().numpy()))
            return {"t": "pt", "i": len(arrays) - 1}
        if isinstance(v, np.ndarray | np.generic):
            a = np.asarray(v)
            if a.dtype.kind not in "biufc":
                raise TypeError(f"cannot cache arrays of dtype {a.dtype} (numeric and bool only)")
            arrays.append(np.ascontiguousarray(a))
            return {"t": "nd" if isinstance(v, np.ndarray) else "np", "i": len(arrays) - 1}
        if isinstance(v, bytes | bytearray):
            arrays.append(np.frombuffer(bytes(v), np.uint8))
            return {"t": "by", "i": len(arrays) - 1}
        if isinstance(v, bool | int | float | str) or v is None:
            return {"t": "py", "v": v}
        if isinstance(v, dict):
            if not all(isinstance(k, str) for k in v):
                raise TypeError("cannot cache dicts with non-str keys")
            return {"t": "dict", "k": list(v), "v": [tree(x) for x in v.values()]}
        if isinstance(v, list | tuple):
            return {"t": "list" if isinstance(v, list) else "tuple", "v": [tree(x) for x in v]}
        raise TypeError(
            f"cannot cache a {type(v).__name__}: supported are numpy arrays, tensors, bytes, "
            "numbers, str, None and dicts/lists/tuples of them"
        )

    structure = tree(value)
    metas, offset = [], 0
    for a in arrays:
        metas.append({"dtype": a.dtype.str, "shape": list(a.shape), "offset": offset})
        offset += -(-a.nbytes // _ALIGN) * _ALIGN
    header = json.dumps({"key": key_json(key), "tree": structure, "arrays": metas}).encode()
    header += b" " * (-(len(header) + _PREFIX.size) % _ALIGN)
    body: list[bytes | memoryview] = [header]
    crc = zlib.crc32(header) if checksum else 0
    for a in arrays:
        buf = memoryview(a.reshape(-1).view(np.uint8)) if a.size else memoryview(b"")
        pad = b"\0" * (-(len(buf)) % _ALIGN)
        if checksum:
            crc = zlib.crc32(pad, zlib.crc32(buf, crc))
        body += [buf, pad]
    prefix = _PREFIX.pack(MAGIC, VERSION, _CRC if checksum else 0, len(header), offset, crc)
    return [prefix, *body]


def decode(data: bytearray | bytes, key: Any) -> Any:
    """The value stored in `data` for `key`; CorruptEntry when anything does not check out.
    Arrays are views into `data` (writable when `data` is a bytearray)."""
    if len(data) < _PREFIX.size:
        raise CorruptEntry(f"{len(data)} bytes, shorter than the {_PREFIX.size}-byte prefix")
    magic, version, flags, hlen, plen, crc = _PREFIX.unpack_from(data, 0)
    if magic != MAGIC or version != VERSION:
        raise CorruptEntry(f"bad magic/version {magic!r}/{version}")
    if len(data) != _PREFIX.size + hlen + plen:
        raise CorruptEntry(
            f"{len(data)} bytes, expected {_PREFIX.size + hlen + plen} (truncated or extended)"
        )
    view = memoryview(data)
    if flags & _CRC and zlib.crc32(view[_PREFIX.size :]) != crc:
        raise CorruptEntry("crc32 mismatch (damaged content)")
    try:
        header = json.loads(bytes(view[_PREFIX.size : _PREFIX.size + hlen]))
    except ValueError as exc:
        raise CorruptEntry(f"unreadable header ({exc})") from exc
    if header.get("key") != key_json(key):
        raise CorruptEntry(f"holds key {header.get('key')!r}, not {key_json(key)!r}")
    base = _PREFIX.size + hlen
    arrays = []
    for m in header["arrays"]:
        dt = np.dtype(m["dtype"])
        count = int(np.prod(m["shape"], dtype=np.int64))
        a = np.frombuffer(data, dt, count, base + int(m["offset"]))
        arrays.append(a.reshape(m["shape"]))

    def build(t: dict[str, Any]) -> Any:
        kind = t["t"]
        if kind == "nd":
            return arrays[t["i"]]
        if kind == "np":
            return arrays[t["i"]][()]
        if kind == "pt":
            return torch.from_numpy(np.array(arrays[t["i"]]))
        if kind == "by":
            return arrays[t["i"]].tobytes()
        if kind == "py":
            return t["v"]
        if kind == "dict":
            return {k: build(v) for k, v in zip(t["k"], t["v"], strict=True)}
        if kind == "list":
            return [build(v) for v in t["v"]]
        if kind == "tuple":
            return tuple(build(v) for v in t["v"])
        raise CorruptEntry(f"unknown node {kind!r}")

    return build(header["tree"])
