"""Phase 3's trade-off picture: every evaluated policy at (mean delay, mean cost), the baselines'
frontier drawn, the limit drawn on the held-out panel; a policy without a cost (no safety
evaluation) is left out, not an error. The report's words: the frontier, who is dominated, r."""

from __future__ import annotations

from pathlib import Path

from tj_hybrid.phase3.report import frontier_lines, plot_tradeoff


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


def test_frontier_lines_name_the_frontier_the_dominated_and_the_correlation() -> None:
    summary = {name: {"avg_delay": _spread(d), "cost": _spread(c)}
               for name, d, c in (("phase3", 9.0, 3.0), ("phase2", 9.5, 58.0),
                                  ("max-occupancy", 8.7, 10.0), ("dz-protected", 8.8, 0.0),
                                  ("fixed-time", 27.0, 5.0))}  # fmt: skip
    summary["no-cost"] = {"avg_delay": _spread(12.0)}
    out = frontier_lines({"held_out": {"summary": summary}})
    assert len(out) == 1, out
    line = out[0]
    assert "max-occupancy (8.70 s, 10.0), dz-protected (8.80 s, 0.0)" in line  # fixed-time is off
    assert "phase3 dominated by dz-protected" in line
    assert "phase2 dominated by max-occupancy, dz-protected" in line
    assert "across the 5 policies: Pearson r = " in line
    assert frontier_lines({"held_out": {"summary": {"no-cost": {"avg_delay": _spread(1.0)}}}}) == []
