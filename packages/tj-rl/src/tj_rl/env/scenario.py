"""A SUMO scenario: net, routes (or a ``.sumocfg``), time window, step length, seed, controlled lights.

``Scenario`` only describes files and options; it never starts SUMO. Files are checked when the
scenario is made (exists, well-formed XML with the expected root element), so that a bad path fails
here with the file's name rather than deep inside SUMO.
"""

from __future__ import annotations

import dataclasses
import gzip
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from xml.parsers import expat

from tj_rl.env.errors import ScenarioError

__all__ = ["Scenario", "open_xml"]

_ROOTS: dict[str, tuple[str, ...] | None] = {
    "net": ("net",),
    "route": ("routes", "additional"),
    "additional": None,  # SUMO reads any root here (<additional>, <tlLogics>, <routes>, ...)
    "sumocfg": ("configuration", "sumoConfiguration"),
}


def open_xml(path: Path) -> IO[bytes]:
    """Plain or gzip-compressed XML (SUMO reads ``.xml.gz`` transparently)."""
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def _check_xml(path: Path, kind: str) -> None:
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


def _split_files(value: str, base: Path) -> tuple[Path, ...]:
    parts = [p for p in value.replace(",", " ").split() if p]
    return tuple((base / p).resolve() for p in parts)


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """Files and options of one SUMO scenario.

    Either ``net_file`` (+ ``route_files``) or ``sumocfg`` (which names them) must be given. With a
    ``sumocfg`` SUMO is started with ``-c`` so every option in it applies; ``begin``, ``end``,
    ``step_length`` and the seed given here override the file's values.
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

    def __post_init__(self) -> None:
        object.__setattr__(self, "net_file", Path(self.net_file).resolve())
        object.__setattr__(self, "route_files", tuple(Path(p).resolve() for p in self.route_files))
        object.__setattr__(
            self, "additional_files", tuple(Path(p).resolve() for p in self.additional_files)
        )
        if self.sumocfg is not None:
            object.__setattr__(self, "sumocfg", Path(self.sumocfg).resolve())
            _check_xml(self.sumocfg, "sumocfg")
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
        _check_xml(self.net_file, "net")
        for p in self.route_files:
            _check_xml(p, "route")
        for p in self.additional_files:
            _check_xml(p, "additional")

    @classmethod
    def from_sumocfg(cls, path: str | Path, **overrides: object) -> Scenario:
        """Load a standard ``.sumocfg`` (any SUMO scenario, real-city nets included).

        Reads net, route and additional files, begin/end, step length and seed from the file; keyword
        arguments override them (``tls_ids=("J1", "J7")`` to control a subset of the lights).
        """
        path = Path(path).resolve()
        _check_xml(path, "sumocfg")
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError as exc:  # pragma: no cover - caught by _check_xml's start parse mostly
            raise ScenarioError(f"sumocfg file {path}: malformed XML ({exc})") from exc
        values: dict[str, str] = {}
        for section in root:
            for opt in section:
                if "value" in opt.attrib:
                    values[opt.tag] = opt.attrib["value"]
        base = path.parent
        if "net-file" not in values:
            raise ScenarioError(f"sumocfg file {path}: no <net-file> in <input>")
        kwargs: dict[str, object] = {
            "net_file": _split_files(values["net-file"], base)[0],
            "route_files": _split_files(values.get("route-files", ""), base),
            "additional_files": _split_files(values.get("additional-files", ""), base),
            "sumocfg": path,
            "name": path.name.removesuffix(".sumocfg"),
        }
        try:
            if "begin" in values:
                kwargs["begin"] = float(values["begin"])
            if "end" in values:
                kwargs["end"] = float(values["end"])
            if "step-length" in values:
                kwargs["step_length"] = float(values["step-length"])
            if "seed" in values:
                kwargs["seed"] = int(values["seed"])
        except ValueError as exc:
            raise ScenarioError(f"sumocfg file {path}: bad time or seed value ({exc})") from exc
        kwargs.update(overrides)
        return cls(**kwargs)  # type: ignore[arg-type]

    def replace(self, **changes: object) -> Scenario:
        """A copy with some fields changed (``scenario.replace(end=120)``)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

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
            f"{self.begin:g}",
            "--end",
            f"{self.end:g}",
            "--step-length",
            f"{self.step_length:g}",
            "--seed",
            str(self.seed if seed is None else int(seed)),
        ]
        return args + list(self.extra_args)
