"""Phase 3's exported policy chosen on validation (``tj_hybrid.phase3.select``): the rule on
hand-made scores, and a resumed choice that scores nothing again and exports the chosen agent."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from tj_hybrid.config import HybridConfig
from tj_hybrid.config.phase3 import GuardSection, Phase3Section
from tj_hybrid.phase3.select import (
    _kept_scores,
    candidate_dir,
    choose,
    saved_candidates,
    select_policy,
)
from tj_hybrid.run_dir import PhaseDir


def test_the_lowest_delay_within_the_limit_wins() -> None:
    scores = {0: (10.0, 5.0), 2: (9.0, 4.0), 4: (8.0, 6.0), 6: (8.5, 3.0)}
    choice = choose(scores, limit=4.5)
    assert choice.iteration == 6 and choice.within and choice.point == (8.5, 3.0)
    assert "iteration 6" in choice.line and "2 of 4 candidates within the limit" in choice.line
    assert choice.scores == scores
    # a limit at a candidate's cost holds it (at most the limit)
    assert choose(scores, limit=6.0).iteration == 4


def test_none_within_the_limit_takes_the_lowest_cost() -> None:
    choice = choose({0: (10.0, 5.0), 2: (8.0, 7.0), 4: (9.0, 4.5)}, limit=1.0)
    assert choice.iteration == 4 and not choice.within
    assert "none of the 3 candidates is within the cost limit 1.00" in choice.line


def test_phase2_is_chosen_when_no_checkpoint_beats_it() -> None:
    choice = choose({0: (8.0, 2.0), 2: (8.5, 1.0), 4: (9.0, 2.5)}, limit=3.0)
    assert choice.iteration == 0 and choice.within
    assert choice.line.startswith("exported phase 2's policy (iteration 0)")
    # phase 2 within, every phase-3 checkpoint outside: phase 2, however slow
    assert choose({0: (12.0, 2.0), 2: (7.0, 9.0)}, limit=3.0).iteration == 0


def test_candidates_slower_than_the_bound_never_compete() -> None:
    """Phase 3 keeps phase 2's gain: a checkpoint more than the slack slower than phase 2 is left
    out, within the limit or not; with none left out the rule is unchanged."""
    # the cheap checkpoint is 12% slower than phase 2: phase 2 stays
    choice = choose({0: (8.0, 5.0), 2: (9.0, 1.0)}, limit=0.5, max_delay=8.4)
    assert choice.iteration == 0 and not choice.within
    assert "1 slower than 8.40 s left out" in choice.line and set(choice.scores) == {0, 2}
    # within the limit but too slow: left out as well
    assert choose({0: (8.0, 5.0), 2: (10.0, 0.0)}, limit=1.0, max_delay=8.4).iteration == 0
    # a checkpoint inside the bound still wins on cost
    assert choose({0: (8.0, 5.0), 2: (8.3, 2.0), 4: (9.5, 0.0)}, limit=1.0,
                  max_delay=8.4).iteration == 2  # fmt: skip
    assert choose({0: (10.0, 5.0), 4: (9.0, 4.5)}, limit=1.0, max_delay=10.5).iteration == 4


def test_ties_go_to_the_lower_cost_then_the_earlier_iteration() -> None:
    assert choose({0: (8.0, 2.0), 2: (8.0, 1.0)}, limit=3.0).iteration == 2
    assert choose({0: (8.0, 2.0), 2: (8.0, 2.0), 4: (8.0, 2.0)}, limit=3.0).iteration == 0
    # none within: equal costs go to the lower delay, then the earlier iteration
    assert choose({0: (9.0, 5.0), 2: (8.0, 5.0), 4: (8.0, 5.0)}, limit=1.0).iteration == 2


def test_an_unscored_candidate_is_never_preferred() -> None:
    nan = math.nan
    assert choose({0: (9.0, 2.0), 2: (nan, 1.0), 4: (8.0, nan)}, limit=3.0).iteration == 0
    assert choose({0: (9.0, 5.0), 2: (nan, nan)}, limit=1.0).iteration == 0
    with pytest.raises(ValueError, match="no candidates"):
        choose({}, limit=1.0)


def test_select_is_validated() -> None:
    assert Phase3Section().select == "best"
    with pytest.raises(ValueError, match="select: 'best' or 'last'"):
        Phase3Section(select="first")  # type: ignore[arg-type]


def _agent(seed: int, folder: Path) -> Path:
    import torch

    from tj_models import TrafficAgent, TrafficAgentConfig

    torch.manual_seed(seed)
    return TrafficAgent(TrafficAgentConfig.preset("tiny", max_actions=4)).save(folder)


def test_a_resumed_choice_scores_nothing_again_and_exports_the_chosen_agent(tmp_path: Path) -> None:
    """Every candidate already scored (phase 2 by ``limit.json``, the checkpoints by
    ``scores.json`` with their checksums): no simulation (no RL setup is given), and the exported
    agent is the chosen candidate's weights."""
    from safetensors.torch import load_file

    cfg = _guarded(HybridConfig(), "none")
    pdir = PhaseDir(root=tmp_path / "phase3").create()
    phase2 = _agent(0, tmp_path / "phase2" / "agent")
    for it in (2, 4):
        _agent(it, candidate_dir(pdir, it))
    assert list(saved_candidates(pdir)) == [2, 4]
    weights = {k: float(v) for k, v in cfg.phase3.cost_weights.items()}
    (pdir.root / "limit.json").write_text(json.dumps(
        {"cost_weights": weights, "points": {"phase2": [9.0, 3.0], "max-pressure": [8.0, 4.0]}}))
    how = {"cost_weights": weights, "shield_threshold": None,
           "guard": {"rule": "none", "max_extensions": 2},
           "route_seeds": cfg.phase2.validation.route_seeds,
           "sumo_seeds": cfg.phase2.validation.sumo_seeds}  # fmt: skip
    sums = {it: json.loads((candidate_dir(pdir, it) / "config.json").read_text())["weights_sha256"]
            for it in (2, 4)}  # fmt: skip
    (pdir.root / "candidates" / "scores.json").write_text(json.dumps(
        {"how": how, "scores": {"2": [sums[2], 8.5, 2.5], "4": [sums[4], 8.0, 3.5]}}))
    choice = select_policy(cfg, None, pdir, phase2, cost_limit=3.0)  # type: ignore[arg-type]
    assert choice.iteration == 2 and choice.scores == {0: (9.0, 3.0), 2: (8.5, 2.5), 4: (8.0, 3.5)}
    chosen, exported = (load_file(str(p / "model.safetensors"))
                        for p in (candidate_dir(pdir, 2), pdir.agent))  # fmt: skip
    assert chosen.keys() == exported.keys() and all((chosen[k] == exported[k]).all() for k in chosen)
    selection = json.loads((pdir.root / "candidates" / "selection.json").read_text())
    assert selection["chosen"] == 2 and selection["scores"]["0"] == [9.0, 3.0]
    # checkpoints over the limit: phase 2's agent is exported
    (pdir.root / "candidates" / "scores.json").write_text(json.dumps(
        {"how": how, "scores": {"2": [sums[2], 8.5, 5.0], "4": [sums[4], 8.0, 6.0]}}))
    assert select_policy(cfg, None, pdir, phase2, cost_limit=3.0).iteration == 0  # type: ignore[arg-type]
    assert (pdir.agent / "model.safetensors").read_bytes() == (phase2 / "model.safetensors").read_bytes()


