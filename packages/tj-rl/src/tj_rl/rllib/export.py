"""Phase-2 hand-off: a trained graph policy (``TrafficRLModule``'s GNN + controller) written as a
tj-models ``TrafficAgent`` directory (``config.json`` + ``model.safetensors``), loadable and
runnable without Ray (``AgentPolicy``) and complete for phase 3.

The module's ``gnn.*`` weights become the agent's ``world_model.encoder.*`` (``TrafficAgent.gnn``
is the world model's encoder) and ``controller.*`` stay ``controller.*``; the world model and the
shield come from the phase-1 agent the module started from (a directory), or are freshly initialised
(a ``TrafficAgentConfig``). The base must describe the same networks as the module: same GNN
configuration and same action count, else the export is refused (its world model and shield could
not read the module's encoder or actions). The controller's configuration is the module's.

Imports torch and tj-models, never Ray: the module is duck-typed (anything with a ``RiskGNN`` as
``gnn`` and a ``Controller`` as ``controller``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tj_models import Controller, RiskGNN, TrafficAgent, TrafficAgentConfig

__all__ = ["ENCODER_PREFIX", "export_agent", "module_to_agent_state"]

ENCODER_PREFIX = "world_model.encoder."  # where TrafficAgent keeps its GNN's weights


def _parts(module: Any) -> tuple[RiskGNN, Controller]:
    gnn, controller = getattr(module, "gnn", None), getattr(module, "controller", None)
    if not isinstance(gnn, RiskGNN) or not isinstance(controller, Controller):
        raise TypeError(
            "export_agent: expected a module with a tj_models.RiskGNN as `gnn` and a "
            f"tj_models.Controller as `controller` (a TrafficRLModule), got {type(module).__name__}"
        )
    return gnn, controller


def _differences(a: object, b: object, prefix: str) -> list[str]:
    """``field: a != b`` for every (nested) dataclass field where ``a`` and ``b`` differ."""
    if dataclasses.is_dataclass(a) and type(a) is type(b):
        out: list[str] = []
        for f in dataclasses.fields(a):  # type: ignore[arg-type]
            out += _differences(getattr(a, f.name), getattr(b, f.name), f"{prefix}.{f.name}")
        return out
    return [] if a == b else [f"{prefix}: {a!r} != {b!r}"]


def _base_agent(base: str | Path | TrafficAgentConfig) -> tuple[TrafficAgent, str]:
    if isinstance(base, TrafficAgentConfig):
        return TrafficAgent(base), "the base TrafficAgentConfig"
    if isinstance(base, str | Path):
        return TrafficAgent.load(base, map_location="cpu"), f"the base agent {base}"
    raise TypeError(
        "export_agent: base must be a tj-models agent directory or a TrafficAgentConfig, got "
        f"{type(base).__name__}"
    )


def module_to_agent_state(module: Any) -> dict[str, Any]:
    """The module's GNN and controller tensors under the agent's names (``gnn.*`` ->
    ``world_model.encoder.*``, ``controller.*`` unchanged), detached, on the CPU."""
    gnn, controller = _parts(module)
    state = {ENCODER_PREFIX + k: v for k, v in gnn.state_dict().items()}
    state.update({f"controller.{k}": v for k, v in controller.state_dict().items()})
    return {k: v.detach().to("cpu") for k, v in state.items()}


def export_agent(module: Any, base: str | Path | TrafficAgentConfig, out_dir: str | Path) -> Path:
    """Write ``module``'s GNN and controller into a ``TrafficAgent`` saved at ``out_dir``
    (``TrafficAgent.save``: atomic, checksummed); world model and shield from ``base``.

    ``base``: the phase-1 agent directory the module's GNN came from (its world model and shield
    are kept), or a ``TrafficAgentConfig`` (fresh world model and shield). Raises ``ValueError``
    naming every differing field when the base's GNN configuration or action count is not the
    module's, or when ``out_dir`` is the base directory (the phase-1 agent is never overwritten).
    """
    gnn, controller = _parts(module)
    out_dir = Path(out_dir)
    if isinstance(base, str | Path) and out_dir.resolve() == Path(base).resolve():
        raise ValueError(f"export_agent: out_dir {out_dir} is the base agent's directory")
    agent, what = _base_agent(base)
    wrong = _differences(agent.config.gnn, gnn.config, "gnn")
    if agent.config.max_actions != controller.max_actions:
        wrong.append(f"max_actions: {agent.config.max_actions} != {controller.max_actions}")
    if wrong:
        raise ValueError(
            f"export_agent: {what} does not match the module (base != module): "
            + "; ".join(wrong)
            + ". Train from that agent (GraphModuleConfig.agent_dir) with as many actions as it "
            "has (EnvConfig.max_phases), or export with a matching base"
        )
    config = dataclasses.replace(agent.config, controller=controller.config)
    state = {
        k: v
        for k, v in agent.state_dict().items()
        if k.startswith(("world_model.", "shield.")) and not k.startswith(ENCODER_PREFIX)
    }
    state.update(module_to_agent_state(module))
    out = TrafficAgent(config)
    out.load_state_dict(state, strict=True)  # every tensor of the agent, exactly once
    return out.save(out_dir)
