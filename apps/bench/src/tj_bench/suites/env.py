"""Suite ``env``: tj-rl's environment speed and memory, against sumo-rl on the same net, routes,
signal protocol and backend.

Per cell (scenario x backend x SUMO outputs x env) and round: simulated seconds per wall second
of the step loop over a full episode with random feasible actions, closing the simulation
included (tj-rl closes SUMO in its last step, sumo-rl in ``close``); the same per CPU second of
the env's process tree (SUMO's child included for traci); env steps per second; start-up plus
reset; the tree's PSS near the episode's end; on libsumo the CPU inside ``simulationStep``
(SUMO's own work) against the rest. tj-rl runs once per variant: a feature kernel (numpy,
numba), ``+native`` for the compiled vehicle reader (libsumo only), ``numba-free-reads`` for the
ablation with vehicle reads that cost nothing (the ceiling of any faster reader).

Both envs get decisions every ``delta`` s, ``yellow`` s of yellow, min/max green 10/60 s; tj-rl's
all-red is 0 because sumo-rl has none. Round i uses SUMO and action seed ``seed + i`` for every
cell, every episode runs in a fresh process (libsumo: one simulation per process) and the cells
are interleaved within each round. sumo-rl is no dependency: ``--set
env.sumo_rl_python=PATH`` names an interpreter that has it (with psutil and SUMO 1.28).

``env_speed.png``: env steps per second, one panel per backend (rows) and SUMO-output setting
(columns), bars per scenario and env (tj-rl variants, sumo-rl when measured): the median with
the min-max range of the rounds.
"""

from __future__ import annotations

import itertools
import math
import statistics
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from tj_bench.suite import SizedOptions, Suite, SuiteContext, parse_list, sized_help
from tj_bench.suites._env_driver import (
    ScenarioFiles,
    build_scenarios,
    check_sumo_rl,
    run_episode,
)
from tj_bench.suites._env_plan import (
    BACKENDS,
    OUTPUTS,
    SCENARIOS,
    VARIANTS,
    Cell,
    episode_figures,
    paired_figures,
    plan_cells,
    runs_on,
)
from tj_bench.suites._env_worker import tj_env_config

__all__ = ["SUITE", "EnvSettings", "plot_speed", "settings_from"]

OPTIONS: SizedOptions = {  # read by settings_from; run records its own settings
    "variants": ("numpy,numba,numba+native", "numpy", "tj-rl variants, comma-separated: "
                 + ", ".join(VARIANTS) + " (+native: compiled reader, libsumo only; "
                 "numba-free-reads: reads that cost nothing)"),
    "scenarios": (",".join(SCENARIOS), "default",
                  "comma-separated: default (1 light), grid (NxN, light), grid-heavy"),
    "backends": (",".join(BACKENDS), ",".join(BACKENDS), "comma-separated: libsumo, traci"),
    "outputs": ("off,on", "off", "SUMO metric outputs, comma-separated: off (training), on (evaluation)"),
    "seconds": (1800.0, 300.0, "episode length in simulated s"),
    "delta": (10.0, 10.0, "decision interval in s"), "yellow": (3.0, 3.0, "yellow time in s"),
    "all_red": (0.0, 0.0, "tj-rl's all-red in s (0: sumo-rl has none; 2 is tj-rl's default)"),
    "seed": (7, 7, "SUMO and action seed of round 0; round i uses seed + i"),
    "grid": (3, 3, "N of the NxN grid scenarios"), "grid_rate": (1200.0, 1200.0, "demand of the grid scenario in veh/h"),
    "grid_heavy_rate": (4800.0, 4800.0, "demand of the grid-heavy scenario in veh/h"),
    "sumo_rl_python": ("", "", "interpreter of an environment with sumo-rl: adds the sumo-rl cells"),
}  # fmt: skip
LISTS = {"variants": VARIANTS, "scenarios": SCENARIOS, "backends": BACKENDS, "outputs": OUTPUTS}
INSTALL = (
    "install sumo-rl in a scratch environment outside the repo (sumo-rl, psutil and the "
    "eclipse-sumo, libsumo, traci and sumolib 1.28 wheels) and pass its interpreter with "
    "--set env.sumo_rl_python=PATH"
)


