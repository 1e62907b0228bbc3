"""Synthetic scenarios from the wheel's ``netgenerate`` and ``tools/randomTrips.py``.

A single signalised intersection or an NxM grid of them, with seeded demand that may vary over time
(several insertion rates, applied to equal-length intervals of the episode). The embedded default
scenario under ``configs/scenarios/default/`` is ``DEFAULT_SPEC`` built by::

    uv run python -m tj_rl.env.builder --out configs/scenarios/default
"""

from __future__ import annotations

import argparse
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tj_monitor import atomic_write_text
from tj_rl.env.errors import ScenarioError
from tj_rl.env.runtime import child_env, sumo_binary, tool_command
from tj_rl.env.scenario import Scenario

__all__ = ["DEFAULT_SPEC", "SyntheticSpec", "build_scenario", "default_scenario", "main"]

_DEFAULT_RELATIVE = Path("configs/scenarios/default/default.sumocfg")


@dataclass(frozen=True, kw_only=True)
class SyntheticSpec:
    """What to generate. ``kind="single"`` ignores rows/cols; ``rates`` are vehicles per hour."""

    kind: Literal["single", "grid"] = "single"
    rows: int = 2
    cols: int = 2
    lanes: int = 2
    turn_lanes: int = 1
    edge_length: float = 200.0
    attach_length: float = 150.0
    turn_lane_length: float = 50.0
    duration: float = 1800.0
    rates: tuple[float, ...] = (600.0,)
    seed: int = 0
    name: str = "synthetic"

    def __post_init__(self) -> None:
        if self.kind not in ("single", "grid"):
            raise ValueError(f"SyntheticSpec.kind: {self.kind!r}, expected 'single' or 'grid'")
        for fname in ("rows", "cols", "lanes"):
            if int(getattr(self, fname)) < 1:
                raise ValueError(f"SyntheticSpec.{fname}: {getattr(self, fname)}, must be >= 1")
        if self.turn_lanes < 0:
            raise ValueError(f"SyntheticSpec.turn_lanes: {self.turn_lanes}, must be >= 0")
        for fname in ("edge_length", "attach_length", "turn_lane_length", "duration"):
            if float(getattr(self, fname)) <= 0:
                raise ValueError(f"SyntheticSpec.{fname}: {getattr(self, fname)}, must be > 0")
        if self.turn_lanes and self.turn_lane_length >= min(self.edge_length, self.attach_length):
            raise ValueError(
                f"SyntheticSpec.turn_lane_length: {self.turn_lane_length} must be shorter than the "
                f"edges ({min(self.edge_length, self.attach_length)} m)"
            )
        rates = tuple(float(r) for r in self.rates)
        if not rates or any(r <= 0 for r in rates):
            raise ValueError(
                f"SyntheticSpec.rates: {self.rates!r}, need one or more rates > 0 veh/h"
            )
        object.__setattr__(self, "rates", rates)
        if not self.name or any(c in self.name for c in "/\\ "):
            raise ValueError(f"SyntheticSpec.name: {self.name!r} must be a plain file stem")


DEFAULT_SPEC = SyntheticSpec(
    kind="single",
    lanes=2,
    turn_lanes=1,
    attach_length=150.0,
    duration=1800.0,
    rates=(500.0, 1000.0, 700.0),
    seed=42,
    name="default",
)


