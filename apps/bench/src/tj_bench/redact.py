"""Take this machine's paths out of a results file before it is shared or committed.

The runner records the options it was given, and some are paths (``phase2.root``,
``env.sumo_rl_python``, the phase runs); a results file committed to docs/results or attached to
an issue should not carry a user's home or scratch folders. ``redact`` rewrites every string of
the file (settings, options, notes, errors; never figure names or values), each given path
replaced by its stand-in wherever it occurs, then the home folder by ``~``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tj_bench.results import Results

__all__ = ["parse_rule", "redact", "redact_file"]


def parse_rule(text: str) -> tuple[str, str]:
    """``"/scratch/runs=RUNS"`` -> ``("/scratch/runs", "RUNS")``."""
    old, sep, new = text.partition("=")
    if not sep or not old.strip():
        raise ValueError(f"{text!r}: expected PATH=STAND_IN, e.g. /scratch/runs=RUNS")
    return old.rstrip("/") or "/", new


def _walk(value: Any, rules: Sequence[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        for old, new in rules:
            value = value.replace(old, new)
        return value
    if isinstance(value, list):
        return [_walk(v, rules) for v in value]
    if isinstance(value, dict):
        return {k: (v if k in ("name", "values") else _walk(v, rules)) for k, v in value.items()}
    return value


def redact(data: dict[str, Any], rules: Sequence[tuple[str, str]], *,
           home: str | None = None) -> dict[str, Any]:  # fmt: skip
    """``data`` (a results file's JSON) with every rule applied to every string, the longest
    prefix first, then ``home`` -> ``~``."""
    ordered = sorted(rules, key=lambda r: len(r[0]), reverse=True)
    if home and home not in ("/", ""):
        ordered.append((home.rstrip("/"), "~"))
    return _walk(data, ordered)


def redact_file(src: Path, rules: Sequence[tuple[str, str]], *, output: Path | None = None,
                home: str | None = None) -> Path:  # fmt: skip
    """Rewrite ``src`` (or write ``output``): the result is loaded back, so a rule that broke
    the file is an error and nothing is written."""
    checked = Results.from_json(redact(json.loads(Path(src).read_text()), rules, home=home))
    return checked.save(output or src)
