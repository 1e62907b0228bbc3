"""Exceptions of tj-rl: each names the file, id or field at fault."""

from __future__ import annotations

__all__ = ["LibsumoBusyError", "ScenarioError", "SumoDiedError", "SumoStartError"]


class ScenarioError(ValueError):
    """A scenario is invalid: missing or malformed file, unknown light id, light without green."""


class SumoStartError(RuntimeError):
    """SUMO refused to start a scenario; the message includes SUMO's own error output."""


class SumoDiedError(RuntimeError):
    """The running simulation died (process killed, connection lost, libsumo error)."""


class LibsumoBusyError(RuntimeError):
    """A second libsumo simulation was requested in a process that already runs one."""
