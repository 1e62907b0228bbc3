"""The results format: round trip, derived statistics, validation of what is read back."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tj_bench import SCHEMA, Figure, Results, ResultsError, SuiteResult


def test_figure_statistics_ignore_unmeasured_values() -> None:
    f = Figure(name="read/mmap", unit="samples/s", better="higher", values=[3, math.nan, 1, 2])
    assert (f.median, f.min, f.max) == (2, 1, 3)
    empty = Figure(name="x", unit="s", values=[math.nan])
    assert math.isnan(empty.median) and empty.measured == []


def test_round_trip_keeps_everything_and_writes_strict_json(tmp_path: Path, make_results) -> None:
    suite = SuiteResult(suite="cache", params={"items": 4},
                        figures=[Figure(name="get", unit="ms", better="lower", values=[1.0, math.nan]),
                                 Figure(name="bytes", unit="B", values=[10])],
                        notes=["n"], unavailable={"diskcache": "not installed"},
                        artifacts=["cache.png"], wall_s=1.5)  # fmt: skip
    path = make_results(suite).save(tmp_path / "r.json")
    raw = json.loads(path.read_text())  # strict JSON: NaN became null
    assert raw["schema"] == SCHEMA and raw["suites"][0]["figures"][0]["values"] == [1.0, None]
    assert raw["suites"][0]["figures"][0]["median"] == 1.0
    back = Results.load(path)
    assert back.to_json() == make_results(suite).to_json()
    assert back.suite("cache").figure("get").unit == "ms"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not JSON"),
        ('{"schema": "other/1"}', "schema"),
        (json.dumps({"schema": SCHEMA, "machine": {}}), "malformed"),
        (json.dumps([1, 2]), "schema"),
    ],
)
def test_load_rejects_bad_files_with_the_reason(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ResultsError, match=message):
        Results.load(path)


def test_invalid_figure_and_status_are_refused() -> None:
    with pytest.raises(ValueError, match="better"):
        Figure(name="x", unit="s", better="faster")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="status"):
        SuiteResult(suite="x", status="maybe")  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="no figure"):
        SuiteResult(suite="x").figure("y")
