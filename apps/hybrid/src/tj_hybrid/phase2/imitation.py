"""Phase 2's start from the best teacher (learning from demonstrations, as DemoLight):

1. the teacher: ``phase2.imitation.teacher``, or (``auto``) the candidate baseline with the
   lowest average delay on validation traffic (never on held-out);
2. demonstrations: the teacher drives ``episodes`` training episodes (pool route files in turn,
   the training windows in turn, SUMO seeds of its own); every light's padded observation, the
   teacher's green and the return are kept (``tj_rl.imitation``);
3. the clone: the policy PPO will train (same module, same GNN, frozen or not) fitted to them;
   then DAgger rounds: the clone drives, the teacher labels, the clone refits on everything;
4. the clone, the teacher and (in the report) the final policy are scored side by side.

PPO then starts from the clone's weights with a fading KL term to it (``tj_rl.rllib.imitation``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tj_hybrid.config import HybridConfig
from tj_hybrid.rl_setup import RLSetup

__all__ = ["DEMO_SEED", "ImitationOutcome", "imitation_module", "make_teacher", "record_teacher",
           "start_from_teacher"]  # fmt: skip

log = logging.getLogger(__name__)
DEMO_SEED = 70_001  # SUMO seeds of demonstration episodes: apart from training's and evaluation's


@dataclass(frozen=True, kw_only=True)
class ImitationOutcome:
    """The clone PPO starts from, how it was made and how it scores on validation."""

    agent: Path
    teacher: str
    validation: dict[str, tuple[float, float]]  # policy -> (mean, worst) validation delay
    samples: int
    accuracy: float  # the clone's validation accuracy on the teacher's greens
    agreement: float  # the share of the DAgger steps where the clone drove as the teacher would
    lights: int
    wall_s: float

    def write(self, path: Path) -> None:
        from tj_monitor import atomic_write_json

        data = dataclasses.asdict(self) | {"agent": str(self.agent)}
        atomic_write_json(path, data)

    @classmethod
    def read(cls, path: Path) -> ImitationOutcome:
        import json

        data = json.loads(path.read_text())
        data["validation"] = {k: (float(m), float(w)) for k, (m, w) in data["validation"].items()}
        return cls(**(data | {"agent": Path(data["agent"])}))

    def lines(self) -> list[str]:
        """The report's lines on how PPO started."""
        cand = ", ".join(f"{p} {m:.2f} s" for p, (m, _w) in self.validation.items())
        return [
            f"- teacher: `{self.teacher}` (validation avg delay: {cand})",
            f"- clone: {self.samples} demonstration decisions, accuracy {self.accuracy:.1%} on "
            f"held-back decisions; the clone drove as the teacher would in "
            f"{self.agreement:.1%} of its DAgger steps; {self.wall_s:.0f} s",
        ]


def _episodes(setup: RLSetup, count: int, first: int) -> Iterator[tuple[Any, int]]:
    """``count`` (scenario, SUMO seed) pairs: pool files and training windows in turn."""
    windows = list(setup.scenario.each_window())
    files = setup.pool_files
    for i in range(first, first + count):
        w = windows[i % len(windows)]
        sc = setup.scenario.window(w.begin, w.end - w.begin).with_routes(files[i % len(files)])
        yield sc, DEMO_SEED + i


def record_teacher(setup: RLSetup, teacher: Any, count: int, first: int, acting: Any = None) -> Any:
    """tj-rl ``Demonstrations`` of ``teacher`` on ``count`` training episodes from the ``first``-th
    (pool files and training windows in turn, SUMO seeds ``DEMO_SEED + i``), whole episodes;
    ``acting``: the policy that drives while the teacher labels (DAgger), default the teacher."""
    from tj_rl.env import TrafficSignalCore
    from tj_rl.imitation import record_demonstrations

    # whole episodes: the look-ahead teacher's copies must not meet a gridlock's early end
    env_cfg = dataclasses.replace(setup.env, route_files=(), metrics=False, gridlock=None)
    out = None
    for scenario, seed in _episodes(setup, count, first):
        env = TrafficSignalCore(env_cfg, scenario=scenario)
        try:
            demos = record_demonstrations(env, teacher, [seed], acting=acting)
        finally:
            env.close()
        out = demos if out is None else out + demos
    return out


def imitation_module(cfg: HybridConfig, setup: RLSetup, base: Path | None) -> tuple[Any, int]:
    """(the RLlib module PPO trains, built outside RLlib on the env's spaces, with the GNN of the
    phase-1 agent ``base``; the lights): what the clone is fitted into."""
    from tj_rl.env import TrafficSignalCore
    from tj_rl.rllib import GraphModuleConfig, graph_module_spec

    core = TrafficSignalCore(setup.env, scenario=setup.scenario)
    try:
        light, lights = core.possible_agents[0], len(core.possible_agents)
        spaces = core.observation_spaces[light], core.action_spaces[light]
    finally:
        core.close()
    config = GraphModuleConfig(preset=cfg.model.preset,
                               gnn="finetune" if cfg.phase2.gnn == "finetune" else "frozen",
                               agent_dir=None if base is None else str(base))  # fmt: skip
    spec = graph_module_spec(config, observation_space=spaces[0], action_space=spaces[1])
    return spec.build(), lights


