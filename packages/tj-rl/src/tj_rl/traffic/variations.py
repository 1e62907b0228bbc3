"""Variations of a scenario's own demand: training and held-out traffic that look like the city's.

A calibrated scenario's route files are the traffic a policy will meet. A policy trained on
uniform randomTrips learns a demand it never meets; trained on the one real route file it has
seen its test traffic. So the pool is made of variations of the real demand, each one route file
made with SUMO's own router and one seeded Python pass:

1. ``duarouter`` reads every route file of the scenario (trips, routes, flows, route and type
   distributions, persons, ``.gz``) and writes one file of routed vehicles and persons, with
   ``--scale`` (seeded: vehicles dropped or duplicated) and ``--randomize-flows`` (seeded
   departure times inside each flow's interval);
2. every departure is shifted uniformly within ``+-jitter`` seconds (seeded), the file is sorted
   by departure, vehicle types that the scenario's additional files already define are dropped
   (duarouter copies them; SUMO refuses a type defined twice), and vehicles whose type is a
   distribution become trips (SUMO draws their type on loading and routes them for it).

``Variation(seed=0, scale=1, jitter=0, randomize_flows=False)`` is the scenario's own demand
unmodified (flows expanded as SUMO expands them). Files are cached like ``DemandPool``'s.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral
from pathlib import Path

import numpy as np

from tj_monitor import AtomicPath
from tj_rl.env.errors import ScenarioError
from tj_rl.env.runtime import SUMO_VERSION, sumo_binary
from tj_rl.env.scenario import Scenario, open_xml
from tj_rl.traffic.demand import DemandSet, RoutePool, Runner, run_command
from tj_rl.traffic.routes import is_complete

__all__ = ["ORIGINAL", "Variation", "VariationPool", "write_variation"]

_FORMAT = 1  # bump when the generation changes in a way the key fields do not capture
_TYPE_TAGS = frozenset({"vType", "vTypeDistribution"})
_TIMED = {"vehicle": "depart", "trip": "depart", "person": "depart", "container": "depart",
          "flow": "begin", "personFlow": "begin", "containerFlow": "begin"}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Variation:
    """One variation of a scenario's own demand (see the module docstring)."""

    seed: int
    scale: float = 1.0  # duarouter --scale: 1.2 = 20% more vehicles and persons
    jitter: float = 0.0  # seconds: each departure moves uniformly within +-jitter
    randomize_flows: bool = True  # flows' departures drawn at random inside their interval

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, Integral) or self.seed < 0:
            raise ValueError(f"Variation.seed: {self.seed!r}, need an int >= 0")
        if not float(self.scale) > 0:
            raise ValueError(f"Variation.scale: {self.scale!r}, must be > 0")
        if not float(self.jitter) >= 0:
            raise ValueError(f"Variation.jitter: {self.jitter!r}, must be >= 0")
        object.__setattr__(self, "scale", float(self.scale))
        object.__setattr__(self, "jitter", float(self.jitter))

    @property
    def own(self) -> bool:
        """True for the scenario's own demand, perhaps scaled: no jitter, flows as written."""
        return self.jitter == 0.0 and not self.randomize_flows

    @property
    def original(self) -> bool:
        """True for the scenario's own demand, unmodified."""
        return self.own and self.scale == 1.0

    def replace(self, **changes: object) -> Variation:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def describe(self) -> str:
        if self.own:
            return "the scenario's own demand" + ("" if self.original else f" x{self.scale:g}")
        flows = ", random flow departures" if self.randomize_flows else ""
        return f"seed {self.seed}, scale {self.scale:g}, jitter +-{self.jitter:g} s{flows}"

    def key(self, sources: Sequence[str]) -> dict[str, object]:
        """Everything the file depends on (the cache key): the variation, SUMO, the inputs."""
        return {"format": _FORMAT, "sumo": SUMO_VERSION, "sources": list(sources),
                **dataclasses.asdict(self)}  # fmt: skip

    def file_name(self, sources: Sequence[str]) -> str:
        digest = hashlib.sha256(json.dumps(self.key(sources), sort_keys=True).encode())
        kind = f"own-x{self.scale:g}" if self.own else f"s{self.seed}-x{self.scale:g}"
        return f"{kind}-{digest.hexdigest()[:12]}.rou.xml"


ORIGINAL = Variation(seed=0, randomize_flows=False)


def _defined_types(files: Sequence[Path]) -> tuple[set[str], set[str]]:
    """Ids of the vehicle types and of the type distributions the additional files define."""
    types: set[str] = set()
    dists: set[str] = set()
    for path in files:
        try:
            with open_xml(path) as stream:
                for _, elem in ET.iterparse(stream, events=("end",)):
                    if elem.tag in _TYPE_TAGS and "id" in elem.attrib:
                        types.add(elem.attrib["id"])
                        if elem.tag == "vTypeDistribution":
                            dists.add(elem.attrib["id"])
                    elem.clear()
        except (ET.ParseError, OSError) as exc:
            raise ScenarioError(f"additional file {path}: {exc}") from exc
    return types, dists


