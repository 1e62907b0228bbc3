"""Route files: reading their departures (any SUMO time form) and picking, per episode, one file
of a pool or one window of a scenario in a reproducible order (pure functions)."""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral
from pathlib import Path
from typing import NamedTuple
from xml.parsers import expat

import numpy as np
from sumolib.miscutils import SPECIAL_TIME_STRINGS

from tj_rl.env.errors import ScenarioError
from tj_rl.env.scenario import open_xml, parse_time

__all__ = ["Departure", "is_complete", "pick_index", "pick_route", "read_departures"]

_VEHICLE_TAGS = frozenset({"vehicle", "trip", "flow"})


class Departure(NamedTuple):
    """One vehicle of a route file: id, departure time (s) and route edges."""

    id: str
    depart: float
    edges: str


def _time(value: str, path: str | Path, vehicle: str) -> float:
    """A departure in any SUMO time form; SUMO's words that are no time (``triggered``...): NaN."""
    if value.strip() in ("", *SPECIAL_TIME_STRINGS):
        return float("nan")
    try:
        return parse_time(value, what=f"route file {path}: vehicle {vehicle!r} depart")
    except ScenarioError as exc:
        raise ValueError(str(exc)) from None


def read_departures(path: str | Path) -> list[Departure]:
    """The vehicles of a route file in file order (raises ``ValueError`` if it is not complete)."""
    rows: list[list] = []  # [id, depart, edges]
    depth = [0, -1]  # current element depth, depth of the open vehicle (-1: none)

    def start(tag: str, attrs: dict[str, str]) -> None:
        depth[0] += 1
        if depth[0] == 1 and tag != "routes":
            raise ValueError(f"route file {path}: root <{tag}>, expected <routes>")
        if tag in _VEHICLE_TAGS:
            vid = attrs.get("id", "")
            rows.append([vid, _time(attrs.get("depart", ""), path, vid), attrs.get("route", "")])
            depth[1] = depth[0]
        elif tag == "route" and depth[1] == depth[0] - 1 and not rows[-1][2]:
            rows[-1][2] = attrs.get("edges", "")  # the vehicle's own route

    def end(tag: str) -> None:
        if depth[1] == depth[0]:
            depth[1] = -1
        depth[0] -= 1

    parser = expat.ParserCreate()
    parser.StartElementHandler, parser.EndElementHandler = start, end
    try:
        with open_xml(Path(path)) as stream:
            parser.ParseFile(stream)
    except (expat.ExpatError, OSError, EOFError) as exc:
        raise ValueError(f"route file {path}: incomplete or malformed ({exc})") from exc
    return [Departure(*r) for r in rows]


def is_complete(path: str | Path) -> bool:
    """Whether ``path`` is a complete route file with vehicles (a cached pool file worth
    reusing; a truncated or damaged one is made again)."""
    try:
        return Path(path).is_file() and bool(read_departures(path))
    except ValueError:
        return False


def pick_index(n: int, episode: int, seed: int | Sequence[int] = 0) -> int:
    """Which of ``n`` items episode ``episode`` of a stream ``seed`` uses: each cycle of ``n``
    episodes uses every item once, in an order drawn from ``(seed, cycle)``, so the same
    arguments always give the same item. Pure (route files, episode windows)."""
    if episode < 0:
        raise ValueError(f"pick_index: episode {episode} must be >= 0")
    if n < 1:
        raise ValueError("pick_index: nothing to pick from")
    cycle, pos = divmod(int(episode), n)
    entropy = [int(seed)] if isinstance(seed, Integral) else [int(s) for s in seed]
    order = np.random.default_rng([*entropy, cycle]).permutation(n)
    return int(order[pos])


def pick_route(files: Sequence[Path], episode: int, seed: int = 0) -> Path:
    """The route file of ``episode`` for a stream ``seed`` (e.g. an env runner's index):
    ``pick_index`` over ``files``. Pure: an env can call it on a pool's file list without the
    pool."""
    if not files:
        raise ValueError("pick_route: no route files")
    return Path(files[pick_index(len(files), episode, seed)])
