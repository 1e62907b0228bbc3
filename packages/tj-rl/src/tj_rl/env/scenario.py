"""A SUMO scenario: net, routes (or a ``.sumocfg``), time span, step length, seed, controlled lights.

``Scenario`` only describes files and options; it never starts SUMO. Files are checked when the
scenario is made (exists, well-formed XML with the expected root element), so that a bad path fails
here with the file's name rather than deep inside SUMO.

Times follow SUMO's rules (``parse_time``: seconds, ``H:M:S`` or ``D:H:M:S``, fractions allowed),
and real scenarios rarely begin at 0 (a morning peak is ``begin 7:00:00``). An episode is a
window ``[start, start + seconds)`` inside the scenario's span (``window``, ``windowed``).
"""

from __future__ import annotations

import dataclasses
import gzip
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal
from xml.parsers import expat

from sumolib.miscutils import humanReadableTime, parseTime

from tj_rl.env.errors import ScenarioError

__all__ = [
    "Scenario",
    "TimeWindow",
    "check_xml",
    "clock",
    "mentions",
    "open_xml",
    "parse_time",
    "sumocfg_stem",
]

_EPS = 1e-6
TimeValue = float | int | str


def sumocfg_stem(path: str | Path) -> str:
    """A .sumocfg's file name without ``.sumocfg`` / ``.sumo.cfg`` / ``.cfg``: the scenario's
    name (``Scenario.from_sumocfg``'s, and the app's folder keys), read from the name alone."""
    return re.sub(r"(\.sumo)?\.(sumo)?cfg$", "", Path(path).name)


def parse_time(value: TimeValue, *, what: str = "time") -> float:
    """Seconds from a SUMO time value: seconds (``"25200"``, ``"0.5"``), ``H:M:S`` or ``D:H:M:S``
    (``"7:00:00"``, ``"1:07:00:00.5"``), as SUMO reads them (sumolib's ``parseTime``; SUMO takes at
    most four fields). Raises ``ScenarioError`` naming ``what`` for anything else, SUMO's special
    words (``triggered``...) and non-finite values included."""
    text = str(value).strip()
    try:
        ok = text.count(":") <= 3 and not isinstance(value, bool)
        seconds = parseTime(text) if ok else None
    except ValueError:
        seconds = None
    if seconds is None or not math.isfinite(seconds):
        raise ScenarioError(
            f"{what}: unknown time format {value!r} (SUMO's forms: seconds like 25200 or 0.5, "
            "H:M:S like 7:00:00, D:H:M:S like 1:07:00:00)"
        )
    return float(seconds)


def clock(seconds: float) -> str:
    """``seconds`` as SUMO's clock time (``25200`` -> ``07:00:00``), for messages and reports."""
    return humanReadableTime(seconds)


# SUMO's synonyms for the options a scenario reads (``<net value=...>`` in older configs)
_SYNONYMS = {"net": "net-file", "n": "net-file", "routes": "route-files", "r": "route-files",
             "additional": "additional-files", "a": "additional-files", "b": "begin", "e": "end"}


@dataclass(frozen=True, kw_only=True)
class TimeWindow:
    """One episode's time: ``[start, start + seconds)`` in scenario seconds (``start`` may be
    given in any SUMO time form)."""

    start: float
    seconds: float

    def __post_init__(self) -> None:
        start = parse_time(self.start, what="window start")
        seconds = float(self.seconds)
        if start < 0 or not (math.isfinite(seconds) and seconds > 0):
            raise ScenarioError(f"TimeWindow: need start >= 0 and seconds > 0, got {self.start!r}, "
                                f"{self.seconds!r}")  # fmt: skip
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "seconds", seconds)

    @property
    def end(self) -> float:
        return self.start + self.seconds

    def __str__(self) -> str:
        return f"[{self.start:g}, {self.end:g}) s ({clock(self.start)}-{clock(self.end)})"