def _as_trip(elem: ET.Element) -> None:
    """A routed vehicle whose type is a distribution becomes a trip over its route's ends: SUMO
    draws the type when it loads the vehicle, and a route duarouter found for another draw (a
    car's) may not be drivable by this one (a bicycle's); SUMO routes a trip for the type drawn,
    as it did the scenario's own trips and flows."""
    route = elem.find("route")
    edges = route.attrib.get("edges", "").split() if route is not None else []
    if not edges:
        return
    elem.tag = "trip"
    elem.remove(route)  # type: ignore[arg-type]
    elem.set("from", edges[0])
    elem.set("to", edges[-1])


def _duarouter(scenario: Scenario, v: Variation, out: str) -> list[str]:
    """duarouter's command line for ``v`` over the scenario's span (no --ignore-errors: a route
    SUMO cannot drive either is the scenario's error, said once here, not a smaller demand)."""
    cmd = [sumo_binary("duarouter"), "--net-file", str(scenario.net_file),
           "--route-files", ",".join(str(p) for p in scenario.route_files),
           "--output-file", out, "--alternatives-output", "NUL", "--seed", str(v.seed),
           "--begin", f"{scenario.begin:g}", "--end", f"{scenario.end:g}",
           "--scale", f"{v.scale:g}", "--xml-validation", "never", "--no-step-log",
           "--no-warnings", "--routing-threads", "1", "--keep-vtype-distributions"]  # fmt: skip
    if scenario.additional_files:  # their vehicle types (duarouter skips what it does not route)
        cmd += ["--additional-files", ",".join(str(p) for p in scenario.additional_files)]
    return cmd + (["--randomize-flows"] if v.randomize_flows else [])


def _rewrite(source: Path, target: Path, v: Variation, known: tuple[set[str], set[str]]) -> int:
    """Jitter, drop the types the additional files define, turn vehicles of a type distribution
    into trips and sort ``source`` into ``target``; the number of timed elements (vehicles,
    persons, flows) written."""
    rng = np.random.default_rng([v.seed, 0x7A7E])
    drop_types, dists = known[0], set(known[1])
    defs: list[bytes] = []
    loose: list[bytes] = []  # duarouter writes a redefined DEFAULT_VEHTYPE's members unwrapped
    timed: list[tuple[float, int, bytes]] = []
    depth = 0
    with open_xml(source) as stream:
        for event, elem in ET.iterparse(stream, events=("start", "end")):
            if event == "start":
                depth += 1
                continue
            depth -= 1
            if depth != 1:
                continue
            attr = _TIMED.get(elem.tag)
            if elem.tag == "vTypeDistribution":
                dists.add(elem.attrib.get("id", ""))
            if elem.tag in _TYPE_TAGS and elem.attrib.get("id") in drop_types:
                pass
            elif elem.tag == "vType" and "probability" in elem.attrib:
                loose.append(ET.tostring(elem))  # a dissolved default distribution: see below
                dists.add("DEFAULT_VEHTYPE")
            elif attr is not None and _number(elem.attrib.get(attr)) is not None:
                t = float(elem.attrib[attr])
                if v.jitter > 0:
                    shift = float(rng.uniform(-v.jitter, v.jitter))
                    t = max(0.0, t + shift)
                    elem.set(attr, f"{t:.2f}")
                    if elem.tag.endswith("low") and _number(elem.attrib.get("end")) is not None:
                        elem.set("end", f"{max(t, float(elem.attrib['end']) + shift):.2f}")
                if elem.tag == "vehicle" and elem.attrib.get("type", "DEFAULT_VEHTYPE") in dists:
                    _as_trip(elem)
                timed.append((t, len(timed), ET.tostring(elem)))
            else:
                defs.append(ET.tostring(elem))
            elem.clear()
    timed.sort(key=lambda row: (row[0], row[1]))
    with open(target, "wb") as f:
        f.write(b'<?xml version="1.0" encoding="UTF-8"?>\n<routes>\n')
        for chunk in defs:
            f.write(chunk.strip() + b"\n")
        if loose:
            f.write(b'<vTypeDistribution id="DEFAULT_VEHTYPE">\n')
            f.writelines(chunk.strip() + b"\n" for chunk in loose)
            f.write(b"</vTypeDistribution>\n")
        for _, _, chunk in timed:
            f.write(chunk.strip() + b"\n")
        f.write(b"</routes>\n")
    return len(timed)


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def write_variation(
    scenario: Scenario, v: Variation, target: str | Path, *, runner: Runner | None = None
) -> Path:
    """Write the variation ``v`` of ``scenario``'s own demand to ``target`` (atomically; a
    ``ScenarioError`` with duarouter's message when the demand does not route on the net)."""
    if not scenario.route_files:
        raise ScenarioError(f"Scenario {scenario.name}: no route files, so no demand of its own")
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    out = AtomicPath(target, fsync=False)  # a cache: atomic, not worth an fsync per file
    try:
        routed = out.tmp.parent / "routed.rou.xml"
        try:
            (runner or run_command)(_duarouter(scenario, v, routed.name), out.tmp.parent)
        except ScenarioError as exc:
            first = next((ln for ln in str(exc).splitlines() if ln.startswith("Error")), str(exc))
            raise ScenarioError(f"Scenario {scenario.name}: its demand does not route on its "
                                f"net: {first.strip()}") from None  # fmt: skip
        known = _defined_types(scenario.additional_files)
        if _rewrite(routed, out.tmp, v, known) == 0:
            raise ScenarioError(f"Scenario {scenario.name}: its route files hold no vehicles")
        return out.publish()
    finally:
        out.discard()


