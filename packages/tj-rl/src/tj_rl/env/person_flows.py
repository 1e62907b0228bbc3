"""Pedestrian flows a late begin loses: SUMO inserts no person of a ``personFlow`` whose ``begin``
is before the run's ``--begin``, for the whole of the flow, not only its earlier departures.

Measured with the SUMO of this project's wheels on Braunschweig's demo (``tools/game/fokr_bs_demo``,
its 10 ``personFlow``\\ s begin between 15:02:19 and 15:08:44 and run to 17:13:20): a run begun at
15:00 sees 588 persons in its first 20 minutes, a run begun at 15:15 sees none. Vehicle ``flow``\\ s are
not dropped. A real-city window that starts mid-flow (``Scenario.window``) silently runs without
those pedestrians, so the env warns once per route file and begin. The fix is to expand the flows
into single persons first (SUMO's ``duarouter``; tj-hybrid's demand pool does it).
"""

from __future__ import annotations

import functools
import logging
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path

from tj_rl.env.errors import ScenarioError
from tj_rl.env.scenario import clock, mentions, open_xml, parse_time

__all__ = ["late_person_flows", "warn_late_person_flows"]

log = logging.getLogger(__name__)


def late_person_flows(files: Iterable[str | Path], begin: float) -> dict[Path, list[str]]:
    """Per route file, the ids of its ``personFlow``\\ s that begin before ``begin`` (s) and end
    after it: SUMO inserts none of their persons. Files that never name ``personFlow`` are only
    scanned for the word, not parsed."""
    out: dict[Path, list[str]] = {}
    for path in map(Path, files):
        stat = path.stat()
        found = _late(str(path.resolve()), stat.st_size, stat.st_mtime_ns, float(begin))
        if found:
            out[path] = list(found)  # the caller's own copy of the cached list
    return out


def warn_late_person_flows(files: Iterable[str | Path], begin: float) -> None:
    """Log a warning (once per file and begin, in a process) for ``late_person_flows``."""
    for path, ids in late_person_flows(files, begin).items():
        _warn_once(str(path), begin, len(ids), ids[0])


@functools.lru_cache(maxsize=64)
def _warn_once(path: str, begin: float, n: int, first: str) -> None:
    log.warning(
        "%s: %d personFlow(s) (first %r) begin before the run's begin %s and go on after it; "
        "SUMO inserts none of their persons, so this run has fewer pedestrians than the "
        "scenario. Expand them into single persons first (duarouter), or begin no later "
        "than the flows.", path, n, first, clock(begin),
    )  # fmt: skip


@functools.lru_cache(maxsize=64)
def _late(path: str, size: int, mtime_ns: int, begin: float) -> list[str]:
    """The scan and parse of ``late_person_flows`` (``size`` and ``mtime_ns`` only key the
    cache: every episode of a process checks its files, and reads each once)."""
    del size, mtime_ns
    late: list[str] = []
    if not mentions(Path(path), b"personFlow"):
        return late
    try:
        with open_xml(Path(path)) as stream:
            for _, elem in ET.iterparse(stream):
                if elem.tag == "personFlow":
                    start = parse_time(elem.get("begin", "0"), what="personFlow begin")
                    stop = _end(elem, start)
                    if start < begin < stop:
                        late.append(elem.get("id", "?"))
                elem.clear()
    except (ET.ParseError, ValueError, ScenarioError) as exc:
        raise ScenarioError(f"{path}: cannot read its personFlows ({exc})") from exc
    return late


def _end(elem: ET.Element, start: float) -> float:
    """When a flow stops: its ``end``, else ``begin + number x period`` when both are given (the
    period from ``personsPerHour`` / ``perHour`` too), else never (SUMO's flows without an end
    run to the simulation's end; ``probability`` flows have no fixed period)."""
    if elem.get("end") is not None:
        return parse_time(elem.attrib["end"], what="personFlow end")
    number, period = elem.get("number"), elem.get("period")
    hourly = elem.get("personsPerHour", elem.get("perHour"))
    if period is None and hourly is not None and float(hourly) > 0:
        period = str(3600.0 / float(hourly))
    if number is not None and period is not None:
        return start + float(number) * parse_time(period, what="personFlow period")
    return float("inf")