@dataclass(frozen=True, kw_only=True)
class EnvSettings:
    """The suite's options, read and checked once."""

    variants: tuple[str, ...]
    scenarios: tuple[str, ...]
    backends: tuple[str, ...]
    outputs: tuple[str, ...]
    seconds: float
    delta: float
    yellow: float
    all_red: float
    seed: int
    grid: int
    grid_rate: float
    grid_heavy_rate: float
    sumo_rl_python: str

    def worker(self, cell: Cell, files: ScenarioFiles, seed: int) -> dict[str, Any]:
        """The settings one worker process gets for ``cell`` in the round of ``seed``."""
        return {"impl": "sumo-rl" if cell.is_sumo_rl else "tj-rl", "variant": cell.impl,
                "backend": cell.backend, "outputs": cell.outputs, "sumocfg": files.sumocfg,
                "net": files.net, "routes": files.routes, "seconds": self.seconds,
                "delta": self.delta, "yellow": self.yellow, "all_red": self.all_red, "seed": seed}  # fmt: skip


def settings_from(ctx: SuiteContext) -> EnvSettings:
    """Options with the old script's defaults; quick: one short episode of the embedded
    scenario, the numpy kernel, SUMO outputs off, libsumo and traci (seconds each)."""
    o = {k: ctx.option(k, quick if ctx.quick else full) for k, (full, quick, _) in OPTIONS.items()}
    lists = {k: parse_list(o[k], allowed, f"env.{k}") for k, allowed in LISTS.items()}
    s = EnvSettings(**o | lists)
    if s.seconds <= 2 * s.delta or s.grid < 1:
        raise ValueError(
            f"env: seconds ({s.seconds}) must exceed two decisions ({2 * s.delta}) "
            f"and grid ({s.grid}) be >= 1"
        )
    for v, b in itertools.product(s.variants, s.backends):  # EnvConfig's own checks first
        if runs_on(v, b):
            tj_env_config({"variant": v, "backend": b, "outputs": "off", "delta": s.delta,
                           "yellow": s.yellow, "all_red": s.all_red})  # fmt: skip
    return s


def _native_ok(ctx: SuiteContext, variants: tuple[str, ...]) -> tuple[str, ...]:
    """Build the native reader once, before any worker (whose start-up it would otherwise be
    in); without a compiler its variants are unavailable and the rest runs."""
    native = [v for v in variants if v.endswith("+native")]
    if not native:
        return variants
    from tj_rl.env import NativeReaderError, build_native_reader

    try:
        build_native_reader()
    except NativeReaderError as exc:
        for v in native:
            ctx.unavailable(v, str(exc))
        return tuple(v for v in variants if v not in native)
    return variants


def _sumo_rl(ctx: SuiteContext, python: str) -> bool:
    if not python:
        ctx.unavailable("sumo-rl", f"not measured: {INSTALL}")
        return False
    version, why = check_sumo_rl(python)
    if version is None:
        ctx.unavailable("sumo-rl", f"{why}; {INSTALL}")
        return False
    ctx.param("sumo_rl_version", version)
    return True


def _record(ctx: SuiteContext, prefix: str, figures: dict[str, Any]) -> None:
    for key, (value, unit, better) in figures.items():
        ctx.record(f"{prefix}/{key}", value, unit=unit, better=better)


def run(ctx: SuiteContext) -> None:
    s = settings_from(ctx)
    variants = _native_ok(ctx, s.variants)
    with_sumo_rl = _sumo_rl(ctx, s.sumo_rl_python)
    rates = {"grid": s.grid_rate, "grid-heavy": s.grid_heavy_rate}
    scen = build_scenarios(s.scenarios, ctx.workdir, seconds=s.seconds, grid=s.grid, rates=rates)
    cells = plan_cells(s.scenarios, s.backends, s.outputs, variants, sumo_rl=with_sumo_rl)
    if not cells:
        raise ValueError("env: no cell to run (every variant unavailable here?)")
    for key, value in {
        "episode_s": s.seconds,
        "delta_s": s.delta,
        "yellow_s": s.yellow,
        "all_red_s": s.all_red,
        "min_max_green_s": "10/60",
        "seeds": f"{s.seed} to {s.seed + ctx.runs - 1}",
        "variants": ",".join(variants),
        "backends": ",".join(s.backends),
        "outputs": ",".join(s.outputs),
        "policy": "random feasible actions",
        **{f"scenario/{k}": f.label for k, f in scen.items()},
    }.items():
        ctx.param(key, value)
    runs: dict[Cell, list[dict[str, Any]]] = {c: [] for c in cells}
    loads = [psutil.getloadavg()[0]]
    for rnd in ctx.repetitions("rounds"):
        for cell in ctx.progress(cells, f"round {rnd + 1}: episodes"):
            python = s.sumo_rl_python if cell.is_sumo_rl else sys.executable
            r = run_episode(python, s.worker(cell, scen[cell.scenario], s.seed + rnd))
            loads.append(psutil.getloadavg()[0])
            runs[cell].append(r)
            _record(ctx, cell.name, episode_figures(r))
        for cell in cells:  # paired by round: same seed on both sides
            if with_sumo_rl and not cell.is_sumo_rl:
                _record(ctx, cell.name, paired_figures(runs[cell][-1], runs[cell.baseline][-1]))
    _summarise(ctx, s, runs, scen, loads, with_sumo_rl)