class VariationPool(RoutePool):
    """Route files for training: every seed x scale variation of a scenario's own demand, cached.

    Files live in ``directory/own-<digest of the scenario's net and route files>/`` named by
    the variation and a digest of everything that shapes them, so a changed input never reuses a
    stale file; a cached file is reused when it parses as a complete route file. The interface
    is ``DemandPool``'s (``build``, ``files``, ``seeds``, ``route_for``, ``held_out``)."""

    def __init__(self, scenario: Scenario, directory: str | Path, *, seeds: Sequence[int],
                 scales: Sequence[float] = (1.0,), jitter: float = 0.0,
                 runner: Runner | None = None) -> None:  # fmt: skip
        if not scenario.route_files:
            raise ScenarioError(f"Scenario {scenario.name}: no route files to vary")
        if not scales or len(set(scales)) != len(scales):
            raise ValueError(f"VariationPool: scales {list(scales)}: one or more, no duplicates")
        self.scenario, self.directory, self.runner = scenario, Path(directory), runner
        self.variations = tuple(Variation(seed=int(s), scale=x, jitter=jitter)
                                for x in scales for s in seeds)  # fmt: skip
        if not self.variations:
            raise ValueError("VariationPool: seeds is empty")
        self._sources: list[str] | None = None
        self._files: tuple[Path, ...] | None = None

    @property
    def seeds(self) -> tuple[int, ...]:
        """The training variation seeds."""
        return tuple(dict.fromkeys(v.seed for v in self.variations))

    @property
    def sources(self) -> list[str]:
        """sha256 of the net, route and additional files (what the cache key names)."""
        if self._sources is None:
            sc = self.scenario
            files = (sc.net_file, *sc.route_files, *sc.additional_files)
            self._sources = [_sha256(p) for p in files]
        return self._sources

    def path_for(self, v: Variation) -> Path:
        folder = hashlib.sha256("".join(self.sources).encode()).hexdigest()[:16]
        return self.directory / f"own-{folder}" / v.file_name(self.sources)

    def _ensure(self, v: Variation) -> Path:
        path = self.path_for(v)
        return path if is_complete(path) else write_variation(self.scenario, v, path,
                                                               runner=self.runner)  # fmt: skip

    def build(self) -> tuple[Path, ...]:
        """Generate the missing (or damaged) files; all files, scale major, seed minor."""
        self._files = tuple(self._ensure(v) for v in self.variations)
        return self._files

    def held_out(self, seeds: Sequence[int], *,
                 heavy_factor: float = 1.3) -> tuple[DemandSet, DemandSet]:  # fmt: skip
        """Evaluation traffic never trained on: ``(held_out, held_out_heavy)``. The first is the
        scenario's own demand unmodified plus the variations of ``seeds`` (disjoint from the
        training seeds) at scale 1; the heavy set is the same times ``heavy_factor``."""
        clash = sorted(set(int(s) for s in seeds) & set(self.seeds))
        if clash:
            raise ValueError(f"held_out: seed(s) {clash} are training seeds {self.seeds}")
        if not heavy_factor > 1:
            raise ValueError(f"held_out: heavy_factor={heavy_factor}, must be > 1")
        jitter = self.variations[0].jitter
        normal = (ORIGINAL, *(Variation(seed=int(s), jitter=jitter) for s in seeds))
        heavy = tuple(v.replace(scale=heavy_factor) for v in normal)
        return tuple(
            DemandSet(name=name, files=tuple(self._ensure(v) for v in vs), variations=vs)
            for name, vs in (("held-out", normal), ("held-out-heavy", heavy))
        )  # type: ignore[return-value]


    def validation(self, seeds: Sequence[int]) -> DemandSet:
        """Traffic to choose by (a teacher, a checkpoint): the variations of ``seeds`` at scale 1,
        never trained on and without the scenario's own demand (held-out evaluation keeps that)."""
        clash = sorted(set(int(s) for s in seeds) & set(self.seeds))
        if clash or not seeds:
            raise ValueError(f"validation: seeds {list(seeds)}: need one or more, none of the "
                             f"training seeds {self.seeds}")  # fmt: skip
        vs = tuple(Variation(seed=int(s), jitter=self.variations[0].jitter) for s in seeds)
        return DemandSet(name="validation", files=tuple(self._ensure(v) for v in vs), variations=vs)


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