def _run(cmd: Sequence[str], what: str, cwd: Path) -> None:
    proc = subprocess.run(
        list(cmd), cwd=cwd, env=child_env(), capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise ScenarioError(
            f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{proc.stderr.strip()}"
        )


def _netgenerate_args(spec: SyntheticSpec, net: Path) -> list[str]:
    n_x, n_y = (1, 1) if spec.kind == "single" else (spec.cols, spec.rows)
    args = [
        sumo_binary("netgenerate"),
        "--grid",
        f"--grid.x-number={n_x}",
        f"--grid.y-number={n_y}",
        f"--grid.length={spec.edge_length:g}",
        f"--grid.attach-length={spec.attach_length:g}",
        f"--default.lanenumber={spec.lanes}",
        "--default-junction-type=traffic_light",
        "--tls.default-type=static",
        "--no-turnarounds",
        f"--seed={spec.seed}",
        "--no-warnings",
        f"--output-file={net.name}",
    ]
    if spec.turn_lanes:
        args += [
            f"--turn-lanes={spec.turn_lanes}",
            f"--turn-lanes.length={spec.turn_lane_length:g}",
        ]
    return args


def _write_sumocfg(path: Path, net: Path, routes: Path, spec: SyntheticSpec) -> None:
    text = (
        "<?xml version='1.0' encoding='UTF-8'?>\n"
        "<configuration>\n"
        "    <input>\n"
        f'        <net-file value="{net.name}"/>\n'
        f'        <route-files value="{routes.name}"/>\n'
        "    </input>\n"
        "    <time>\n"
        '        <begin value="0"/>\n'
        f'        <end value="{spec.duration:g}"/>\n'
        '        <step-length value="1"/>\n'
        "    </time>\n"
        "    <random_number>\n"
        f'        <seed value="{spec.seed}"/>\n'
        "    </random_number>\n"
        "</configuration>\n"
    )
    atomic_write_text(path, text)


def build_scenario(spec: SyntheticSpec, out_dir: str | Path) -> Scenario:
    """Generate ``<name>.net.xml``, ``<name>.rou.xml`` and ``<name>.sumocfg`` in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    net = out / f"{spec.name}.net.xml"
    trips = out / f"{spec.name}.trips.xml"
    routes = out / f"{spec.name}.rou.xml"
    cfg = out / f"{spec.name}.sumocfg"
    _run(_netgenerate_args(spec, net), "netgenerate", out)
    trip_args = [
        f"--net-file={net.name}",
        f"--output-trip-file={trips.name}",
        f"--route-file={routes.name}",
        f"--seed={spec.seed}",
        "--begin=0",
        f"--end={spec.duration:g}",
        "--fringe-factor=max",
        "--random-depart",
        "--validate",
        "--min-distance=100",
        '--trip-attributes=departLane="best" departSpeed="max"',
        "--insertion-rate",
        *(f"{r:g}" for r in spec.rates),
    ]
    _run(tool_command("randomTrips.py", *trip_args), "randomTrips.py", out)
    for leftover in (trips, out / f"{spec.name}.rou.alt.xml"):
        leftover.unlink(missing_ok=True)
    _write_sumocfg(cfg, net, routes, spec)
    return Scenario.from_sumocfg(cfg)


def default_scenario(path: str | Path | None = None) -> Scenario:
    """The embedded default scenario (``configs/scenarios/default``), found from the working
    directory or this package's location upwards; or the ``.sumocfg`` at ``path``."""
    if path is not None:
        return Scenario.from_sumocfg(path)
    starts = [Path.cwd(), Path(__file__).resolve().parent]
    for start in starts:
        for base in (start, *start.parents):
            candidate = base / _DEFAULT_RELATIVE
            if candidate.is_file():
                return Scenario.from_sumocfg(candidate)
    raise ScenarioError(
        f"embedded default scenario {_DEFAULT_RELATIVE} not found above {Path.cwd()}; regenerate it "
        "with `python -m tj_rl.env.builder --out configs/scenarios/default` or pass its path"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: build the default scenario (no options) or a custom single/grid scenario."""
    ap = argparse.ArgumentParser(prog="python -m tj_rl.env.builder", description=main.__doc__)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--kind", choices=("single", "grid"), default=DEFAULT_SPEC.kind)
    ap.add_argument("--rows", type=int, default=DEFAULT_SPEC.rows)
    ap.add_argument("--cols", type=int, default=DEFAULT_SPEC.cols)
    ap.add_argument("--lanes", type=int, default=DEFAULT_SPEC.lanes)
    ap.add_argument("--turn-lanes", type=int, default=DEFAULT_SPEC.turn_lanes)
    ap.add_argument("--duration", type=float, default=DEFAULT_SPEC.duration)
    ap.add_argument("--rates", type=float, nargs="+", default=list(DEFAULT_SPEC.rates))
    ap.add_argument("--seed", type=int, default=DEFAULT_SPEC.seed)
    ap.add_argument("--name", default=DEFAULT_SPEC.name)
    a = ap.parse_args(argv)
    spec = SyntheticSpec(
        kind=a.kind,
        rows=a.rows,
        cols=a.cols,
        lanes=a.lanes,
        turn_lanes=a.turn_lanes,
        duration=a.duration,
        rates=tuple(a.rates),
        seed=a.seed,
        name=a.name,
    )
    scenario = build_scenario(spec, a.out)
    print(f"wrote {scenario.sumocfg}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