def _summarise(
    ctx: SuiteContext,
    s: EnvSettings,
    runs: dict[Cell, list[dict[str, Any]]],
    scen: dict[str, ScenarioFiles],
    loads: list[float],
    with_sumo_rl: bool,
) -> None:
    """Rounds tj-rl was faster, notes, and the PNG."""
    if with_sumo_rl:
        for cell, rs in runs.items():
            if not cell.is_sumo_rl:
                base = runs[cell.baseline]
                faster = sum(
                    paired_figures(t, b)["speedup_wall"][0] > 1
                    for t, b in zip(rs, base, strict=True)
                )
                ctx.record(
                    f"{cell.name}/rounds_faster",
                    faster,
                    unit="rounds",
                    note=f"rounds (of {ctx.runs}) in which tj-rl was faster than sumo-rl",
                )
        ctx.note(
            "speedup_wall / speedup_cpu: tj-rl's sim-s per wall (CPU) s over sumo-rl's, "
            "paired by round (same seed and setting); median over the rounds."
        )
    ctx.note(
        f"Load average {min(loads):.1f} to {max(loads):.1f} during the runs. PSS divides "
        "shared pages among the processes that map them: compare cells of one run only."
    )
    steps = {c: [r["steps"] / r["wall_s"] for r in rs] for c, rs in runs.items()}
    path = plot_speed(
        Path(ctx.out_dir) / "env_speed.png",
        steps,
        {k: f.label for k, f in scen.items()},
        f"env steps/s, {s.seconds:g} s episodes, median of {ctx.runs} round(s)"
        + ("" if with_sumo_rl else " (sumo-rl not measured)"),
    )
    ctx.artifact(path)


def plot_speed(
    path: Path, steps_per_s: dict[Cell, list[float]], scenarios: dict[str, str], title: str
) -> Path:
    """Write the bar chart of ``steps_per_s`` (values per round of each cell) to ``path``."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    backends = sorted({c.backend for c in steps_per_s})
    outputs = sorted({c.outputs for c in steps_per_s})
    impls: list[str] = list(dict.fromkeys(c.impl for c in steps_per_s))
    fig = Figure(figsize=(max(6.0, 5.5 * len(outputs)), 0.5 + 3.8 * len(backends)))
    axes = fig.subplots(len(backends), len(outputs), squeeze=False, sharey=True)
    width = 0.8 / len(impls)
    colors = {impl: f"C{k}" for k, impl in enumerate(impls)}  # the same colour in every panel
    medians = [statistics.median(v) for v in steps_per_s.values() if v]
    log = bool(medians) and max(medians) > 10 * min(medians)  # far apart: log in every panel
    for (i, backend), (j, output) in itertools.product(enumerate(backends), enumerate(outputs)):
        ax = axes[i][j]
        for k, impl in enumerate(impls):
            xs, med, lo, hi = [], [], [], []
            for x, name in enumerate(scenarios):
                vals = steps_per_s.get(
                    Cell(scenario=name, backend=backend, outputs=output, impl=impl), []
                )
                if vals:
                    m = statistics.median(vals)
                    xs.append(x + (k - (len(impls) - 1) / 2) * width)
                    med.append(m)
                    lo.append(m - min(vals))
                    hi.append(max(vals) - m)
            if xs:
                ax.bar(xs, med, width, yerr=[lo, hi], capsize=2, color=colors[impl])
        ax.set_xticks(range(len(scenarios)), _wrap(scenarios.values()), fontsize=8)
        if log:  # bars from the decade below the smallest median
            ax.set_yscale("log")
            ax.set_ylim(bottom=10 ** math.floor(math.log10(min(medians) * 0.8)))
        ax.set_title(f"{backend}, SUMO outputs {output}", fontsize=10)
        ax.set_ylabel("env steps/s (higher is better)")
        ax.grid(axis="y", alpha=0.3, which="both")
    handles = [Patch(color=colors[i], label=_label(i)) for i in impls]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(impls), 6), fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    return path


def _label(impl: str) -> str:
    return impl if impl == "sumo-rl" else f"tj-rl {impl}"


def _wrap(labels: Iterable[str]) -> list[str]:
    return [x.replace(", ", "\n", 1) for x in labels]


SUITE = Suite(
    name="env", run=run, options=sized_help(OPTIONS),
    summary="tj-rl env speed (sim-s/s, steps/s) and PSS per kernel and reader, libsumo and "
            "traci, the free-reads ceiling, and sumo-rl on the same scenarios when given",
)  # fmt: skip
