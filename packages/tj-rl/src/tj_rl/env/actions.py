"""What an action dict must be: one integer per known agent inside its ``Discrete`` space (the
env refuses anything else before it touches SUMO)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = ["check_actions"]


def check_actions(
    action_dict: Mapping[str, Any], action_spaces: Mapping[str, spaces.Discrete]
) -> dict[str, int]:
    """Each agent's action as an int inside its ``Discrete`` space; ``ValueError`` naming the
    agent for an unknown agent, a non-integer or an action outside the space."""
    out = {}
    for agent, action in action_dict.items():
        space = action_spaces.get(agent)
        if space is None:
            raise ValueError(
                f"action for unknown agent {agent!r}; agents are {list(action_spaces)}"
            )
        if isinstance(action, (int, np.integer)):  # the usual case: no array round trip
            value = int(action)
        else:
            try:
                value = int(np.asarray(action).item())
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"agent {agent!r}: action {action!r} is not an integer of {space}"
                ) from exc
            if value != np.asarray(action).item():
                value = -1  # a fraction: outside the space
        if not 0 <= value < space.n:
            raise ValueError(
                f"agent {agent!r}: action {action!r} outside its action space {space}"
            )
        out[agent] = value
    return out
