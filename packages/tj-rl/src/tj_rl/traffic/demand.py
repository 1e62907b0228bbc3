"""Demand pools: route files generated for a scenario's net, for training and held-out evaluation.

A scenario's traffic is a fixed route list and a SUMO seed changes only driver randomness, so a
policy trained and evaluated on one route file has seen its test traffic. Training therefore draws
each episode from a pool of route files (``randomTrips.py`` + ``duarouter`` from the wheel, one per
route seed x rate), cached on disk; evaluation uses ``held_out`` sets: route seeds never trained
on, rates inside the training range, and one set ~30% heavier.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from numbers import Integral
from pathlib import Path

import numpy as np
from sumolib.net.lane import is_vehicle_class

from tj_monitor import AtomicPath
from tj_rl.env.errors import ScenarioError
from tj_rl.env.runtime import SUMO_VERSION, child_env, tool_command
from tj_rl.env.scenario import Scenario
from tj_rl.traffic.routes import is_complete, pick_route, read_departures

__all__ = [
    "DemandPool",
    "DemandSet",
    "DemandSpec",
    "RoutePool",
    "Runner",
    "generate_demand",
    "run_command",
]

# Runs a command line in a working directory and raises on failure (injectable: tests count calls).
Runner = Callable[[Sequence[str], Path], None]
RateLevel = float | Sequence[float]
_FORMAT = 1  # bump when the generation changes in a way the other key fields do not capture


@dataclass(frozen=True, kw_only=True)
class DemandSpec:
    """Random traffic for one net: a rate profile over ``[begin, end)`` and the route seeds to draw.

    Give ``rates`` (vehicles per hour) or ``period`` (randomTrips' seconds between departures),
    not both; several values apply to equal-length intervals (time-varying demand). Each seed
    gives one route file. The defaults are those of the embedded default scenario."""

    rates: tuple[float, ...] = ()
    period: tuple[float, ...] = ()
    begin: float = 0.0
    end: float = 3600.0
    seeds: tuple[int, ...] = (0,)
    fringe_factor: float | str = "max"  # "max": every trip starts and ends at the net's fringe
    min_distance: float = 100.0  # metres between a trip's start and end edges
    vehicle_class: str | None = None  # a SUMO vClass ("passenger", "bus"...); None: SUMO's default
    random_depart: bool = True  # departures at random times, not equidistant
    trip_attributes: str = 'departLane="best" departSpeed="max"'
    prefix: str = ""  # vehicle id prefix
    extra_args: tuple[str, ...] = ()  # more randomTrips.py options (e.g. "--allow-fringe")

    def __post_init__(self) -> None:
        rates = tuple(float(r) for r in self.rates)
        period = tuple(float(p) for p in self.period)
        if bool(rates) == bool(period):
            raise ValueError("DemandSpec: give rates (veh/h) or period (s), exactly one of them")
        if any(not v > 0 for v in rates + period):
            raise ValueError(f"DemandSpec: rates / period must be > 0, got {rates or period}")
        object.__setattr__(self, "rates", rates)
        object.__setattr__(self, "period", period)
        if not float(self.end) > float(self.begin) >= 0:
            raise ValueError(f"DemandSpec: need end > begin >= 0, got {self.begin}, {self.end}")
        seeds = tuple(self.seeds)
        if not seeds or any(
            isinstance(s, bool) or not isinstance(s, Integral) or s < 0 for s in seeds
        ):
            raise ValueError(f"DemandSpec.seeds: {self.seeds!r}, need one or more ints >= 0")
        seeds = tuple(int(s) for s in seeds)
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"DemandSpec.seeds: {seeds} has duplicates")
        object.__setattr__(self, "seeds", seeds)
        if self.fringe_factor != "max" and not (
            isinstance(self.fringe_factor, int | float) and self.fringe_factor > 0
        ):
            raise ValueError(f"DemandSpec.fringe_factor: {self.fringe_factor!r}, 'max' or > 0")
        if self.min_distance < 0:
            raise ValueError(f"DemandSpec.min_distance: {self.min_distance}, must be >= 0")
        if self.vehicle_class is not None and not is_vehicle_class(self.vehicle_class):
            raise ValueError(f"DemandSpec.vehicle_class: {self.vehicle_class!r} is no SUMO vClass")
        object.__setattr__(self, "extra_args", tuple(str(a) for a in self.extra_args))

    @property
    def vehicles_per_hour(self) -> tuple[float, ...]:
        """The rate profile in vehicles per hour (``period`` converted)."""
        return self.rates or tuple(3600.0 / p for p in self.period)

    @property
    def load(self) -> float:
        """Mean rate over the episode, vehicles per hour (what rate ranges compare)."""
        return float(np.mean(self.vehicles_per_hour))

    def replace(self, **changes: object) -> DemandSpec:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def with_rates(self, rates: RateLevel) -> DemandSpec:
        """This spec at another rate level (a veh/h value or profile; ``period`` dropped)."""
        level = (rates,) if isinstance(rates, int | float) else tuple(rates)
        return self.replace(rates=level, period=())

    def scaled(self, factor: float) -> DemandSpec:
        """This spec with ``factor`` times the vehicles (1.3: 30% heavier)."""
        return self.with_rates(tuple(r * factor for r in self.vehicles_per_hour))

    def randomtrips_args(self, net: Path, seed: int, routes: str) -> list[str]:
        """randomTrips.py options that write the routes of ``seed`` to ``routes`` (in the cwd)."""
        args = [
            f"--net-file={net}",
            "--output-trip-file=trips.xml",
            f"--route-file={routes}",
            f"--seed={seed}",
            f"--begin={self.begin:g}",
            f"--end={self.end:g}",
            f"--fringe-factor={self.fringe_factor}",
            f"--min-distance={self.min_distance:g}",
            "--validate",
            "--threads=1",  # one routing thread: the same output for a seed, and 2-core friendly
            f"--trip-attributes={self.trip_attributes}",
        ]
        args += ["--random-depart"] if self.random_depart else []
        args += [f"--vehicle-class={self.vehicle_class}"] if self.vehicle_class else []
        args += [f"--prefix={self.prefix}"] if self.prefix else []
        args += list(self.extra_args)
        if self.rates:
            args += ["--insertion-rate", *(f"{r:g}" for r in self.rates)]
        else:
            args += ["--period", *(f"{p:g}" for p in self.period)]
        return args

    def key(self, net_sha256: str, seed: int) -> dict[str, object]:
        """Everything a generated file depends on (the cache key)."""
        fields = dataclasses.asdict(self)
        fields.pop("seeds")
        return {"format": _FORMAT, "sumo": SUMO_VERSION, "net_sha256": net_sha256, "seed": seed,
                **fields}  # fmt: skip


def run_command(cmd: Sequence[str], cwd: Path) -> None:
    """The default ``Runner``: run with SUMO_HOME pinned to the wheel; stderr in the error."""
    proc = subprocess.run(
        list(cmd), cwd=cwd, env=child_env(), capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise ScenarioError(
            f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stderr.strip()[-4000:]}"
        )


def _generate_one(
    net: Path, spec: DemandSpec, seed: int, target: Path, runner: Runner | None
) -> Path:
    """Write the routes of ``seed`` to ``target`` atomically: randomTrips runs in a private temp
    folder beside it (trips and leftovers stay there) and the checked route file is renamed."""
    target.parent.mkdir(parents=True, exist_ok=True)
    out = AtomicPath(target, fsync=False)  # a cache: atomic, not worth an fsync per file
    try:
        cmd = tool_command("randomTrips.py", *spec.randomtrips_args(net, seed, target.name))
        (runner or run_command)(cmd, out.tmp.parent)
        if not out.tmp.is_file():  # randomTrips ignores duarouter's exit code: check its output
            raise ScenarioError(f"randomTrips.py wrote no route file for {net} (seed {seed})")
        try:
            n = len(read_departures(out.tmp))
        except ValueError as exc:
            raise ScenarioError(f"randomTrips.py for {net} (seed {seed}): {exc}") from exc
        if n == 0:
            raise ScenarioError(
                f"randomTrips.py made no vehicles for {net} (seed {seed}, {spec.load:g} veh/h "
                f"over {spec.end - spec.begin:g} s): raise the rate or check the net's fringe"
            )
        return out.publish()
    finally:
        out.discard()


def _net_path(net: str | Path | Scenario) -> Path:
    path = net.net_file if isinstance(net, Scenario) else Path(net).resolve()
    if not path.is_file():
        raise ScenarioError(f"net file not found: {path}")
    return path


def generate_demand(
    net: str | Path | Scenario,
    spec: DemandSpec,
    out_dir: str | Path,
    *,
    runner: Runner | None = None,
) -> list[Path]:
    """Generate one route file per seed of ``spec`` for ``net`` (or a scenario's net) in
    ``out_dir``: ``routes-s<seed>.rou.xml``, each written atomically. No caching (``DemandPool``)."""
    path, out = _net_path(net), Path(out_dir)
    return [_generate_one(path, spec, s, out / f"routes-s{s}.rou.xml", runner) for s in spec.seeds]


@dataclass(frozen=True, kw_only=True)
class DemandSet:
    """Named route files: randomTrips ones (``files[i]`` from ``specs[i // len(seeds)]`` and a
    seed) or variations of a scenario's own demand (``files[i]`` from ``variations[i]``)."""

    name: str
    files: tuple[Path, ...]
    specs: tuple[DemandSpec, ...] = ()
    variations: tuple = ()  # tj_rl.traffic.variations.Variation, one per file

    def __post_init__(self) -> None:
        if bool(self.specs) == bool(self.variations):
            raise ValueError(f"DemandSet {self.name}: give specs or variations, exactly one")

    @property
    def seeds(self) -> tuple[int, ...]:
        if self.variations:
            return tuple(dict.fromkeys(v.seed for v in self.variations if not v.own))
        return self.specs[0].seeds

    @property
    def loads(self) -> tuple[float, ...]:
        """Mean rates of randomTrips sets, veh/h (empty for variations: see ``describe``)."""
        return tuple(s.load for s in self.specs)

    def describe(self) -> str:
        """What the traffic is, in words (for a table's legend)."""
        if self.variations:
            return "; ".join(v.describe() for v in self.variations)
        loads = ", ".join(f"{x:.0f}" for x in self.loads)
        return f"randomTrips, route seeds {list(self.seeds)} at {loads} veh/h"


class RoutePool:
    """What every pool of training route files offers: its ``files`` (built on first use) and,
    per episode, the file it runs (reproducibly)."""

    _files: tuple[Path, ...] | None = None

    def build(self) -> tuple[Path, ...]:
        raise NotImplementedError

    @property
    def files(self) -> tuple[Path, ...]:
        return self._files if self._files is not None else self.build()

    def route_for(self, episode: int, seed: int = 0) -> Path:
        """The route file of training ``episode`` for a stream ``seed``: ``pick_route``."""
        return pick_route(self.files, episode, seed)

    def scenario_for(self, scenario: Scenario, episode: int, seed: int = 0) -> Scenario:
        """``scenario`` with the traffic of ``route_for(episode, seed)``."""
        return scenario.with_routes(self.route_for(episode, seed))


class DemandPool(RoutePool):
    """Route files for training: every route seed of ``base`` at every rate level, cached.

    Files live in ``directory/net-<sha256 of the net>/`` and are named by seed, mean rate, time
    window and a digest of everything else that shapes them (spec, SUMO version), so a changed
    net or option never reuses a stale file. A cached file is reused when it parses as a complete
    route file, else regenerated. Build it once (``build()``) before starting env processes."""

    def __init__(
        self,
        net: str | Path | Scenario,
        directory: str | Path,
        *,
        base: DemandSpec,
        rates: Iterable[RateLevel] | None = None,
        runner: Runner | None = None,
    ) -> None:
        self.net = _net_path(net)
        self.directory = Path(directory)
        self.specs = tuple(base.with_rates(r) for r in rates) if rates is not None else (base,)
        if not self.specs:
            raise ValueError("DemandPool: rates is empty")
        if len({s.vehicles_per_hour for s in self.specs}) != len(self.specs):
            raise ValueError(f"DemandPool: duplicate rate levels {[s.rates for s in self.specs]}")
        self.runner = runner
        self._sha: str | None = None
        self._files: tuple[Path, ...] | None = None

    @classmethod
    def for_scenario(
        cls,
        scenario: Scenario,
        directory: str | Path,
        *,
        seeds: Sequence[int],
        rates: Iterable[RateLevel],
        runner: Runner | None = None,
        **spec_fields: object,
    ) -> DemandPool:
        """A pool for ``scenario``'s net over its time window (``spec_fields``: more DemandSpec)."""
        base = DemandSpec(
            rates=(1.0,),  # a placeholder: every level replaces it
            begin=scenario.begin,
            end=scenario.end,
            seeds=tuple(seeds),
            **spec_fields,  # type: ignore[arg-type]
        )
        return cls(scenario, directory, base=base, rates=rates, runner=runner)

    @property
    def seeds(self) -> tuple[int, ...]:
        """The training route seeds."""
        return self.specs[0].seeds

    @property
    def load_range(self) -> tuple[float, float]:
        """Lowest and highest mean rate of the training levels, veh/h."""
        loads = [s.load for s in self.specs]
        return min(loads), max(loads)

    @property
    def net_sha256(self) -> str:
        if self._sha is None:
            with open(self.net, "rb") as f:
                self._sha = hashlib.file_digest(f, "sha256").hexdigest()
        return self._sha

    def path_for(self, spec: DemandSpec, seed: int) -> Path:
        """Where the route file of (spec, seed) is cached."""
        key = json.dumps(spec.key(self.net_sha256, seed), sort_keys=True).encode()
        digest = hashlib.sha256(key).hexdigest()[:12]
        name = f"s{seed}-{spec.load:.0f}vph-{spec.begin:g}-{spec.end:g}s-{digest}.rou.xml"
        return self.directory / f"net-{self.net_sha256[:16]}" / name

    def _ensure(self, spec: DemandSpec, seed: int) -> Path:
        path = self.path_for(spec, seed)
        return path if is_complete(path) else _generate_one(self.net, spec, seed, path, self.runner)

    def _build(self, specs: Sequence[DemandSpec]) -> tuple[Path, ...]:
        return tuple(self._ensure(spec, seed) for spec in specs for seed in spec.seeds)

    def build(self) -> tuple[Path, ...]:
        """Generate the missing (or damaged) files; all files, rate level major, seed minor."""
        self._files = self._build(self.specs)
        return self._files

    def held_out(
        self,
        seeds: Sequence[int],
        *,
        rates: Iterable[RateLevel] | None = None,
        heavy_factor: float = 1.3,
    ) -> tuple[DemandSet, DemandSet]:
        """Evaluation traffic never trained on: ``(held_out, held_out_heavy)``.

        Route ``seeds`` must be disjoint from the training seeds; ``rates`` must lie inside the
        training range (by mean rate; default: the midpoints between adjacent training levels, or
        the single level). The heavy set is the same seeds and levels times ``heavy_factor``."""
        base = self.specs[0].replace(seeds=tuple(seeds))
        clash = sorted(set(base.seeds) & set(self.seeds))
        if clash:
            raise ValueError(f"held_out: route seed(s) {clash} are training seeds {self.seeds}")
        if not heavy_factor > 1:
            raise ValueError(f"held_out: heavy_factor={heavy_factor}, must be > 1")
        if rates is None:
            specs = self._midpoints(base)
        else:
            specs = tuple(base.with_rates(r) for r in rates)
            if not specs:
                raise ValueError("held_out: rates is empty")
        lo, hi = self.load_range
        outside = [s.load for s in specs if not lo - 1e-9 <= s.load <= hi + 1e-9]
        if outside:
            raise ValueError(
                f"held_out: rates with mean {outside} veh/h are outside the training range "
                f"[{lo:g}, {hi:g}] veh/h"
            )
        heavy = tuple(s.scaled(heavy_factor) for s in specs)
        return (
            DemandSet(name="held-out", specs=specs, files=self._build(specs)),
            DemandSet(name="held-out-heavy", specs=heavy, files=self._build(heavy)),
        )

    def validation(self, seeds: Sequence[int]) -> DemandSet:
        """Traffic to choose by (a teacher, a checkpoint): route ``seeds`` never trained on at
        the held-out set's levels (the midpoints between training levels)."""
        base = self.specs[0].replace(seeds=tuple(int(s) for s in seeds))
        clash = sorted(set(base.seeds) & set(self.seeds))
        if clash or not base.seeds:
            raise ValueError(f"validation: route seeds {list(seeds)}: need one or more, none of "
                             f"the training seeds {self.seeds}")  # fmt: skip
        specs = self._midpoints(base)
        return DemandSet(name="validation", specs=specs, files=self._build(specs))

    def _midpoints(self, base: DemandSpec) -> tuple[DemandSpec, ...]:
        levels = sorted((s.vehicles_per_hour for s in self.specs), key=lambda v: float(np.mean(v)))
        if len(levels) == 1:
            return (base.with_rates(levels[0]),)
        if len({len(v) for v in levels}) != 1:
            raise ValueError("held_out: training profiles differ in length; pass rates=...")
        return tuple(
            base.with_rates(tuple((x + y) / 2 for x, y in zip(a, b, strict=True)))
            for a, b in itertools.pairwise(levels)
        )
