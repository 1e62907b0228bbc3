"""How an exported agent acts wherever the app runs it (phase 3's choice and tables, ``eval
--agent``, ``watch``): behind the learned shield when ``phase3.shield_threshold`` is set, and
behind the dilemma-zone guard when ``phase3.guard`` is on, as phase 3 trained it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tj_hybrid.config import HybridConfig

__all__ = ["acting_note", "acting_policy"]


def acting_policy(cfg: HybridConfig, agent: str | Path) -> Any:
    """A tj-rl policy of the agent folder ``agent`` as phase 3's settings make it act."""
    from tj_rl.control import AgentPolicy, GuardedPolicy

    policy = AgentPolicy(agent, shield_threshold=cfg.phase3.shield_threshold)
    guard = cfg.phase3.guard.config()
    return policy if guard is None else GuardedPolicy(policy, guard)


def acting_note(cfg: HybridConfig) -> str:
    """The learned shield and the guard in a line (reports' facts)."""
    shield = cfg.phase3.shield_threshold
    return (f"learned shield {'threshold ' + str(shield) if shield is not None else 'off'}; "
            f"dilemma-zone guard: {cfg.phase3.guard.describe()}")
