"""Episode metrics from SUMO's own outputs, parsed with sumolib.

Each episode writes ``--tripinfo-output`` (with unfinished trips) and ``--statistic-output`` into a
per-episode temporary directory that is removed after parsing. Delay is SUMO's ``timeLoss`` (time lost
against driving at the desired speed), averaged over every inserted vehicle, finished or not.
Pedestrians (``<personinfo>``) are reported apart: their mean ``waitingTime`` over every person
who set off, finished or not (SUMO gives an unfinished walk no ``timeLoss``, but counts its wait),
so a controller that starves a crossing shows it even though the vehicles' delay does not.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
from sumolib.xml import parse_fast

__all__ = [
    "METRIC_NAMES",
    "EpisodeMetrics",
    "Spread",
    "metrics_args",
    "parse_episode_metrics",
    "spread",
]

TRIPINFO = "tripinfo.xml"
STATISTICS = "statistics.xml"


@dataclass(frozen=True, kw_only=True)
class EpisodeMetrics:
    """One episode's results (seconds, counts)."""

    avg_delay: float  # mean tripinfo timeLoss, all inserted vehicles
    avg_trip_time: float  # mean duration of finished trips
    avg_waiting_time: float  # mean tripinfo waitingTime, all inserted vehicles
    throughput: int  # finished trips
    unfinished: int  # inserted but still running at the end
    mean_queue: float  # mean halting vehicles on controlled incoming lanes per decision step
    teleports: int
    emergency_brakes: int  # SUMO's emergencyBraking count
    emergency_stops: int
    collisions: int
    vetoes: int  # shield vetoes over all lights
    persons: int  # pedestrians who set off (0 when the scenario has none)
    avg_ped_waiting: float  # their mean tripinfo waitingTime, finished or not (0: no person)

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


METRIC_NAMES: tuple[str, ...] = tuple(EpisodeMetrics.__dataclass_fields__)


def metrics_args(outdir: Path) -> list[str]:
    """SUMO options that write this module's inputs into ``outdir``."""
    return [
        "--tripinfo-output", str(outdir / TRIPINFO),
        "--tripinfo-output.write-unfinished", "true",
        "--statistic-output", str(outdir / STATISTICS),
    ]  # fmt: skip


def _stat(root: ET.Element, tag: str, attr: str) -> int:
    elem = root.find(tag)
    if elem is None or attr not in elem.attrib:
        raise ValueError(f"statistics output lacks <{tag} {attr}=...>")
    return int(float(elem.attrib[attr]))


def parse_episode_metrics(outdir: Path, *, mean_queue: float, vetoes: int) -> EpisodeMetrics:
    """Read ``tripinfo.xml`` and ``statistics.xml`` written by a closed SUMO run in ``outdir``."""
    trip_path, stat_path = outdir / TRIPINFO, outdir / STATISTICS
    for path in (trip_path, stat_path):
        if not path.is_file():
            raise FileNotFoundError(f"SUMO output {path} missing (did SUMO close cleanly?)")
    rows = [
        (float(t.arrival), float(t.duration), float(t.waitingTime), float(t.timeLoss))
        for t in parse_fast(
            str(trip_path), "tripinfo", ["id", "arrival", "duration", "waitingTime", "timeLoss"]
        )
    ]
    a = np.asarray(rows, dtype=np.float64).reshape(-1, 4)
    finished = a[:, 0] >= 0
    waits = np.asarray(
        [
            float(p.waitingTime)
            for p in parse_fast(str(trip_path), "personinfo", ["id", "depart", "waitingTime"])
            if float(p.depart) >= 0  # -1: a person of a flow that had not set off by the end
        ],
        dtype=np.float64,
    )
    try:
        root = ET.parse(stat_path).getroot()
    except ET.ParseError as exc:
        raise ValueError(f"SUMO statistics output {stat_path} is malformed: {exc}") from exc
    return EpisodeMetrics(
        avg_delay=float(a[:, 3].mean()) if len(a) else math.nan,
        avg_trip_time=float(a[finished, 1].mean()) if finished.any() else math.nan,
        avg_waiting_time=float(a[:, 2].mean()) if len(a) else math.nan,
        throughput=int(finished.sum()),
        unfinished=int((~finished).sum()),
        mean_queue=float(mean_queue),
        teleports=_stat(root, "teleports", "total"),
        emergency_brakes=_stat(root, "safety", "emergencyBraking"),
        emergency_stops=_stat(root, "safety", "emergencyStops"),
        collisions=_stat(root, "safety", "collisions"),
        vetoes=int(vetoes),
        persons=len(waits),
        avg_ped_waiting=float(waits.mean()) if len(waits) else 0.0,  # rows stay == comparable
    )


class Spread(NamedTuple):
    """Mean and spread of one metric over episodes (NaN episodes, e.g. no finished trip, left
    out; ``n`` counts the others). ``std`` is the population std (ddof 0), 0 for one episode."""

    mean: float
    std: float
    min: float
    max: float
    n: int


def spread(values: Iterable[float]) -> Spread:
    """``Spread`` of ``values`` (all NaN or none: NaN statistics and ``n=0``)."""
    v = np.asarray(list(values), dtype=np.float64)
    v = v[~np.isnan(v)]
    if not len(v):
        return Spread(math.nan, math.nan, math.nan, math.nan, 0)
    return Spread(float(v.mean()), float(v.std()), float(v.min()), float(v.max()), len(v))
