"""Phase 3's trade-off picture: every evaluated policy at (mean delay, mean cost), the limit drawn on
the held-out panel; a policy without a cost (no safety evaluation) is left out, not an error."""

from __future__ import annotations

from pathlib import Path

from tj_hybrid.phase3.report import plot_tradeoff


def _spread(mean: float) -> dict[str, float]:
    return {"mean": mean, "std": 1.0, "min": mean - 1, "max": mean + 1, "n": 4}


def test_plot_tradeoff_draws_each_policy_and_the_limit(tmp_path: Path) -> None:
    summary = {name: {"avg_delay": _spread(d), "cost": _spread(c)}
               for name, d, c in (("phase3", 9.0, 53.0), ("phase2", 9.5, 58.0),
                                  ("fixed-time", 27.0, 118.0))}  # fmt: skip
    summary["no-cost"] = {"avg_delay": _spread(12.0)}
    evaluation = {"held_out": {"summary": summary}, "held_out_heavy": {"summary": summary}}
    out = plot_tradeoff(evaluation, tmp_path / "tradeoff.png", cost_limit=35.0)
    assert out == tmp_path / "tradeoff.png" and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_tradeoff({"held_out": {"summary": {}}}, tmp_path / "empty.png") is None
    assert not (tmp_path / "empty.png").exists()
