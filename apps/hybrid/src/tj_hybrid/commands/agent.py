"""An exported agent (a phase's ``agent`` folder) checked against the configured scenario before
anything runs, and the RL setup (demand pool, held-out sets, padded env) built around it: what
``eval`` and ``watch`` share. The agent embeds a fixed number of lane rows per light and scores
a fixed number of green phases; a scenario with more of either cannot be controlled by it (its
lane rows would be dropped, its actions cut), so that is refused in one line, not padded away."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tj_hybrid.config import ConfigError, HybridConfig
from tj_hybrid.data_paths import scenario_data_dir
from tj_hybrid.preflight import check_controllable_lights, check_scenario, check_writable_dir

if TYPE_CHECKING:
    from tj_hybrid.rl_setup import RLSetup
    from tj_models import TrafficAgent

__all__ = ["AgentError", "checked_agent", "prepare_agent_setup"]


class AgentError(ConfigError):
    """``--agent`` is missing, not an exported agent, or cannot control the scenario."""


def _load(path: Path | None, command: str) -> tuple[Path, TrafficAgent]:
    """The agent folder (a phase folder holding ``agent/`` is taken too) and the loaded agent."""
    from tj_models import CheckpointError, TrafficAgent

    if path is None:
        raise AgentError(f"{command} needs --agent PATH: a phase's agent folder, "
                         "e.g. runs/<run>/phase3/agent")  # fmt: skip
    if not path.is_dir():
        raise AgentError(f"--agent {path}: no such directory")
    if (path / "agent").is_dir() and not (path / "config.json").exists():
        path = path / "agent"
    try:
        return path, TrafficAgent.load(path)
    except CheckpointError as exc:
        raise AgentError(f"--agent {path}: not an exported tj-models agent ({exc}); give a "
                         "phase's agent folder, e.g. runs/<run>/phase3/agent") from None  # fmt: skip


def _check_fit(cfg: HybridConfig, agent: TrafficAgent, path: Path) -> None:
    """The scenario's widest light (padded to the scenario itself, so nothing is cut) fits the
    agent's lane rows and green-phase slots."""
    from tj_hybrid.rl_setup import episode_scenario, scenario_widths

    greens, lanes = scenario_widths(cfg)
    scenario = episode_scenario(cfg)
    embeds, slots = agent.gnn.config.num_movements, agent.config.max_actions
    if lanes > embeds or greens > slots:
        raise AgentError(
            f"--agent {path} embeds {embeds} lane rows and scores {slots} green phases per "
            f"light; scenario {scenario.name} has a light with {lanes} lane rows and {greens} "
            "green phases: this agent cannot control it (train one on this scenario)"
        )


def _trained_plans(agent: Path) -> str | None:
    """``scenario.plans`` of the run the agent was exported from (``<run>/<phase>/agent``'s
    ``<run>/config.yaml``; ``own`` where the key is absent); None when there is no such file."""
    import yaml

    config = agent.resolve().parent.parent / "config.yaml"
    try:
        plain = yaml.safe_load(config.read_text())
    except (OSError, yaml.YAMLError):
        return None
    scenario = plain.get("scenario") if isinstance(plain, dict) else None
    return str(scenario.get("plans", "own")) if isinstance(scenario, dict) else None


def _check_plans(cfg: HybridConfig, path: Path) -> None:
    """An agent switches the greens of the plans it was trained on: evaluating it on others
    would score its outputs against phases it never saw."""
    trained = _trained_plans(path)
    if trained is not None and trained != cfg.scenario.plans:
        raise AgentError(f"--agent {path} was trained with scenario.plans={trained} (its run's "
                         f"config.yaml), this command has scenario.plans={cfg.scenario.plans}: "
                         f"add --set scenario.plans={trained}")  # fmt: skip


def checked_agent(cfg: HybridConfig, path: Path | None, command: str) -> Path:
    """The agent folder, loaded, then the scenario's own checks and the agent's fit to it
    (``ConfigError`` with one line otherwise)."""
    folder, agent = _load(path, command)
    _check_plans(cfg, folder)
    check_scenario(cfg)
    check_controllable_lights(cfg)
    check_writable_dir(scenario_data_dir(cfg), "data directory")
    _check_fit(cfg, agent, folder)
    return folder


def prepare_agent_setup(cfg: HybridConfig, agent: Path, temp_dir: Path | None) -> RLSetup:
    """The demand pool and held-out sets of the configured scenario (made once, cached in its
    data folder, where phases 2 and 3 find them) and the env padded to the agent."""
    from tj_hybrid.rl_setup import prepare_rl

    return prepare_rl(cfg, agent_dir=agent, data_dir=scenario_data_dir(cfg), temp_dir=temp_dir)