def _pick_teacher(cfg: HybridConfig, setup: RLSetup,
                  scored: Mapping[str, tuple[float, float]]) -> tuple[str, dict[str, tuple[float, float]]]:  # fmt: skip
    """(the teacher, the candidates' validation delays): ``scored`` holds those already run."""
    from tj_hybrid.evaluation import validation_delays

    im = cfg.phase2.imitation
    names = list(im.candidates) if im.teacher == "auto" else [im.teacher]
    missing = [n for n in names if n not in scored]
    ran = validation_delays(cfg, setup, {n: n for n in missing}) if missing else {}
    scores = {n: scored[n] if n in scored else ran[n] for n in names}  # the candidates' order
    teacher = min(scores, key=lambda n: scores[n][0]) if im.teacher == "auto" else im.teacher
    log.info("imitation: teacher %s (validation avg delay %s)", teacher,
             ", ".join(f"{n} {m:.2f} s" for n, (m, _) in scores.items()))  # fmt: skip
    return teacher, scores


def make_teacher(cfg: HybridConfig, name: str) -> tuple[str, Any]:
    """(label, policy): the baseline ``name``, improved by ``phase2.imitation``'s look-ahead when
    ``lookahead_s`` > 0 (scored with ``lookahead_cost`` x phase 3's cost when that is > 0)."""
    from tj_rl.control import make_policy

    im = cfg.phase2.imitation
    h = im.lookahead_s
    if not h:
        return name, make_policy(name)
    sees = "" if im.lookahead_sees == "all" else ", observed vehicles only"
    weights = {k: im.lookahead_cost * float(v) for k, v in cfg.phase3.cost_weights.items()
               if im.lookahead_cost and v > 0}  # fmt: skip
    costs = f", {im.lookahead_cost:g} x phase 3's cost" if weights else ""
    return (f"{name} + {h:g} s look-ahead{sees}{costs}",
            make_policy("lookahead", base=name, horizon_s=h, sees=im.lookahead_sees,
                        cost_weights=weights))  # fmt: skip


def start_from_teacher(cfg: HybridConfig, setup: RLSetup, base: Path | None, out: Path, *,
                       scored: Mapping[str, tuple[float, float]] | None = None) -> ImitationOutcome:  # fmt: skip
    """Clone the best teacher into the policy PPO trains; the clone's agent folder is
    ``out/clone`` (reused when it is complete: a resumed run does not clone again). ``scored``:
    candidates' ``{name: (mean, worst)}`` validation delays already run (the teleport rule's,
    ``FittedRule.delays``), not run again. Torch runs one intra-op thread: small batches, where
    a second thread only spins (training/threads.py: the clone's unit test took 72 s with 2
    threads on a loaded 2-core host, 1 s with one)."""
    from tj_hybrid.training import torch_threads

    with torch_threads(1):
        return _start(cfg, setup, base, out, dict(scored or {}))


def _start(cfg: HybridConfig, setup: RLSetup, base: Path | None, out: Path,
           scored: Mapping[str, tuple[float, float]]) -> ImitationOutcome:  # fmt: skip
    from tj_hybrid.evaluation import validation_delays
    from tj_hybrid.phase2.train import fresh_agent_config
    from tj_rl.control import AgentPolicy
    from tj_rl.imitation import clone
    from tj_rl.rllib import export_agent

    im, t0 = cfg.phase2.imitation, time.perf_counter()
    done = out / "imitation.json"
    if done.is_file() and (out / "clone" / "config.json").is_file():
        return ImitationOutcome.read(done)  # a resumed run: cloned (and chose) before
    # an explicit teacher is still scored: the clone is compared with it on validation
    teacher, scores = _pick_teacher(cfg, setup, scored)
    import torch

    torch.manual_seed(cfg.run.seed)  # the controller's initial weights: a seeded run repeats
    module, lights = imitation_module(cfg, setup, base)
    trained = [module.controller] + ([] if module.frozen_gnn else [module.gnn])
    clone_cfg = dataclasses.replace(im.clone, seed=cfg.run.seed)
    agent_base = base if base is not None else fresh_agent_config(module, cfg.model.preset)
    label, policy = make_teacher(cfg, teacher)
    if label != teacher:
        scores |= validation_delays(cfg, setup, {label: policy})
        log.info("imitation: teacher %s %.2f s on validation", label, scores[label][0])
    demos = record_teacher(setup, policy, im.episodes, 0)
    agreement, result = 1.0, None
    for round_ in range(im.dagger_rounds + 1):
        result = clone(module.actor, trained, demos, clone_cfg)
        log.info("imitation: clone of %s, round %d: %d decisions, accuracy %.1f%% (validation "
                 "split; %.1f%% of those with a choice of green), best epoch %d of %d", label,
                 round_, result.samples, 100 * result.validation_accuracy,
                 100 * result.validation_choice_accuracy, result.best_epoch,
                 result.epochs)  # fmt: skip
        agent = export_agent(module, agent_base, out / "clone")
        if round_ < im.dagger_rounds:
            student = AgentPolicy(agent)
            more = record_teacher(setup, policy, im.dagger_episodes,
                           im.episodes + round_ * im.dagger_episodes, acting=student)  # fmt: skip
            agreement = more.agreement
            demos = demos + more
    assert result is not None
    scores = scores | validation_delays(cfg, setup, {"clone": AgentPolicy(out / "clone")})
    log.info("imitation: clone %.2f s vs teacher %s %.2f s on validation", scores["clone"][0],
             label, scores[label][0])  # fmt: skip
    outcome = ImitationOutcome(agent=out / "clone", teacher=label, validation=scores,
                               samples=result.samples, accuracy=result.validation_accuracy,
                               agreement=agreement, lights=lights,
                               wall_s=time.perf_counter() - t0)  # fmt: skip
    outcome.write(done)
    return outcome
