"""The env suite's plan, pure: which cells run (scenario x backend x SUMO outputs x env), their
figure names, and the figures one episode and one paired round give.

A cell is one env on one setting; every cell runs once per round, and round i uses seed
``seed + i`` on every cell, so tj-rl and sumo-rl are compared on the same traffic realisation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal

from tj_bench.suites._env_worker import FREE_READS

__all__ = [
    "BACKENDS",
    "OUTPUTS",
    "SCENARIOS",
    "SUMO_RL",
    "VARIANTS",
    "Cell",
    "episode_figures",
    "paired_figures",
    "plan_cells",
    "runs_on",
]

VARIANTS = ("numpy", "numba", "numpy+native", "numba+native", FREE_READS)
SCENARIOS = ("default", "grid", "grid-heavy")
BACKENDS = ("libsumo", "traci")
OUTPUTS = ("off", "on")
SUMO_RL = "sumo-rl"

Better = Literal["lower", "higher"] | None
FigureValue = tuple[float, str, Better]  # value, unit, better


def runs_on(impl: str, backend: str) -> bool:
    """The native reader reads the in-process simulation: libsumo only."""
    return backend == "libsumo" or not impl.endswith("+native")


@dataclass(frozen=True, kw_only=True)
class Cell:
    """One env (a tj-rl variant or sumo-rl) on one scenario, backend and output setting."""

    scenario: str
    backend: str
    outputs: str
    impl: str

    @property
    def name(self) -> str:
        """The figure prefix, e.g. ``default/libsumo/outputs-off/numba+native``."""
        return f"{self.scenario}/{self.backend}/outputs-{self.outputs}/{self.impl}"

    @property
    def is_sumo_rl(self) -> bool:
        return self.impl == SUMO_RL

    @property
    def baseline(self) -> Cell:
        """The sumo-rl cell on the same setting."""
        return replace(self, impl=SUMO_RL)


def plan_cells(
    scenarios: Iterable[str],
    backends: Iterable[str],
    outputs: Iterable[str],
    variants: Iterable[str],
    *,
    sumo_rl: bool,
) -> list[Cell]:
    """Every cell of one round, in run order (sumo-rl after the tj-rl variants of a setting)."""
    impls = [*variants, *([SUMO_RL] if sumo_rl else [])]
    return [
        Cell(scenario=s, backend=b, outputs=o, impl=i)
        for s in scenarios
        for b in backends
        for o in outputs
        for i in impls
        if runs_on(i, b)
    ]


def episode_figures(r: dict[str, Any]) -> dict[str, FigureValue]:
    """What one episode gives (the worker's result plus the driver's ``pss_mib``): speed by wall
    and CPU time, env steps per second, start-up, PSS, and on libsumo the CPU split between
    SUMO's ``simulationStep`` and the rest of the process."""
    out: dict[str, FigureValue] = {
        "sim_s_per_s": (r["sim_s"] / r["wall_s"], "sim-s/s", "higher"),
        "sim_s_per_cpu_s": (r["sim_s"] / r["cpu_s"], "sim-s/cpu-s", "higher"),
        "steps_per_s": (r["steps"] / r["wall_s"], "steps/s", "higher"),
        "startup_s": (r["startup_s"], "s", "lower"),
        "pss_mib": (r["pss_mib"], "MiB", "lower"),
    }
    if r.get("sumo_cpu_s") is not None:
        out["cpu_s"] = (r["cpu_s"], "s", "lower")
        out["sumo_cpu_s"] = (r["sumo_cpu_s"], "s", "lower")
        out["rest_cpu_s"] = (r["cpu_s"] - r["sumo_cpu_s"], "s", "lower")
    return out


def paired_figures(tj: dict[str, Any], base: dict[str, Any]) -> dict[str, FigureValue]:
    """tj-rl against sumo-rl in one round (same seed, same setting): speed-up by wall and CPU."""
    wall = (tj["sim_s"] / tj["wall_s"]) / (base["sim_s"] / base["wall_s"])
    cpu = (tj["sim_s"] / tj["cpu_s"]) / (base["sim_s"] / base["cpu_s"])
    return {"speedup_wall": (wall, "x", "higher"), "speedup_cpu": (cpu, "x", "higher")}
