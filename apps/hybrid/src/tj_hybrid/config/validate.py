"""Validate a merged config dict into the packages' typed ``@dataclass(kw_only=True)`` configs.

The packages own their configs (typed dataclasses checked in ``__post_init__``); the app does not
copy them into a second schema. This walks a dataclass type, rejects unknown keys with the full
dotted path and the allowed names, coerces leaves with pydantic (``TypeAdapter`` per field type),
and re-raises a ``__post_init__`` error with the dotted path of the section it came from.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from functools import cache
from pathlib import PurePath
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from tj_hybrid.config.layering import ConfigError

__all__ = ["to_plain", "validate_dataclass"]

T = TypeVar("T")


@cache
def _adapter(tp: Any) -> TypeAdapter[Any]:
    return TypeAdapter(tp)


def _dataclass_type(tp: Any) -> type | None:
    """The dataclass inside ``tp`` (``X`` or ``X | None``), else None."""
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return tp
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if len(args) == 1 and dataclasses.is_dataclass(args[0]):
        return args[0]
    return None


def validate_dataclass(cls: type[T], data: Mapping[str, Any] | None, path: str = "") -> T:
    """Build ``cls`` from ``data``; every error names its dotted path."""
    where = path or "<root>"
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__} {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        dotted = ", ".join(f"{path + '.' if path else ''}{k}" for k in unknown)
        raise ConfigError(f"unknown config key {dotted}; allowed at {where}: {', '.join(fields)}")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        sub = f"{path}.{name}" if path else name
        tp = hints[name]
        inner = _dataclass_type(tp)
        if inner is not None and (value is not None or type(None) not in typing.get_args(tp)):
            kwargs[name] = validate_dataclass(inner, value, sub)
            continue
        try:
            kwargs[name] = _adapter(tp).validate_python(value)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join([sub, *(str(p) for p in err["loc"])])
            raise ConfigError(f"{where}: {err['msg']} (got {err.get('input', value)!r})") from None
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def to_plain(obj: Any) -> Any:
    """A dataclass tree as plain YAML-able data (tuples become lists)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, PurePath):
        return str(obj)
    return obj
