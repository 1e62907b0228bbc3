"""SUMO runtime: binaries and tools from the pinned ``eclipse-sumo`` wheel, never a system SUMO.

``import sumo`` gives the wheel's ``SUMO_HOME`` (``bin/`` and ``tools/`` inside). Child processes get
``SUMO_HOME`` set explicitly from it, so neither a preset variable nor an apt-installed SUMO is used.
"""

from __future__ import annotations

import os
import sys
from importlib import metadata
from pathlib import Path

import sumo
import sumolib

__all__ = [
    "SUMO_VERSION",
    "child_env",
    "sumo_binary",
    "sumo_home",
    "sumo_tool",
    "tool_command",
]

SUMO_VERSION: str = metadata.version("eclipse-sumo")


def sumo_home() -> Path:
    """The wheel's SUMO_HOME (``bin/``, ``tools/``, ``data/``)."""
    return Path(sumo.SUMO_HOME)


def sumo_binary(name: str = "sumo") -> str:
    """Absolute path of a SUMO executable (``sumo``, ``netgenerate``, ``duarouter``...) from the wheel."""
    path = sumolib.checkBinary(name, bindir=str(sumo_home() / "bin"))
    if not os.path.isabs(path) or not os.path.exists(path):
        raise FileNotFoundError(
            f"SUMO binary {name!r} not found in the eclipse-sumo wheel ({path})"
        )
    return path


def sumo_tool(relative: str) -> Path:
    """Path of a script under the wheel's ``tools/`` (e.g. ``randomTrips.py``)."""
    path = sumo_home() / "tools" / relative
    if not path.is_file():
        raise FileNotFoundError(f"SUMO tool {relative!r} not found at {path}")
    return path


def tool_command(relative: str, *args: str) -> list[str]:
    """Command line running a SUMO python tool with this interpreter."""
    return [sys.executable, str(sumo_tool(relative)), *args]


def child_env() -> dict[str, str]:
    """Environment for SUMO child processes: ``SUMO_HOME`` pinned to the wheel."""
    env = dict(os.environ)
    env["SUMO_HOME"] = str(sumo_home())
    return env