def _guarded(cfg: HybridConfig, rule: str) -> HybridConfig:
    return dataclasses.replace(cfg, phase3=dataclasses.replace(
        cfg.phase3, guard=GuardSection(rule=rule, max_extensions=2)))  # fmt: skip


def test_behind_the_guard_phase_2_is_scored_behind_it_too(tmp_path: Path) -> None:
    """With ``phase3.guard`` on, every candidate acts behind the guard, phase 2's policy included:
    ``limit.json``'s point (phase 2 alone) is not its score; the guarded one kept in
    ``scores.json`` is, and a guard setting changed since makes every score stale."""
    cfg = _guarded(HybridConfig(), "occupied")
    pdir = PhaseDir(root=tmp_path / "phase3").create()
    phase2 = _agent(0, tmp_path / "phase2" / "agent")
    _agent(2, candidate_dir(pdir, 2))
    weights = {k: float(v) for k, v in cfg.phase3.cost_weights.items()}
    (pdir.root / "limit.json").write_text(json.dumps(
        {"cost_weights": weights, "points": {"phase2": [9.0, 3.0]}}))
    how = {"cost_weights": weights, "shield_threshold": None,
           "guard": {"rule": "occupied", "max_extensions": 2},
           "route_seeds": cfg.phase2.validation.route_seeds,
           "sumo_seeds": cfg.phase2.validation.sumo_seeds}  # fmt: skip
    sums = [json.loads((p / "config.json").read_text())["weights_sha256"]
            for p in (phase2, candidate_dir(pdir, 2))]  # fmt: skip
    (pdir.root / "candidates" / "scores.json").write_text(json.dumps(
        {"how": how, "scores": {"0": [sums[0], 9.6, 1.5], "2": [sums[1], 9.4, 1.0]}}))
    choice = select_policy(cfg, None, pdir, phase2, cost_limit=2.0)  # type: ignore[arg-type]
    assert choice.scores == {0: (9.6, 1.5), 2: (9.4, 1.0)} and choice.iteration == 2
    other = {**how, "guard": {"rule": "fewer-next", "max_extensions": 2}}
    assert _kept_scores(pdir.root / "candidates" / "scores.json", other) == {}