_ROOTS: dict[str, tuple[str, ...] | None] = {
    "net": ("net",),
    "route": ("routes", "additional"),
    "additional": None,  # SUMO reads any root here (<additional>, <tlLogics>, <routes>, ...)
    "sumocfg": ("configuration", "sumoConfiguration", "c"),  # <c>: SUMO's older examples
}


def open_xml(path: Path) -> IO[bytes]:
    """Plain or gzip-compressed XML (SUMO reads ``.xml.gz`` transparently)."""
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def mentions(path: Path, word: bytes) -> bool:
    """Whether ``word`` occurs in the (plain or gzipped) file: a byte scan, no XML parse (so a
    check for a rare element costs files that lack it a read, not a parse)."""
    tail = b""
    with open_xml(path) as stream:
        while chunk := stream.read(1 << 20):
            if word in tail + chunk:
                return True
            tail = chunk[-len(word) :]
    return False


def check_xml(path: Path, kind: str) -> None:
    """Raise ScenarioError unless ``path`` exists and is well-formed XML with a ``kind`` root.

    Net, config and additional files are parsed in full with expat (no tree is built: fast even
    for city nets). Route files can be huge and are loaded incrementally by SUMO, so only their
    start is checked here; SUMO's own error (with its stderr) names any later problem.
    """
    if not path.is_file():
        raise ScenarioError(f"{kind} file not found: {path}")
    roots = _ROOTS[kind]
    found: list[str] = []

    def start(tag: str, _attrs: object) -> None:
        if not found:
            found.append(tag)
            if roots is not None and tag not in roots:
                raise ScenarioError(
                    f"{kind} file {path}: root element <{tag}>, expected "
                    + " or ".join(f"<{r}>" for r in roots)
                )
            if kind == "route":
                raise _StopParse

    parser = expat.ParserCreate()
    parser.StartElementHandler = start
    try:
        with open_xml(path) as stream:
            parser.ParseFile(stream)
    except _StopParse:
        return
    except (expat.ExpatError, OSError, EOFError) as exc:
        raise ScenarioError(f"{kind} file {path}: malformed XML ({exc})") from exc
    if not found:
        raise ScenarioError(f"{kind} file {path}: empty document")


class _StopParse(Exception):
    pass


def _seconds(value: float) -> str:
    """A time for SUMO's command line: short (``900``) where exact, else every digit."""
    short = f"{value:g}"
    return short if float(short) == value else repr(float(value))


