"""Phase 2's sizing and config checks (no SUMO, no Ray)."""

from __future__ import annotations

import pytest

from tj_hybrid.config import ConfigError, load_config
from tj_hybrid.rl_setup import (
    DRIVER_PSS,
    EVAL_WORKER_PSS,
    RUNNER_PSS,
    SIM_PSS,
    env_runner_count,
    eval_worker_count,
)

GIB = 2**30


def test_env_runners_as_asked_else_from_cpus_and_memory() -> None:
    assert env_runner_count(3, cpus=32, budget=1) == 3  # asked: as asked
    assert env_runner_count(None, cpus=2) == 0  # the driver samples on a 2-core machine
    assert env_runner_count(None, cpus=32) == 30
    # the reference machine: 32 threads, 16 GB, budget 0.6: memory, not CPUs, is the limit
    n = env_runner_count(None, cpus=32, budget=int(0.6 * 16 * GIB))
    assert n == (int(0.6 * 16 * GIB) - DRIVER_PSS) // RUNNER_PSS and 0 < n < 30
    assert env_runner_count(None, cpus=32, budget=DRIVER_PSS // 2) == 0
    assert env_runner_count(None, cpus=4, budget=64 * GIB) == 2


def test_eval_workers_as_asked_else_from_cpus_and_memory() -> None:
    assert eval_worker_count(3, cpus=32, budget=1) == 3
    assert eval_worker_count("auto", cpus=2) == 2  # both cores run episodes
    budget = int(0.6 * 16 * GIB)  # the reference machine: memory is the limit
    n = eval_worker_count("auto", cpus=32, budget=budget)
    assert n == (budget - DRIVER_PSS) // EVAL_WORKER_PSS and 1 < n < 32
    assert eval_worker_count("auto", cpus=32, budget=DRIVER_PSS) == 1  # in the phase itself


def test_eval_workers_config_refuses_what_is_not_a_count() -> None:
    assert load_config(profile="smoke").config.phase2.eval.workers == "auto"
    assert load_config(profile="smoke", overrides=["phase2.eval.workers=2"]
                       ).config.phase2.eval.workers == 2  # fmt: skip
    for bad in ("0", "-2", "many"):
        with pytest.raises(ConfigError, match="workers"):
            load_config(profile="smoke", overrides=[f"phase2.eval.workers={bad}"])


def test_simulation_children_count_against_the_memory_budget() -> None:
    """With ``sims_per_runner`` > 1 each runner and the driver also hold that many children."""
    budget = int(0.6 * 16 * GIB)
    n8 = env_runner_count(None, cpus=32, budget=budget, sims=8)
    assert n8 == (budget - DRIVER_PSS - 8 * SIM_PSS) // (RUNNER_PSS + 8 * SIM_PSS)
    assert n8 < env_runner_count(None, cpus=32, budget=budget, sims=1)
    assert env_runner_count(None, cpus=32, budget=budget, sims=1) == env_runner_count(
        None, cpus=32, budget=budget
    )


def test_sims_per_runner_selects_the_parallel_env_runner() -> None:
    """``phase2.sims_per_runner: 4``: PPO samples 4 process envs per runner through
    ``ParallelEnvRunner``; 1 keeps the plain env in the runner's process."""
    from pathlib import Path

    from tj_hybrid.rl_setup import RLSetup, build_ppo
    from tj_rl.env import EnvConfig, Scenario
    from tj_rl.rllib import ParallelEnvRunner, ProcessTrafficSignalEnv, TrafficSignalEnv
    from tj_rl.traffic import DemandSet, DemandSpec

    root = Path(__file__).resolve().parents[3]
    scenario = Scenario.from_sumocfg(root / "configs/scenarios/default/default.sumocfg")
    none = DemandSet(name="none", files=(), specs=(DemandSpec(rates=(600.0,)),))

    def setup_of(sims: int):
        cfg = load_config(profile="smoke", overrides=[f"phase2.sims_per_runner={sims}"]).config
        setup = RLSetup(scenario=scenario, env=EnvConfig(), pool_files=(), held_out=none,
                        held_out_heavy=none, env_runners=0, max_lanes=0)  # fmt: skip
        return build_ppo(cfg, setup, None)

    four, one = setup_of(4), setup_of(1)
    assert four.env is ProcessTrafficSignalEnv and four.num_envs_per_env_runner == 4
    assert four.env_runner_cls is ParallelEnvRunner
    assert one.env is TrafficSignalEnv and one.num_envs_per_env_runner == 1
    assert one.env_runner_cls is None


@pytest.mark.parametrize(("override", "message"), [
    ("phase2.ppo.minibatch=4096", "exceeds train_batch"),
    ("phase2.demand.heldout_seeds=[1]", "overlap the training route seeds"),
    ("phase2.policy=transformer", "phase2.policy"),
    ("phase2.env_runners=-1", "env_runners must be >= 0"),
    ("phase2.sims_per_runner=0", "sims_per_runner must be > 0"),
    ("phase2.torch_threads=0", "torch_threads must be > 0"),
    ("phase2.validation.route_seeds=[3]", "training or held-out route seeds"),
    ("phase2.validation.route_seeds=[10001]", "training or held-out route seeds"),
    ("phase2.validation.sumo_seeds=[90001]", "overlap eval.sumo_seeds"),
    ("phase2.validation.windows=evening", "phase2.validation.windows"),
    ("phase2.imitation.teacher=sumo-actuated", "phase2.imitation"),
    ("phase2.imitation.candidates=[scenario-program]", "act through the env"),
    ("phase2.imitation.episodes=0", "phase2.imitation"),
    ("phase2.imitation.lookahead_s=-5", "lookahead_s"),
    ("phase2.imitation.lookahead_sees=future", "lookahead_sees"),
    ("phase2.imitation.lookahead_cost=-1", "lookahead_cost"),
    ("phase2.imitation.lookahead_cost=10", "set lookahead_s > 0 too"),
    ("phase2.gridlock.window_s=0", "phase2.gridlock"),
    ("phase2.gridlock_teleports=never", "phase2.gridlock_teleports"),
    ("scenario.env.gridlock={}", "set phase2.gridlock instead"),
])  # fmt: skip
def test_bad_phase2_config_is_refused_with_its_path(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(profile="smoke", overrides=[override])


def test_dz_protected_is_a_teacher_only_when_named() -> None:
    """It wins validation on the embedded net but its clone did no better on held-out traffic
    and worse on the heavier set (BENCHMARKS), so ``auto`` does not choose it by itself."""
    cfg = load_config(profile="smoke").config
    assert "dz-protected" not in cfg.phase2.imitation.candidates
    named = load_config(profile="smoke", overrides=["phase2.imitation.teacher=dz-protected"])
    assert named.config.phase2.imitation.teacher == "dz-protected"
    added = load_config(profile="smoke", overrides=[
        "phase2.imitation.candidates=[max-occupancy,dz-protected]"]).config  # fmt: skip
    assert added.phase2.imitation.candidates == ["max-occupancy", "dz-protected"]


def test_gridlock_ends_training_episodes_only_by_default(tmp_path) -> None:
    """On by default for training (phases 2 and 3 build their envs from ``setup.env``), off in
    the scenario's env (evaluation, phase 1) and for demonstrations; ``null`` turns it off."""
    from tj_hybrid.rl_setup import prepare_rl
    from tj_rl.env.gridlock import GridlockConfig

    cfg = load_config(profile="smoke").config
    assert cfg.phase2.gridlock == GridlockConfig() and cfg.scenario.env.gridlock is None
    setup = prepare_rl(cfg, agent_dir=None, data_dir=tmp_path)
    assert setup.env.gridlock == GridlockConfig()
    assert setup.env_config()["gridlock"] == GridlockConfig()
    off = load_config(profile="smoke", overrides=["phase2.gridlock=null"]).config
    assert prepare_rl(off, agent_dir=None, data_dir=tmp_path).env.gridlock is None


def test_a_module_trained_without_a_phase1_agent_exports_and_loads(tmp_path) -> None:
    """``phase2.gnn: random``: the module's GNN embeds the env's 20 lane rows, not the preset's
    16; the exported agent takes the module's GNN and controller configs and loads."""
    from pathlib import Path

    from tj_hybrid.phase2.train import fresh_agent_config
    from tj_models import TrafficAgent
    from tj_rl.env import EnvConfig, Scenario, TrafficSignalCore
    from tj_rl.rllib import export_agent, graph_module_spec
    from tj_rl.rllib.module import GraphModuleConfig

    root = Path(__file__).resolve().parents[3]
    scenario = Scenario.from_sumocfg(root / "configs/scenarios/default/default.sumocfg")
    env = TrafficSignalCore(EnvConfig(pad_to_scenario=True), scenario=scenario)
    obs_space, act_space = env.observation_spaces["A0"], env.action_spaces["A0"]
    module = graph_module_spec(GraphModuleConfig(preset="tiny"), observation_space=obs_space,
                               action_space=act_space).build()  # fmt: skip
    assert module.gnn.config.num_movements == 20
    out = export_agent(module, fresh_agent_config(module, "tiny"), tmp_path / "agent")
    agent = TrafficAgent.load(out)
    assert agent.config.gnn == module.gnn.config
    assert agent.config.controller == module.controller.config


def test_imitation_outcome_round_trips(tmp_path) -> None:
    """A resumed phase 2 reads how it started instead of cloning again."""
    from pathlib import Path

    from tj_hybrid.phase2.imitation import ImitationOutcome

    outcome = ImitationOutcome(agent=tmp_path / "clone", teacher="max-occupancy",
                               validation={"max-occupancy": (7.5, 9.0), "clone": (7.25, 8.0)},
                               samples=100, accuracy=0.97, agreement=0.9, lights=2, wall_s=3.0)  # fmt: skip
    outcome.write(tmp_path / "imitation.json")
    again = ImitationOutcome.read(tmp_path / "imitation.json")
    assert again == outcome and isinstance(again.agent, Path)
    assert "teacher: `max-occupancy`" in outcome.lines()[0] and "97.0%" in outcome.lines()[1]


def test_the_teacher_is_improved_by_lookahead_only_when_asked() -> None:
    """``phase2.imitation.lookahead_s`` > 0 replaces the chosen baseline by tj-rl's look-ahead
    over it (named so in the log and the report); 0, the default, keeps the baseline."""
    from tj_hybrid import make_teacher
    from tj_rl.control import LookaheadPolicy, MaxOccupancyPolicy

    plain = load_config(profile="smoke").config
    label, policy = make_teacher(plain, "max-occupancy")
    assert label == "max-occupancy" and isinstance(policy, MaxOccupancyPolicy)
    cfg = load_config(profile="smoke", overrides=["phase2.imitation.lookahead_s=30",
                                                  "phase2.imitation.lookahead_sees=observed"]).config  # fmt: skip
    label, policy = make_teacher(cfg, "greedy")
    assert label == "greedy + 30 s look-ahead, observed vehicles only"
    assert isinstance(policy, LookaheadPolicy) and policy.base_name == "greedy"
    assert policy.horizon_s == 30.0 and policy.sees == "observed"
    assert policy.cost_weights == {}  # queue only unless lookahead_cost is set


def test_lookahead_cost_weighs_phase3_costs_in_the_teacher() -> None:
    """``phase2.imitation.lookahead_cost`` scales phase 3's cost weights into the look-ahead's
    score (zero weights left out), and the teacher's label says so."""
    from tj_hybrid import make_teacher

    cfg = load_config(profile="smoke", overrides=[
        "phase2.imitation.lookahead_s=40", "phase2.imitation.lookahead_cost=2",
        "phase3.cost_weights={dilemma_zone: 1.0, red_light: 0.5, veto: 0.0}"]).config  # fmt: skip
    label, policy = make_teacher(cfg, "max-occupancy")
    assert label == "max-occupancy + 40 s look-ahead, 2 x phase 3's cost"
    want = {k: 2 * v for k, v in cfg.phase3.cost_weights.items() if v > 0}
    assert policy.cost_weights == want and "veto" not in want  # the section's keys merge
    assert want["dilemma_zone"] == 2.0 and want["red_light"] == 1.0
    assert "2 x dilemma_zone" in policy.describe() and "1 x red_light" in policy.describe()
