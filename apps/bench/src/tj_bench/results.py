"""The results format: one JSON file per run of the runner.

A run holds the machine it ran on, the versions and commit, and one ``SuiteResult`` per suite. A
suite's measurements are ``Figure`` s: a named quantity with its unit, which direction is better,
and one value per repetition (``--runs``), from which the median, min and max are derived. Figures
with ``better=None`` are facts (bytes on disk, a chosen setting), not compared as regressions.

The file is plain JSON (``SCHEMA`` names its version; a value not measured is ``null``) so that
other tools can read it; the classes are pydantic dataclasses, so ``Results.load`` validates what
it reads and says what is wrong.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import field
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BeforeValidator, TypeAdapter, ValidationError, computed_field
from pydantic.dataclasses import dataclass

from tj_monitor import atomic_write_text

__all__ = ["SCHEMA", "Figure", "Results", "ResultsError", "Status", "SuiteResult"]

SCHEMA = "tj-bench/1"
Status = Literal["ok", "failed", "unavailable"]
T = TypeVar("T")
# a repetition's value; JSON's null (not measured) is NaN here
Value = Annotated[float, BeforeValidator(lambda v: math.nan if v is None else v)]


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
    values: list[Value] = field(default_factory=list)
    note: str = ""

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.strip():
            raise ValueError(f"figure name: must be a non-empty string, got {self.name!r}")

    @property
    def measured(self) -> list[float]:
        return [v for v in self.values if not math.isnan(v)]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def median(self) -> float:
        vals = self.measured
        return statistics.median(vals) if vals else math.nan

    @computed_field  # type: ignore[prop-decorator]
    @property
    def min(self) -> float:
        return min(self.measured, default=math.nan)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def max(self) -> float:
        return max(self.measured, default=math.nan)


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

    def figure(self, name: str) -> Figure:
        return _named(self.figures, "name", name, f"suite {self.suite} has no figure {name!r}")


@dataclass(kw_only=True)
class Results:
    """One run of the runner: machine, versions, options and suite results."""

    machine: dict[str, Any]
    versions: dict[str, str]
    commit: str | None = None
    created: str
    runs: int
    quick: bool
    options: dict[str, str] = field(default_factory=dict)
    suites: list[SuiteResult] = field(default_factory=list)

    def suite(self, name: str) -> SuiteResult:
        have = [s.suite for s in self.suites]
        return _named(self.suites, "suite", name, f"no suite {name!r} in these results (have: {have})")

    def to_json(self) -> dict[str, Any]:
        """The file's content (NaN as null)."""
        return {"schema": SCHEMA, **json.loads(_ADAPTER.dump_json(self))}

    def save(self, path: Path) -> Path:
        """Write atomically (a killed run never leaves half a file)."""
        atomic_write_text(path, json.dumps(self.to_json(), indent=1, allow_nan=False) + "\n")
        return path

    @classmethod
    def from_json(cls, d: Any) -> Results:
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            found = d.get("schema") if isinstance(d, dict) else type(d).__name__
            raise ResultsError(f"not a {SCHEMA} results file (schema: {found!r})")
        try:
            return _ADAPTER.validate_python(d)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ResultsError(f"malformed results: {where}: {err['msg']}") from None

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


_ADAPTER = TypeAdapter(Results)
