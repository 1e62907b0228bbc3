"""The results format: one JSON file per run of the runner.

A run holds the machine it ran on, the versions and commit, and one ``SuiteResult`` per suite. A
suite's measurements are ``Figure`` s: a named quantity with its unit, which direction is better,
and one value per repetition (``--runs``), from which the median, min and max are derived. Figures
with ``better=None`` are facts (bytes on disk, a chosen setting), not compared as regressions.

The file is plain JSON (``SCHEMA`` names its version) so that other tools can read it;
``Results.load`` validates what it reads and says what is wrong.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from tj_monitor import atomic_write_text

__all__ = ["SCHEMA", "Figure", "Results", "ResultsError", "Status", "SuiteResult"]

SCHEMA = "tj-bench/1"
Status = Literal["ok", "failed", "unavailable"]
_BETTER = ("lower", "higher", None)
_STATUS = ("ok", "failed", "unavailable")
T = TypeVar("T")


def _named(items: list[T], attr: str, name: str, missing: str) -> T:
    """The first of ``items`` whose ``attr`` is ``name``; KeyError(``missing``) if none is."""
    for item in items:
        if getattr(item, attr) == name:
            return item
    raise KeyError(missing)


class ResultsError(ValueError):
    """A results file that is not what this version of tj-bench writes."""


@dataclass(kw_only=True)
class Figure:
    """One measured quantity: ``values`` holds one number per repetition (NaN: not measured)."""

    name: str
    unit: str
    better: Literal["lower", "higher"] | None = None
    values: list[float] = field(default_factory=list)
    note: str = ""

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.strip():
            raise ValueError(f"figure name: must be a non-empty string, got {self.name!r}")
        if self.better not in _BETTER:
            raise ValueError(f"figure {self.name}: better must be lower, higher or None")
        self.values = [float(v) for v in self.values]

    @property
    def measured(self) -> list[float]:
        return [v for v in self.values if not math.isnan(v)]

    @property
    def median(self) -> float:
        vals = self.measured
        return statistics.median(vals) if vals else math.nan

    @property
    def min(self) -> float:
        return min(self.measured, default=math.nan)

    @property
    def max(self) -> float:
        return max(self.measured, default=math.nan)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["values"] = [None if math.isnan(v) else v for v in self.values]
        out["median"], out["min"], out["max"] = (
            None if math.isnan(x) else x for x in (self.median, self.min, self.max)
        )
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Figure:
        values = [math.nan if v is None else v for v in d.get("values", [])]
        return cls(name=d["name"], unit=d.get("unit", ""), better=d.get("better"),
                   values=values, note=d.get("note", ""))  # fmt: skip


@dataclass(kw_only=True)
class SuiteResult:
    """What one suite measured, or why it did not (``status`` and ``error``)."""

    suite: str
    status: Status = "ok"
    params: dict[str, Any] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)  # part -> why it was not measured
    artifacts: list[str] = field(default_factory=list)  # PNGs etc., relative to the results file
    error: str = ""
    wall_s: float = 0.0

    def __post_init__(self) -> None:
        if self.status not in _STATUS:
            raise ValueError(f"suite {self.suite}: status must be one of {_STATUS}")

    def figure(self, name: str) -> Figure:
        return _named(self.figures, "name", name, f"suite {self.suite} has no figure {name!r}")

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["figures"] = [f.to_json() for f in self.figures]
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SuiteResult:
        return cls(
            suite=d["suite"], status=d.get("status", "ok"), params=d.get("params", {}),
            figures=[Figure.from_json(f) for f in d.get("figures", [])],
            notes=list(d.get("notes", [])), unavailable=dict(d.get("unavailable", {})),
            artifacts=list(d.get("artifacts", [])), error=d.get("error", ""),
            wall_s=float(d.get("wall_s", 0.0)),
        )  # fmt: skip


@dataclass(kw_only=True)
class Results:
    """One run of the runner: machine, versions, options and suite results."""

    machine: dict[str, Any]
    versions: dict[str, str]
    commit: str | None
    created: str
    runs: int
    quick: bool
    options: dict[str, str] = field(default_factory=dict)
    suites: list[SuiteResult] = field(default_factory=list)

    def suite(self, name: str) -> SuiteResult:
        have = [s.suite for s in self.suites]
        return _named(self.suites, "suite", name, f"no suite {name!r} in these results (have: {have})")

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["suites"] = [s.to_json() for s in self.suites]
        return {"schema": SCHEMA, **out}

    def save(self, path: Path) -> Path:
        """Write atomically (a killed run never leaves half a file)."""
        atomic_write_text(path, json.dumps(self.to_json(), indent=1, allow_nan=False) + "\n")
        return path

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Results:
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            found = d.get("schema") if isinstance(d, dict) else type(d).__name__
            raise ResultsError(f"not a {SCHEMA} results file (schema: {found!r})")
        try:
            return cls(
                machine=dict(d["machine"]), versions=dict(d["versions"]), commit=d.get("commit"),
                created=str(d["created"]), runs=int(d["runs"]), quick=bool(d["quick"]),
                options=dict(d.get("options", {})),
                suites=[SuiteResult.from_json(s) for s in d["suites"]],
            )  # fmt: skip
        except (KeyError, TypeError, ValueError) as exc:
            raise ResultsError(f"malformed results: {type(exc).__name__}: {exc}") from exc

    @classmethod
    def load(cls, path: Path) -> Results:
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as exc:
            raise ResultsError(f"{path}: not JSON ({exc})") from exc
        try:
            return cls.from_json(data)
        except ResultsError as exc:
            raise ResultsError(f"{path}: {exc}") from exc
