"""Static structure of the controlled lights, read once from the net with sumolib.

For each light: its centre, controlled links (incoming lane, outgoing lane, internal via lane),
incoming/outgoing lanes, the green phases (``shield.PhaseProgram``), and a lane table that gives
every lane near the light a movement index and the offset that turns a lane position into the
distance to the stop line (``dist = offset - lane_pos``: positive upstream, negative past it).

Movement index: ``[0, n_in)`` = the incoming (approach) lane the vehicle is on or heading to,
``[n_in, n_in + n_out)`` = the outgoing lane it is on or came from; internal lanes of the junction
take the movement of their incoming lane. Vehicles on other lanes are not part of the light's graph.
"""

from __future__ import annotations

import functools
import logging
import xml.etree.ElementTree as ET
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import sumolib

from tj_rl.env.clearance import ceil_to, ite_intervals
from tj_rl.env.errors import ScenarioError
from tj_rl.env.scenario import Scenario, open_xml
from tj_rl.env.shield import PhaseProgram, derive_program

__all__ = ["LightTopology", "NetTopology", "read_topology"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class LightTopology:
    """Everything static the env needs about one controlled light."""

    tls_id: str
    junction_id: str  # junction used for the vehicle context subscription
    junction_pos: tuple[float, float]  # its position: the subscription's centre point
    centre: tuple[float, float]
    radius_pad: float  # extra subscription radius for lights spanning several junctions
    program: PhaseProgram
    links: tuple[tuple[str, str, str], ...]  # (in_lane, out_lane, via_lane) per link index
    in_lanes: tuple[str, ...]
    out_lanes: tuple[str, ...]
    lane_length: np.ndarray  # float32 [n_in + n_out]
    movement_length: np.ndarray  # float32 [n_in + n_out]: lane chain length per movement (m)
    lane_speed: np.ndarray  # float32 [n_in + n_out] speed limits (m/s)
    lane_table: dict[str, tuple[int, float]]  # lane id -> (movement, stop-line offset)
    green_links: np.ndarray  # bool [n_greens, n_links]
    movement_pairs: tuple[tuple[int, int], ...]  # unique (in idx, out idx) over links

    @property
    def n_in(self) -> int:
        return len(self.in_lanes)

    @property
    def n_out(self) -> int:
        return len(self.out_lanes)

    def phase_movements(self) -> np.ndarray:
        """bool [n_greens, n_in, n_out]: movement (in, out) is green in the phase."""
        m = np.zeros((self.program.n_greens, self.n_in, self.n_out), dtype=bool)
        idx_in = {lane: i for i, lane in enumerate(self.in_lanes)}
        idx_out = {lane: i for i, lane in enumerate(self.out_lanes)}
        for k, (a, b, _) in enumerate(self.links):
            if a:  # empty: an index that controls no vehicle connection (e.g. a crossing)
                m[self.green_links[:, k], idx_in[a], idx_out[b]] = True
        return m

    def phase_lanes(self) -> np.ndarray:
        """int8 [n_greens, n_in + n_out] in the ``lanes`` row order: +1 on the incoming lanes a
        green serves, -1 on the outgoing lanes its green links feed, 0 elsewhere (so the
        product with lane counts is that green's pressure)."""
        moves = self.phase_movements()
        out = np.zeros((self.program.n_greens, self.n_in + self.n_out), np.int8)
        out[:, : self.n_in] = moves.any(axis=2)
        out[:, self.n_in :] = -moves.any(axis=1).astype(np.int8)
        return out


@dataclass(frozen=True, kw_only=True)
class NetTopology:
    """The controlled lights; ``skipped`` maps lights left uncontrolled (no program, no green,
    no vehicle link) to the reason, when the scenario did not name its lights explicitly."""

    lights: tuple[LightTopology, ...]
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def tls_ids(self) -> tuple[str, ...]:
        return tuple(light.tls_id for light in self.lights)


def _read_net(path: Path) -> sumolib.net.Net:
    try:
        return sumolib.net.readNet(str(path), withInternal=True, withPrograms=True)
    except Exception as exc:  # lxml / sax errors, truncated files, bad attributes
        raise ScenarioError(
            f"net file {path}: cannot be read by sumolib ({type(exc).__name__}: {exc})"
        ) from exc


def _programs(
    net: sumolib.net.Net, additional: Sequence[Path]
) -> dict[str, list[tuple[str, float]]]:
    """The program SUMO runs by default for each light: the last one loaded (net, then additionals)."""
    progs: dict[str, list[tuple[str, float]]] = {}
    for tls in net.getTrafficLights():
        programs = tls.getPrograms()
        if programs:
            last = list(programs.values())[-1]
            progs[tls.getID()] = [(p.state, float(p.duration)) for p in last.getPhases()]
    for path in additional:
        try:
            with open_xml(path) as stream:
                for _, elem in ET.iterparse(stream, events=("end",)):
                    if elem.tag == "tlLogic":
                        phases = [
                            (p.attrib["state"], float(p.attrib.get("duration", 0)))
                            for p in elem.iter("phase")
                        ]
                        progs[elem.attrib["id"]] = phases
                        elem.clear()
        except (ET.ParseError, KeyError, ValueError) as exc:
            raise ScenarioError(f"additional file {path}: bad <tlLogic> ({exc})") from exc
    return progs


def _crossing_links(net: sumolib.net.Net, path: Path) -> dict[str, dict[int, str]]:
    """Per light, its link indices that signal a pedestrian crossing -> the crossing's lane.
    sumolib leaves these connections out unless it reads every pedestrian connection (which
    would also join sidewalks to the lanes whose chains ``_lane_table`` walks), so one pass
    over the net's ``<connection>`` elements finds them; the pass is kept per net file (path,
    size and modification time), so every env of a process pays it once."""
    crossings = frozenset(
        e.getID() for e in net.getEdges(withInternal=True) if e.getFunction() == "crossing"
    )
    if not crossings:
        return {}
    stat = Path(path).stat()
    found = _connections_to_crossings(
        str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns, crossings
    )
    return {tls: dict(links) for tls, links in found.items()}  # the caller's own copy


@functools.lru_cache(maxsize=8)
def _connections_to_crossings(
    path: str, size: int, mtime_ns: int, crossings: frozenset[str]
) -> dict[str, dict[int, str]]:
    """The pass of ``_crossing_links`` (``size`` and ``mtime_ns`` only key the cache)."""
    del size, mtime_ns
    out: dict[str, dict[int, str]] = {}
    with open_xml(Path(path)) as stream:
        for _, elem in ET.iterparse(stream, events=("end",)):
            if elem.tag == "connection" and elem.get("tl") and elem.get("to") in crossings:
                lane = f"{elem.get('to')}_{elem.get('toLane', '0')}"
                for key in ("linkIndex", "linkIndex2"):
                    if elem.get(key) not in (None, "-1"):
                        out.setdefault(elem.attrib["tl"], {})[int(elem.attrib[key])] = lane
            elem.clear()
    return out


def _crossing_clear(
    net: sumolib.net.Net, lanes: dict[int, str], n_links: int, speed: float | None, step: float
) -> tuple[float, ...]:
    """Per link index: crossing length / ``speed`` rounded up to the step (0 for other links)."""
    if speed is None or not lanes:
        return ()
    out = [0.0] * n_links
    for k, lane in lanes.items():
        if 0 <= k < n_links:
            out[k] = ceil_to(net.getLane(lane).getLength() / speed, step)
    return tuple(out)


def _lane_table(
    net: sumolib.net.Net,
    in_lanes: Sequence[str],
    out_lanes: Sequence[str],
    links: Sequence[tuple[str, str, str]],
    reach: float,
) -> dict[str, tuple[int, float]]:
    table: dict[str, tuple[int, float]] = {}
    n_in = len(in_lanes)
    queue: deque[tuple[str, int, float]] = deque()
    for i, lane in enumerate(in_lanes):
        queue.append((lane, i, net.getLane(lane).getLength()))
    # upstream: offset = distance from the lane's start to the stop line
    while queue:
        lane_id, mov, offset = queue.popleft()
        if lane_id in table:
            continue
        table[lane_id] = (mov, offset)
        if offset > reach:
            continue
        for conn in net.getLane(lane_id).getIncomingConnections():
            src = conn.getFromLane()
            via = conn.getViaLaneID()
            via_len = net.getLane(via).getLength() if via else 0.0
            if via and via not in table:
                queue.append((via, mov, offset + via_len))
            queue.append((src.getID(), mov, offset + via_len + src.getLength()))
    # the junction itself and downstream: offset = -(distance from the stop line to the lane start)
    in_idx = {lane: i for i, lane in enumerate(in_lanes)}
    out_offset: dict[str, float] = {}
    for a, b, via in links:
        if not a:
            continue
        walk, offset = via, 0.0
        while walk and walk.startswith(":"):
            if walk not in table:
                table[walk] = (in_idx[a], offset)
            lane = net.getLane(walk)
            offset -= lane.getLength()
            nxt = [c.getViaLaneID() or c.getToLane().getID() for c in lane.getOutgoing()]
            walk = next((n for n in nxt if n.startswith(":")), "")
        out_offset.setdefault(b, offset)
    for j, lane in enumerate(out_lanes):
        queue.append((lane, n_in + j, out_offset.get(lane, 0.0)))
    while queue:
        lane_id, mov, offset = queue.popleft()
        if lane_id in table:
            continue
        table[lane_id] = (mov, offset)
        length = net.getLane(lane_id).getLength()
        if -offset + length > reach:
            continue
        for conn in net.getLane(lane_id).getOutgoing():
            via = conn.getViaLaneID()
            via_len = net.getLane(via).getLength() if via else 0.0
            if via and via not in table:
                queue.append((via, mov, offset - length))
            queue.append((conn.getToLane().getID(), mov, offset - length - via_len))
    return table


def _movement_length(
    net: sumolib.net.Net, table: dict[str, tuple[int, float]], n: int, n_in: int
) -> np.ndarray:
    """Length of road covered by each movement's lanes in the table (upstream: distance from the
    farthest lane start to the stop line; downstream: from the stop line to the farthest lane end)."""
    out = np.zeros(n, np.float32)
    for lane_id, (mov, offset) in table.items():
        reach = offset if mov < n_in else -offset + net.getLane(lane_id).getLength()
        out[mov] = max(out[mov], reach)
    return out


def _light(
    net: sumolib.net.Net,
    tls,
    phases,
    *,
    yellow: float | str,
    all_red: float | str,
    reach: float,
    step: float,
    crossings: dict[int, str],
    crossing_speed: float | None,
) -> LightTopology:
    tls_id = tls.getID()
    ite = "ite" in (yellow, all_red)
    program = derive_program(
        tls_id, phases, yellow_time=0.0 if ite else yellow, all_red_time=0.0 if ite else all_red
    )
    n_links = program.n_links
    program = replace(
        program, crossing_clear=_crossing_clear(net, crossings, n_links, crossing_speed, step)
    )
    links: list[tuple[str, str, str]] = [("", "", "")] * n_links
    for in_lane, out_lane, index in tls.getConnections():
        if index >= n_links:
            raise ScenarioError(
                f"traffic light {tls_id!r}: link index {index} outside its state length {n_links}"
            )
        if links[index][0]:
            continue  # several connections share one signal; the first names the movement
        conn = next((c for c in in_lane.getOutgoing() if c.getToLane() is out_lane), None)
        via = conn.getViaLaneID() if conn is not None else ""
        links[index] = (in_lane.getID(), out_lane.getID(), via or "")
    vehicle_links = [lk for lk in links if lk[0]]  # others: crossings, unused indices
    if not vehicle_links:
        raise ScenarioError(f"traffic light {tls_id!r}: controls no vehicle connection")
    if ite:  # per light from its approach speed (clearance.py)
        y, r = ite_intervals(net, vehicle_links, step=step)
        program = replace(
            program,
            yellow_time=y if yellow == "ite" else float(yellow),
            all_red_time=r if all_red == "ite" else float(all_red),
        )
    in_lanes = tuple(dict.fromkeys(a for a, _, _ in vehicle_links))
    out_lanes = tuple(dict.fromkeys(b for _, b, _ in vehicle_links))
    nodes = {net.getLane(a).getEdge().getToNode() for a in in_lanes}
    coords = np.array([n.getCoord()[:2] for n in nodes], dtype=np.float64)
    centre = coords.mean(axis=0)
    dists = np.linalg.norm(coords - centre, axis=1)
    main = sorted(
        nodes, key=lambda n: (float(np.linalg.norm(np.array(n.getCoord()[:2]) - centre)), n.getID())
    )[0]
    lanes = [net.getLane(x) for x in (*in_lanes, *out_lanes)]
    table = _lane_table(net, in_lanes, out_lanes, links, reach)
    in_idx = {lane: i for i, lane in enumerate(in_lanes)}
    out_idx = {lane: j for j, lane in enumerate(out_lanes)}
    green = np.array([[c in "Gg" for c in s] for s in program.greens], dtype=bool)
    return LightTopology(
        tls_id=tls_id,
        junction_id=main.getID(),
        junction_pos=(float(main.getCoord()[0]), float(main.getCoord()[1])),
        centre=(float(centre[0]), float(centre[1])),
        radius_pad=float(dists.max()),
        program=program,
        links=tuple(links),
        in_lanes=in_lanes,
        out_lanes=out_lanes,
        lane_length=np.array([x.getLength() for x in lanes], dtype=np.float32),
        lane_speed=np.array([x.getSpeed() for x in lanes], dtype=np.float32),
        lane_table=table,
        movement_length=_movement_length(net, table, len(in_lanes) + len(out_lanes), len(in_lanes)),
        green_links=green,
        movement_pairs=tuple(dict.fromkeys((in_idx[a], out_idx[b]) for a, b, _ in vehicle_links)),
    )


def read_topology(
    scenario: Scenario,
    *,
    yellow_time: float | str,
    all_red_time: float | str,
    reach: float,
    crossing_speed: float | None = None,
) -> NetTopology:
    """Read the controlled lights of ``scenario`` (all lights when ``scenario.tls_ids`` is None);
    ``"ite"`` for a clearance time computes it per light (``clearance.ite_intervals``).
    ``crossing_speed`` (m/s; None: off) times the clearance of signalled pedestrian crossings
    (``PhaseProgram.crossing_clear``: a crossing's length at that walking speed)."""
    net = _read_net(scenario.net_file)
    crossings = _crossing_links(net, scenario.net_file) if crossing_speed is not None else {}
    tls_by_id = {t.getID(): t for t in net.getTrafficLights()}
    progs = _programs(net, scenario.additional_files)
    wanted = scenario.tls_ids if scenario.tls_ids is not None else tuple(sorted(tls_by_id))
    if not wanted:
        raise ScenarioError(f"net file {scenario.net_file}: has no traffic light to control")
    unknown = [t for t in wanted if t not in tls_by_id]
    if unknown:
        raise ScenarioError(
            f"traffic light id(s) {unknown} not in net file {scenario.net_file} "
            f"(it has {sorted(tls_by_id)[:20]}{'...' if len(tls_by_id) > 20 else ''})"
        )
    lights, skipped = [], {}
    for tls_id in wanted:
        try:
            if tls_id not in progs:
                raise ScenarioError(f"traffic light {tls_id!r} in {scenario.net_file}: no program")
            lights.append(
                _light(
                    net,
                    tls_by_id[tls_id],
                    progs[tls_id],
                    yellow=yellow_time,
                    all_red=all_red_time,
                    reach=reach,
                    step=scenario.step_length,
                    crossings=crossings.get(tls_id, {}),
                    crossing_speed=crossing_speed,
                )
            )
        except ScenarioError as exc:
            if scenario.tls_ids is not None:  # asked for by id: an error
                raise
            skipped[tls_id] = str(exc)
    if skipped:
        log.warning(
            "not controlling %d light(s) of %s: %s", len(skipped), scenario.net_file, skipped
        )
    if not lights:
        raise ScenarioError(
            f"net file {scenario.net_file}: no controllable traffic light ({skipped})"
        )
    return NetTopology(lights=tuple(lights), skipped=skipped)
