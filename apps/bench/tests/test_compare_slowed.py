"""``--compare`` flags a deliberately slowed run, and does not flag a run compared with itself.

The slowed run sleeps ``SLEEP_MS`` inside every timed put and get (``cache.sleep_ms``), so each
operation takes at least that long: no rate of the slowed run can exceed 1000 / SLEEP_MS per
second. tj-data's in-memory LRUCache does a put or get in microseconds, so its rates fall by
100x or more by construction, whatever the machine's load: far outside the old run's spread.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

from tj_bench import Results

SLEEP_MS = 5.0
RATE_CAP = 1000 / SLEEP_MS  # operations per second with the sleep alone


def test_slowed_cache_run_is_flagged(
    tmp_path: Path, bench: Callable[..., CompletedProcess[str]]
) -> None:
    run_bench = bench
    old, new = tmp_path / "A", tmp_path / "B"
    base = run_bench("cache", "--quick", "--runs", "2", "--out", str(old))
    assert base.returncode == 0, base.stdout + base.stderr
    old_json = str(old / "results.json")

    slowed = run_bench("cache", "--quick", "--runs", "2", "--set", f"cache.sleep_ms={SLEEP_MS}",
                       "--compare", old_json, "--out", str(new))  # fmt: skip
    output = slowed.stdout + slowed.stderr
    assert slowed.returncode == 1, output
    flagged = [line for line in output.splitlines() if line.startswith("REGRESSED")]
    assert flagged, output
    assert "cache/lru/" in flagged[0], flagged[0]  # the figures slowed >= 100x by construction
    assert "| cache | lru/64KiB/puts_per_s (puts/s) |" in output and "**regressed**" in output

    result = Results.load(new / "results.json").suite("cache")
    assert result.params["sleep_ms"] == SLEEP_MS
    rates = [f for f in result.figures if f.unit in ("puts/s", "gets/s")]
    assert rates and all(f.max <= RATE_CAP for f in rates)  # every timed operation slept

    same = run_bench("compare", old_json, old_json)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "**regressed**" not in same.stdout
