"""The ``red_light`` cost: vehicles that enter the junction on a link whose signal is red.

SUMO's drivers stop at red unless their vehicle type lets them run it, through two junction-model
parameters (SUMO docs, "Definition of Vehicles, Vehicle Types, and Routes", Junction Model
Parameters): ``jmDriveAfterRedTime`` (s; default -1, never) lets a vehicle pass a red that has
lasted less than that time, and ``jmDriveRedSpeed`` (m/s; default its maximum speed) caps its speed
when it does. So the cost needs reads only in scenarios with such a vehicle type
(``allows_red_running``: a ``vType`` with ``jmDriveAfterRedTime >= 0`` in the route or additional
files, checked at every reset); elsewhere it is 0 with no extra read and no extra SUMO work.

Where drivers may run red, the session places an induction loop at the start of each controlled
link's internal (via) lane in an additional file of the episode and steps SUMO one step at a time.
After each step, a vehicle new on a loop entered that link in that step, and the link's signal in
that step (``r``/``u``: red, red-yellow) says whether it ran a red. Loops rather than reading the
internal lanes' vehicles: a loop sees a vehicle that crosses it within one step, a lane read
misses a fast vehicle that crosses a short internal lane between two steps. Links without an
internal lane (nets built with ``--no-internal-links``) are not watched (a warning says so).
"""

from __future__ import annotations

import logging
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import traci.constants as tc

from tj_rl.env.errors import ScenarioError
from tj_rl.env.scenario import mentions, open_xml
from tj_rl.env.topology import LightTopology

__all__ = ["RED_RUN_ATTR", "RedLightLoops", "allows_red_running"]

log = logging.getLogger(__name__)
RED_RUN_ATTR = "jmDriveAfterRedTime"
_RED = frozenset("ru")  # SUMO link states that stop a vehicle (red, red-yellow)


def allows_red_running(files: Iterable[str | Path]) -> bool:
    """Whether a ``vType`` of ``files`` (route or additional files) has ``jmDriveAfterRedTime``
    >= 0. Files that never name the attribute are only scanned for it, not parsed."""
    for path in map(Path, files):
        if not mentions(path, RED_RUN_ATTR.encode()):
            continue
        try:
            with open_xml(path) as stream:
                for _, elem in ET.iterparse(stream):
                    if elem.tag == "vType" and float(elem.get(RED_RUN_ATTR, "-1")) >= 0:
                        return True
                    elem.clear()
        except (ET.ParseError, ValueError) as exc:
            raise ScenarioError(f"{path}: cannot read its vTypes' {RED_RUN_ATTR} ({exc})") from exc
    return False


class RedLightLoops:
    """The loops of every controlled light's links and the red entries they count per light."""

    def __init__(self, lights: Sequence[LightTopology]) -> None:
        self.tls_ids = [lt.tls_id for lt in lights]
        # loop id -> (light number, link indices whose internal lane it starts)
        self.loops: dict[str, tuple[int, list[int]]] = {}
        self.lanes: dict[str, str] = {}
        for k, light in enumerate(lights):
            vias: dict[str, list[int]] = {}
            for i, (_, _, via) in enumerate(light.links):
                if via:
                    vias.setdefault(via, []).append(i)
            if not vias and light.links:
                log.warning("red_light: light %s has no internal lanes; not counted", light.tls_id)
            for n, (via, idx) in enumerate(vias.items()):
                loop = f"tj-rl-red.{light.tls_id}.{n}"
                self.loops[loop], self.lanes[loop] = (k, idx), via
        self.counts = np.zeros(len(lights), np.float32)
        self._seen: dict[str, frozenset[str]] = {}

    def write(self, path: Path) -> Path:
        """The loops as a SUMO additional file at ``path`` (no output file: read over TraCI)."""
        root = ET.Element("additional")
        for loop, lane in self.lanes.items():
            attrs = {"id": loop, "lane": lane, "pos": "0", "period": "86400", "file": "NUL"}
            ET.SubElement(root, "inductionLoop", attrs)
        ET.ElementTree(root).write(path, encoding="UTF-8", xml_declaration=True)
        return path

    def subscribe(self, conn: Any) -> None:
        """Subscribe the loops' vehicle ids and the lights' states (delivered with each step)."""
        for loop in self.loops:
            conn.inductionloop.subscribe(loop, (tc.LAST_STEP_VEHICLE_ID_LIST,))
        for tls in self.tls_ids:
            conn.trafficlight.subscribe(tls, (tc.TL_RED_YELLOW_GREEN_STATE,))

    def after_step(self, conn: Any) -> None:
        """Count the vehicles that entered a link on red in the step just made."""
        loops = conn.inductionloop.getAllSubscriptionResults()
        states = conn.trafficlight.getAllSubscriptionResults()
        seen = self._seen
        for loop, (k, links) in self.loops.items():
            ids = frozenset(loops[loop][tc.LAST_STEP_VEHICLE_ID_LIST])
            new = ids - seen.get(loop, frozenset())
            seen[loop] = ids
            if new and any(states[self.tls_ids[k]][tc.TL_RED_YELLOW_GREEN_STATE][i] in _RED
                           for i in links):  # fmt: skip
                self.counts[k] += len(new)

    def take(self) -> np.ndarray:
        """float32 [L]: red entries per light since the last call (then zero again)."""
        out, self.counts = self.counts, np.zeros_like(self.counts)
        return out
