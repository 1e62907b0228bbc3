"""What a suite is and what it gets: ``Suite`` (a name and a ``run(ctx)`` function) and
``SuiteContext`` (size, repetitions, a work folder, options, and the calls that record figures).

A suite module defines ``SUITE = Suite(...)``. Its ``run`` measures through the packages' public
APIs and records with ``ctx.record``; it calls ``ctx.unavailable(part, why)`` for a part the
machine cannot run (no CUDA, no sumo-rl environment) and goes on, or raises ``Unavailable`` when
nothing of it can run. Any other exception marks the suite failed; the runner goes on with the
next suite either way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from tj_bench.results import Figure, SuiteResult

__all__ = [
    "SizedOptions", "Suite", "SuiteContext", "Unavailable", "parse_counts", "parse_list",
    "sized_help",
]  # fmt: skip

T = TypeVar("T")

# option -> (default, default under --quick, what it does): a suite whose size options differ
# between a full and a quick run declares them once, for ``ctx.sized_options`` and ``--list``
SizedOptions = dict[str, tuple[Any, Any, str]]


def sized_help(table: SizedOptions) -> dict[str, str]:
    """``Suite.options`` (option -> help) of a ``SizedOptions`` table, with both defaults."""
    return {k: f"{what} (default {d}; quick {q})" for k, (d, q, what) in table.items()}


def parse_list(raw: str, allowed: Sequence[str], what: str) -> tuple[str, ...]:
    """``"a,b"`` -> ``("a", "b")``: comma-separated, each in ``allowed``, none twice."""
    items = tuple(x.strip() for x in raw.split(",") if x.strip())
    if not items:
        raise ValueError(f"{what}: at least one of {', '.join(allowed)}")
    bad = [x for x in items if x not in allowed]
    if bad:
        raise ValueError(f"{what}: unknown {bad}; choose from {', '.join(allowed)}")
    if len(set(items)) != len(items):
        raise ValueError(f"{what}: listed twice in {raw!r}")
    return items


def parse_counts(raw: str, what: str, minimum: int = 1) -> list[int]:
    """``"64,256"`` -> ``[64, 256]``: comma-separated integers >= ``minimum``, none twice."""
    try:
        counts = [int(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{what}={raw!r}: expected comma-separated integers") from None
    if not counts or min(counts) < minimum or len(set(counts)) != len(counts):
        raise ValueError(f"{what}={raw!r}: expected distinct integers >= {minimum}")
    return counts


class Unavailable(RuntimeError):
    """The suite cannot run on this machine (the message says what is missing)."""


@dataclass(frozen=True, kw_only=True)
class Suite:
    """A named measurement: ``run(ctx)`` records figures into ``ctx``."""

    name: str
    summary: str
    run: Callable[[SuiteContext], None]
    options: dict[str, str] = field(default_factory=dict)  # option -> what it does (for --help)

    def __post_init__(self) -> None:
        if not self.name.isidentifier() and not self.name.replace("-", "_").isidentifier():
            raise ValueError(f"suite name: not an identifier: {self.name!r}")


def _convert(raw: str, default: Any) -> Any:
    """``raw`` as the type of ``default`` (pydantic's string rules: "true", "on", "1" for bools)."""
    from pydantic import TypeAdapter, ValidationError

    try:
        return TypeAdapter(type(default)).validate_strings(raw)
    except ValidationError as exc:
        raise ValueError(exc.errors()[0]["msg"]) from None


@dataclass(kw_only=True)
class SuiteContext:
    """Everything a suite's ``run`` gets from the runner (picklable: a suite's process gets it).

    - ``quick``: the smallest size (CI checks that the suite runs; numbers mean little);
    - ``runs``: repetitions for the median / min / max (``repetitions()`` iterates them);
    - ``workdir``: an empty folder for generated data (deleted after the suite unless ``--keep``);
    - ``out_dir``: where artifacts (PNGs) go, next to the results file;
    - ``option(key, default)``: ``--set SUITE.key=value`` converted to the default's type;
    - ``shared`` / ``shared_dir``: a dict and a folder shared by the suites of one run, deleted
      at its end unless ``--keep`` (the phase suites hand their run folder on through them);
    - ``progress(iterable, description)``: wraps long loops in ``track``, the runner's progress
      bars (tj-monitor's ``track_progress``), when it has them.
    """

    suite: str
    quick: bool
    runs: int
    workdir: Path
    out_dir: Path
    shared_dir: Path | None = None  # None: workdir
    options: dict[str, str] = field(default_factory=dict)
    shared: dict[str, Any] = field(default_factory=dict)
    track: Callable[[Iterable[Any], str, int | None], Iterable[Any]] | None = None
    result: SuiteResult = field(init=False)
    _used: set[str] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        if self.runs < 1:
            raise ValueError(f"runs: must be >= 1, got {self.runs}")
        self.shared_dir = self.workdir if self.shared_dir is None else self.shared_dir
        self.result = SuiteResult(suite=self.suite)

    # ---- inputs ----------------------------------------------------------------------------
    def option(self, key: str, default: T) -> T:
        """``--set SUITE.key=value`` as the type of ``default``; ``default`` when not given."""
        self._used.add(key)
        raw = self.options.get(key)
        if raw is None:
            return default
        try:
            return _convert(raw, default)
        except ValueError as exc:
            raise ValueError(f"--set {self.suite}.{key}={raw}: {exc}") from None

    def sized_options(self, table: SizedOptions) -> dict[str, Any]:
        """Every option of ``table`` (its quick default under ``--quick``), each also recorded as a
        setting of the results."""
        out = {}
        for key, (default, quick, _) in table.items():
            out[key] = self.option(key, quick if self.quick else default)
            self.param(key, out[key])
        return out

    def choices(self, key: str, default: str, allowed: Sequence[str]) -> tuple[str, ...]:
        """A comma-separated option, each item one of ``allowed`` (``parse_list``)."""
        return parse_list(self.option(key, default), allowed, f"{self.suite}.{key}")

    def unused_options(self) -> list[str]:
        return sorted(set(self.options) - self._used)

    @property
    def cuda(self) -> bool:
        """Whether a CUDA device is usable here (imports torch)."""
        import torch

        return bool(torch.cuda.is_available())

    def progress(self, items: Iterable[T], description: str, total: int | None = None) -> Iterable[T]:
        if self.track is None:
            return items
        if total is None and hasattr(items, "__len__"):
            total = len(items)  # type: ignore[arg-type]
        return self.track(items, f"{self.suite}: {description}", total)

    def repetitions(self, description: str = "runs") -> Iterator[int]:
        """``range(runs)`` with progress: interleave the compared cases inside each repetition."""
        yield from self.progress(range(self.runs), description, self.runs)

    # ---- outputs ---------------------------------------------------------------------------
    def param(self, key: str, value: Any) -> None:
        """A setting of this measurement (size, batch size...), shown with its results."""
        self.result.params[key] = value

    def record(
        self,
        name: str,
        value: float,
        *,
        unit: str,
        better: Literal["lower", "higher"] | None = None,
        note: str = "",
    ) -> None:
        """Append one repetition's value to figure ``name`` (created on first use)."""
        value = float(value)
        for fig in self.result.figures:
            if fig.name == name:
                if fig.unit != unit or fig.better != better:
                    raise ValueError(f"figure {name}: recorded with unit/better {unit}/{better}, "
                                     f"first with {fig.unit}/{fig.better}")  # fmt: skip
                fig.values.append(value)
                if note and note not in fig.note:
                    fig.note = f"{fig.note}; {note}" if fig.note else note
                return
        self.result.figures.append(
            Figure(name=name, unit=unit, better=better, values=[value], note=note)
        )

    def record_missing(self, name: str, *, unit: str, why: str) -> None:
        """A figure that could not be measured here (NaN), with the reason as its note."""
        self.record(name, math.nan, unit=unit, note=why)

    def note(self, text: str) -> None:
        self.result.notes.append(text)

    def unavailable(self, part: str, why: str) -> None:
        """A part of the suite that this machine cannot run; the rest goes on."""
        self.result.unavailable[part] = why

    def artifact(self, path: Path) -> None:
        """A file the suite wrote under ``out_dir`` (a PNG), listed with its results."""
        path = Path(path)
        try:
            rel = path.resolve().relative_to(self.out_dir.resolve())
        except ValueError:
            raise ValueError(f"artifact {path} is not under {self.out_dir}") from None
        self.result.artifacts.append(str(rel))