def _split_files(value: str, base: Path) -> tuple[Path, ...]:
    parts = [p for p in value.replace(",", " ").split() if p]
    return tuple((base / p).resolve() for p in parts)


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """Files and options of one SUMO scenario.

    Either ``net_file`` (+ ``route_files``) or ``sumocfg`` (which names them) must be given. With a
    ``sumocfg`` SUMO is started with ``-c`` so every option in it applies; ``begin``, ``end``,
    ``step_length`` and the seed given here override the file's values. ``begin`` / ``end`` take
    any SUMO time form (``"7:00:00"``). ``windows``: the episode windows an env draws from, one per
    episode (empty: every episode is ``[begin, end)``); ``windowed`` makes them.
    """

    net_file: Path
    route_files: tuple[Path, ...] = ()
    additional_files: tuple[Path, ...] = ()
    sumocfg: Path | None = None
    begin: float = 0.0
    end: float = 3600.0
    step_length: float = 1.0
    seed: int = 0
    tls_ids: tuple[str, ...] | None = None
    extra_args: tuple[str, ...] = ()
    name: str = "scenario"
    windows: tuple[TimeWindow, ...] = ()

    def __post_init__(self) -> None:
        for key in ("begin", "end", "step_length"):
            value = parse_time(getattr(self, key), what=f"Scenario {self.name}: {key}")
            object.__setattr__(self, key, value)
        object.__setattr__(self, "net_file", Path(self.net_file).resolve())
        object.__setattr__(self, "route_files", tuple(Path(p).resolve() for p in self.route_files))
        object.__setattr__(
            self, "additional_files", tuple(Path(p).resolve() for p in self.additional_files)
        )
        if self.sumocfg is not None:
            object.__setattr__(self, "sumocfg", Path(self.sumocfg).resolve())
            check_xml(self.sumocfg, "sumocfg")
        if not (self.end > self.begin >= 0):
            raise ScenarioError(
                f"Scenario {self.name}: need end > begin >= 0, got begin={self.begin}, end={self.end}"
            )
        if not (0 < self.step_length <= 10):
            raise ScenarioError(
                f"Scenario {self.name}: step_length must be in (0, 10] s, got {self.step_length}"
            )
        if self.tls_ids is not None:
            if isinstance(self.tls_ids, str) or not self.tls_ids:
                raise ScenarioError(
                    f"Scenario {self.name}: tls_ids must be a non-empty tuple of ids or None, got {self.tls_ids!r}"
                )
            object.__setattr__(self, "tls_ids", tuple(str(t) for t in self.tls_ids))
        object.__setattr__(self, "windows", tuple(self.windows))
        for w in self.windows:
            self._check_inside(w)
        check_xml(self.net_file, "net")
        for p in self.route_files:
            check_xml(p, "route")
        for p in self.additional_files:
            check_xml(p, "additional")

    @classmethod
    def from_sumocfg(cls, path: str | Path, **overrides: object) -> Scenario:
        """Load a standard ``.sumocfg`` (any SUMO scenario, real-city nets included).

        Reads net, route and additional files, begin/end (any SUMO time form; no ``<end>`` or
        SUMO's ``-1``: one hour after begin), step length and seed from the file; keyword
        arguments override them (``tls_ids=("J1", "J7")`` to control a subset of the lights).
        """
        path = Path(path).resolve()
        check_xml(path, "sumocfg")
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError as exc:  # pragma: no cover - caught by _check_xml's start parse mostly
            raise ScenarioError(f"sumocfg file {path}: malformed XML ({exc})") from exc
        values: dict[str, str] = {}
        for opt in root.iter():  # options in sections (<input>...) or, in old files, at the top
            if opt is not root and "value" in opt.attrib:
                values[_SYNONYMS.get(opt.tag, opt.tag)] = opt.attrib["value"]
        base = path.parent
        if "net-file" not in values:
            raise ScenarioError(f"sumocfg file {path}: no <net-file> in <input>")
        kwargs: dict[str, object] = {
            "net_file": _split_files(values["net-file"], base)[0],
            "route_files": _split_files(values.get("route-files", ""), base),
            "additional_files": _split_files(values.get("additional-files", ""), base),
            "sumocfg": path,
            "name": sumocfg_stem(path),
        }
        for option, key in (("begin", "begin"), ("end", "end"), ("step-length", "step_length")):
            if option in values:
                kwargs[key] = parse_time(values[option], what=f"sumocfg file {path}: <{option}>")
        if float(kwargs.get("end", -1)) < 0:  # SUMO's default -1: no end; an hour from begin here
            kwargs["end"] = float(kwargs.get("begin", 0.0)) + 3600.0
        if "seed" in values:
            try:
                kwargs["seed"] = int(values["seed"])
            except ValueError:
                raise ScenarioError(
                    f"sumocfg file {path}: <seed> {values['seed']!r} is not an integer"
                ) from None
        kwargs.update(overrides)
        return cls(**kwargs)  # type: ignore[arg-type]

    def replace(self, **changes: object) -> Scenario:
        """A copy with some fields changed (``scenario.replace(end=120)``)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ time windows
    def _check_inside(self, window: TimeWindow) -> None:
        if not isinstance(window, TimeWindow):
            raise ScenarioError(f"Scenario {self.name}: windows holds {window!r}, not a TimeWindow")
        if window.start < self.begin - _EPS or window.end > self.end + _EPS:
            span = TimeWindow(start=self.begin, seconds=self.end - self.begin)
            raise ScenarioError(
                f"Scenario {self.name}: window {window} lies outside the scenario's time span {span}"
            )

    def window(self, start: TimeValue | None = None, seconds: float | None = None) -> Scenario:
        """This scenario cut to one episode ``[start, start + seconds)``, which must lie inside
        its span (default start: ``begin``; default seconds: to ``end``)."""
        start = self.begin if start is None else start
        first = parse_time(start, what=f"Scenario {self.name}: window start")
        w = TimeWindow(start=first, seconds=self.end - first if seconds is None else seconds)
        self._check_inside(w)
        return self.replace(begin=w.start, end=w.end, windows=())

    def tile(self, seconds: float) -> tuple[float, ...]:
        """Starts of the back-to-back windows of ``seconds`` that fit in the span, from ``begin``."""
        if not seconds > 0:
            raise ScenarioError(f"Scenario {self.name}: episode seconds {seconds!r}, must be > 0")
        n = math.floor((self.end - self.begin) / seconds + _EPS)
        if n < 1:
            self._check_inside(TimeWindow(start=self.begin, seconds=seconds))  # raises
        return tuple(self.begin + i * seconds for i in range(n))

    def windowed(
        self, seconds: float, starts: Sequence[TimeValue] | Literal["auto"] | None = None
    ) -> Scenario:
        """Episodes of ``seconds``: one window at ``begin`` (``starts=None``: the same episodes as
        ``replace(end=begin + seconds)``), the windows tiling the span (``"auto"``), or windows at
        ``starts`` (any SUMO time form). One window gives that window's scenario; several give
        their hull as the span and ``windows`` set, so each episode of an env draws one."""
        if starts is None:
            return self.window(self.begin, seconds)
        if isinstance(starts, str):
            if starts != "auto":
                raise ScenarioError(f"Scenario {self.name}: windows {starts!r}: 'auto' or a list")
            starts = self.tile(seconds)
        found = sorted({parse_time(s, what=f"Scenario {self.name}: window start") for s in starts})
        if not found:
            raise ScenarioError(f"Scenario {self.name}: windows is empty")
        windows = tuple(TimeWindow(start=s, seconds=seconds) for s in found)
        for w in windows:
            self._check_inside(w)
        if len(windows) == 1:
            return self.window(found[0], seconds)
        return self.replace(begin=windows[0].start, end=max(w.end for w in windows),
                            windows=windows)  # fmt: skip

    def each_window(self) -> tuple[Scenario, ...]:
        """One scenario per episode window (evaluation runs every window), or ``(self,)``."""
        return tuple(self.window(w.start, w.seconds) for w in self.windows) or (self,)

    def describe_windows(self) -> str:
        """The episode windows in words, for logs and reports."""
        windows = self.windows or (TimeWindow(start=self.begin, seconds=self.end - self.begin),)
        return ", ".join(str(w) for w in windows)

    # ------------------------------------------------------------------ SUMO
    def with_routes(self, *route_files: str | Path) -> Scenario:
        """The same net, lights and options with other traffic: ``route_files`` replace the
        scenario's routes, a ``.sumocfg``'s own ``route-files`` included (``sumo_args`` passes
        them with ``-r``, which overrides the file's value). Additional files are kept."""
        if not route_files:
            raise ScenarioError(f"Scenario {self.name}: with_routes needs one or more route files")
        return self.replace(route_files=tuple(Path(p) for p in route_files))

    def sumo_args(self, *, seed: int | None = None) -> list[str]:
        """SUMO command-line options (without the binary) that load this scenario."""
        args: list[str] = []
        if self.sumocfg is not None:
            args += ["-c", str(self.sumocfg)]
        # explicit files override a config's values, so replace(route_files=...) also works there
        args += ["-n", str(self.net_file)]
        if self.route_files:
            args += ["-r", ",".join(str(p) for p in self.route_files)]
        if self.additional_files:
            args += ["-a", ",".join(str(p) for p in self.additional_files)]
        args += [
            "--begin",
            _seconds(self.begin),
            "--end",
            _seconds(self.end),
            "--step-length",
            _seconds(self.step_length),
            "--seed",
            str(self.seed if seed is None else int(seed)),
        ]
        return args + list(self.extra_args)
