"""SUMO's gap-based actuated control built from a net by netconvert, cached per (net, options);
and the same rebuilt plans as static programs, for controllers that switch the greens themselves.

netconvert keeps the light types of a loaded ``.net.xml`` unless it rebuilds their plans:
``--tls.rebuild`` rebuilds every plan and ``--tls.default-type actuated`` makes them actuated
(phases with ``minDur`` / ``maxDur`` from ``--tls.min-dur`` / ``--tls.max-dur``; with
``tls_type="static"`` fixed-time programs of the same phases). SUMO places the
actuation detectors itself when it loads such a net and extends a green while vehicles pass them
within the max gap (SUMO's defaults: max-gap 3 s, detector-gap 2 s; ``sumo --tls.actuated.*``
options tune them). A converted net is written atomically under the cache directory, named by the
source net's sha256 and a digest of the options and SUMO version, and reused when it parses.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from tj_monitor import AtomicPath, atomic_write_text
from tj_rl.env.errors import ScenarioError
from tj_rl.env.runtime import SUMO_VERSION, sumo_binary
from tj_rl.env.scenario import check_xml, open_xml
from tj_rl.traffic.demand import Runner, run_command

if TYPE_CHECKING:
    from tj_rl.env.scenario import Scenario

__all__ = [
    "ActuatedSpec",
    "actuated_net",
    "default_cache_dir",
    "file_sha256",
    "rebuilt_plans",
    "tls_types",
    "without_programs",
]

_FORMAT = 1  # bump when the conversion changes in a way the key does not capture
_PROGRAM_TAGS = frozenset({"tlLogic", "WAUT"})  # what makes an additional file replace a program


@dataclass(frozen=True, kw_only=True)
class ActuatedSpec:
    """netconvert's options for the rebuilt plans (defaults: netconvert's own, 5 s and 50 s).

    ``tls_type``: ``actuated`` (SUMO extends the greens: ``sumo-actuated``) or ``static`` (the
    same phases as a fixed-time program: what a controller that picks the greens switches)."""

    min_dur: int = 5  # --tls.min-dur: shortest green of an actuated phase, s
    max_dur: int = 50  # --tls.max-dur: longest green, s
    extra_args: tuple[str, ...] = ()  # more netconvert options (e.g. "--tls.layout=incoming")
    tls_type: Literal["actuated", "static"] = "actuated"  # --tls.default-type

    def __post_init__(self) -> None:
        if self.tls_type not in ("actuated", "static"):
            raise ValueError(f"ActuatedSpec.tls_type: {self.tls_type!r}, one of actuated, static")
        for name in ("min_dur", "max_dur"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ActuatedSpec.{name}: {value!r}, need an int >= 1 (seconds)")
        if self.min_dur > self.max_dur:
            raise ValueError(f"ActuatedSpec: min_dur {self.min_dur} > max_dur {self.max_dur}")
        object.__setattr__(self, "extra_args", tuple(str(a) for a in self.extra_args))

    def options(self) -> list[str]:
        """The netconvert options, without input and output."""
        return ["--tls.rebuild", "--tls.default-type", self.tls_type,
                "--tls.min-dur", str(self.min_dur), "--tls.max-dur", str(self.max_dur),
                *self.extra_args]  # fmt: skip

    def describe(self) -> str:
        return "netconvert " + " ".join(self.options())


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/tj-rl/nets`` (``~/.cache/tj-rl/nets``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tj-rl" / "nets"


def file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".xml", ".net"):
        name = name.removesuffix(suffix)
    return name or "net"


def actuated_net(
    net: str | Path,
    *,
    spec: ActuatedSpec | None = None,
    cache_dir: str | Path | None = None,
    runner: Runner | None = None,
) -> Path:
    """``net`` with every light's plan rebuilt by netconvert as ``spec`` says (actuated by
    default; converted once, then read from the cache)."""
    net, spec = Path(net).resolve(), spec or ActuatedSpec()
    if not net.is_file():
        raise ScenarioError(f"net file not found: {net}")
    sha = file_sha256(net)
    key = {"format": _FORMAT, "sumo": SUMO_VERSION, "net_sha256": sha, **dataclasses.asdict(spec)}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / f"{_stem(net)}-{sha[:16]}-{spec.tls_type}-{digest}.net.xml"
    if target.is_file():
        try:
            check_xml(target, "net")
            return target
        except ScenarioError:
            pass  # damaged: convert again below
    target.parent.mkdir(parents=True, exist_ok=True)
    out = AtomicPath(target, fsync=False)  # a cache: atomic, not worth an fsync
    try:
        cmd = [sumo_binary("netconvert"), "--sumo-net-file", str(net), "--output-file",
               str(out.tmp), "--no-warnings", *spec.options()]  # fmt: skip
        (runner or run_command)(cmd, out.tmp.parent)
        check_xml(out.tmp, "net")
        return out.publish()
    finally:
        out.discard()


def tls_types(net: str | Path) -> dict[str, str]:
    """Each light's program type in a net file (``{"A0": "actuated"}``; the last program wins)."""
    out: dict[str, str] = {}
    with open_xml(Path(net)) as stream:
        for _, elem in ET.iterparse(stream, events=("end",)):
            if elem.tag == "tlLogic":
                out[elem.get("id", "")] = elem.get("type", "static")
            elem.clear()
    return out


def without_programs(
    files: Sequence[Path], cache_dir: str | Path | None = None, *, keep_one: bool = False
) -> tuple[Path, ...]:
    """``files`` (additional files) without the signal programs they would load over a net's own
    (``<tlLogic>``, ``<WAUT>``): a file holding only programs (or one, as its root) is dropped, a
    file mixing them with other elements is replaced by a copy without them in the cache
    (relative paths inside it then start from the cache). ``keep_one``: when nothing is left, an empty additional file (a
    ``.sumocfg`` that names additional files needs ``-a`` to name at least one)."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    kept: list[Path] = []
    for path in files:
        with open_xml(path) as stream:
            tree = ET.parse(stream)
        if tree.getroot().tag in _PROGRAM_TAGS:  # SUMO takes a lone <tlLogic> as the root
            continue
        children = list(tree.getroot())
        programs = [c for c in children if c.tag in _PROGRAM_TAGS]
        if not programs:
            kept.append(path)
        elif len(programs) < len(children):
            for c in programs:
                tree.getroot().remove(c)
            copy = root / f"{_stem(path)}-{file_sha256(path)[:16]}-no-programs.add.xml"
            atomic_write_text(copy, ET.tostring(tree.getroot(), encoding="unicode"))
            kept.append(copy)
    if not kept and keep_one:
        empty = root / "empty.add.xml"
        if not empty.is_file():
            atomic_write_text(empty, "<additional/>\n")
        kept.append(empty)
    return tuple(kept)


def rebuilt_plans(scenario: Scenario, *, spec: ActuatedSpec | None = None,
                  cache_dir: str | Path | None = None) -> Scenario:  # fmt: skip
    """``scenario`` on its net with netconvert's rebuilt plans (``spec``: actuated by default) and
    without the programs its additional files would load over them; routes and windows kept."""
    net = actuated_net(scenario.net_file, spec=spec, cache_dir=cache_dir)
    own = scenario.additional_files  # with a .sumocfg, -a must still name one file
    extra = without_programs(own, cache_dir, keep_one=bool(own and scenario.sumocfg))
    return scenario.replace(net_file=net, additional_files=extra)
