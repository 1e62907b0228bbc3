"""The ``phase2`` section: safe RL with Ray RLlib PPO on the vehicle graph, behind the shield."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from tj_hybrid.config.sections import TimeWindows, check_windows, positive
from tj_rl.env.gridlock import GridlockConfig
from tj_rl.imitation.config import CloneConfig

if TYPE_CHECKING:
    from tj_rl.env import Scenario

__all__ = [
    "AUTO_CANDIDATES",
    "CLONABLE",
    "DemandSection",
    "EvalSection",
    "ImitationSection",
    "PPOSection",
    "Phase2Section",
    "ValidationSection",
]


@dataclass(kw_only=True)
class PPOSection:
    """PPO on RLlib's new API stack. Defaults that learn here (RLlib's own do not: lr 5e-5,
    30 epochs, lambda 1.0). The controller's value and policy heads share its tokens and RLlib
    clips the global gradient norm: with ``grad_clip`` 0.5 the critic's gradient used the whole
    norm and the policy did not move (KL ~1e-4 per iteration); 10 lets both learn."""

    lr: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    vf_clip: float = 100.0
    vf_coeff: float = 0.5
    entropy: float = 0.01
    epochs: int = 4
    minibatch: int = 128
    train_batch: int = 1024  # agent decisions per iteration (train_batch_size_per_learner)
    grad_clip: float = 10.0

    def __post_init__(self) -> None:
        positive(self, "lr", "clip", "vf_clip", "epochs", "minibatch", "train_batch")
        if not (0 < self.gamma <= 1 and 0 <= self.gae_lambda <= 1):
            raise ValueError("need 0 < gamma <= 1 and 0 <= gae_lambda <= 1")
        if self.minibatch > self.train_batch:
            raise ValueError(f"minibatch={self.minibatch} exceeds train_batch={self.train_batch}")


@dataclass(kw_only=True)
class DemandSection:
    """Training and held-out traffic. ``source``: ``scenario`` varies the scenario's own demand
    (seeded resampling at ``scales`` of its level, random flow departures, +-``jitter`` s per
    departure; SUMO's duarouter), ``random`` draws randomTrips at ``rates``; ``auto`` (default):
    ``scenario`` when its route files hold vehicles, else ``random`` (said in the log). Route
    seeds ``1..train_seeds`` train; ``heldout_seeds`` never do (with ``scenario`` the held-out set
    also holds the scenario's own demand unmodified); one held-out set is ``heavy_factor``
    heavier."""

    source: Literal["auto", "scenario", "random"] = "auto"
    rates: list[float] = field(default_factory=lambda: [600.0, 900.0, 1200.0])  # veh/h levels
    scales: list[float] = field(default_factory=lambda: [0.8, 1.0, 1.2])  # x the real demand
    jitter: float = 60.0  # seconds each departure may move (scenario source)
    train_seeds: int = 8  # route seeds 1..n
    heldout_seeds: list[int] = field(default_factory=lambda: [10_001, 10_002])
    heavy_factor: float = 1.3  # one held-out set this much heavier

    def __post_init__(self) -> None:
        positive(self, "train_seeds", "heavy_factor")
        if self.heavy_factor <= 1:
            raise ValueError(f"heavy_factor must be > 1, got {self.heavy_factor}")
        if not self.rates or min(self.rates) <= 0:
            raise ValueError(f"rates must be positive, got {self.rates}")
        if not self.scales or min(self.scales) <= 0 or len(set(self.scales)) != len(self.scales):
            raise ValueError(f"scales must be positive and distinct, got {self.scales}")
        if not (math.isfinite(self.jitter) and self.jitter >= 0):
            raise ValueError(f"jitter must be >= 0 seconds, got {self.jitter}")
        if set(self.heldout_seeds) & set(range(1, self.train_seeds + 1)):
            raise ValueError("heldout_seeds overlap the training route seeds 1..train_seeds")


Baseline = Literal[
    "fixed-time",
    "max-pressure",
    "greedy",
    "max-occupancy",
    "advanced-mp",
    "scenario-program",
    "sumo-actuated",
    "dz-protected",
]


@dataclass(kw_only=True)
class EvalSection:
    """Held-out evaluation: the trained policy and the baselines, same protocol: tj-rl's own
    (with ``advanced-mp``, the strongest published heuristic) and those users deploy (``scenario-program``: the scenario's signal programs as SUMO runs them;
    ``sumo-actuated``: SUMO's gap-based actuated control rebuilt from the net by netconvert;
    ``dz-protected``: max-occupancy whose greens wait while the dilemma zone is occupied)."""

    sumo_seeds: list[int] = field(default_factory=lambda: [90_001, 90_002])
    baselines: list[Baseline] = field(default_factory=lambda: list(get_args(Baseline)))
    # also greedy and max-occupancy with these hysteresis margins (vehicles), named
    # ``greedy-m2`` etc.: more points for phase 3's delay-vs-cost picture
    margins: list[float] = field(default_factory=list)
    # processes the episodes run in (tj-rl's ``evaluate_heldout(workers=)``): auto: one per CPU,
    # no more than the memory budget holds (``rl_setup.eval_worker_count``); 1: in the phase itself
    workers: int | Literal["auto"] = "auto"
    # ... but only when the rest of a table would take longer than this in the phase, judged by
    # its first episodes (a worker takes seconds to start: python, torch, the agent); 0: always
    spawn_after_s: float = 60.0
    # keep every episode's row in ``<run.data_root>/eval-rows`` and take it from there when the
    # policy, traffic, SUMO seed, env settings and code are the same (tj-rl's ``RowCache``): the
    # baselines run once per traffic, not in every phase, run and training seed; false: all run
    reuse_rows: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.reuse_rows, bool):
            raise ValueError(f"reuse_rows must be true or false, got {self.reuse_rows!r}")
        if not self.sumo_seeds:
            raise ValueError("sumo_seeds: at least one")
        if self.workers != "auto" and (
            isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1
        ):
            raise ValueError(f"workers must be an int >= 1 or 'auto', got {self.workers!r}")
        if not (math.isfinite(self.spawn_after_s) and self.spawn_after_s >= 0):
            raise ValueError(f"spawn_after_s must be finite and >= 0, got {self.spawn_after_s}")
        bad = [m for m in self.margins if not (math.isfinite(m) and m > 0)]
        if bad:
            raise ValueError(f"margins must be finite and > 0 (0 is the plain baseline), got {bad}")
        if len(set(self.margins)) != len(self.margins):
            raise ValueError(f"margins: each at most once, got {self.margins}")

    def baseline_policies(self, net_cache: Path | None = None,
                          programs: Scenario | None = None) -> dict[str, Any]:  # fmt: skip
        """Name -> baseline for ``tj_rl.evaluate_heldout`` (a name, or a policy with options);
        ``net_cache``: where ``sumo-actuated`` keeps its converted nets (None: tj-rl's default);
        ``programs``: the scenario whose own programs ``scenario-program`` runs when the
        evaluated one has other plans (``scenario.plans: rebuilt``)."""
        from tj_rl.control import make_policy

        out: dict[str, Any] = {name: name for name in self.baselines}
        if "sumo-actuated" in out and net_cache is not None:
            out["sumo-actuated"] = make_policy("sumo-actuated", cache_dir=net_cache)
        if "scenario-program" in out and programs is not None:
            out["scenario-program"] = make_policy("scenario-program", source=programs)
        for m in self.margins:
            for base in ("greedy", "max-occupancy"):
                out[f"{base}-m{m:g}"] = make_policy(base, margin=m)
        return out


# the baselines a graph policy can imitate: they pick greens through the env's action space
# (``scenario-program`` and ``sumo-actuated`` are run by SUMO itself and have no actions to copy)
CLONABLE = ("fixed-time", "max-pressure", "greedy", "max-occupancy", "advanced-mp", "dz-protected")
# ``teacher: auto`` chooses among these: ``dz-protected`` is a teacher only when named. On the
# embedded net it wins validation (6.46 s against max-occupancy's 6.80) but its clone + PPO was
# no better on held-out traffic (8.28 s against 8.07, 3 seeds) and worse on the 30% heavier set
# (9.91 against 9.26; docs/BENCHMARKS.md "A teacher that looks ahead")
AUTO_CANDIDATES = tuple(c for c in CLONABLE if c != "dz-protected")


@dataclass(kw_only=True)
class ImitationSection:
    """Start PPO from the best teacher (learning from demonstrations, as DemoLight): the
    ``teacher`` (``auto``: the candidate with the lowest validation delay; ``none``: PPO from a
    fresh controller) runs ``episodes`` training episodes; the controller is cloned on its
    greens (cross-entropy, the value head on the returns; ``epochs`` at most with early
    stopping), then ``dagger_rounds`` times the clone drives ``dagger_episodes`` episodes the
    teacher labels and it is cloned again on all of them. PPO then starts from the clone with
    ``coeff x KL(clone || policy)`` in its loss, fading to 0 over ``decay_iterations``.
    ``lookahead_s`` > 0 improves the chosen teacher by looking ahead that many simulated seconds
    in forked copies of the simulation (tj-rl's ``lookahead``: privileged, libsumo only);
    ``lookahead_sees``: ``all`` (the copies run the whole simulation, arrivals still unseen
    included) or ``observed`` (only the vehicles the lights observe at the decision, so the
    teacher decides on what the clone can see). The clone learns the improved teacher's greens.
    ``lookahead_cost`` > 0 scores the look-ahead by its halting vehicles plus that many times
    phase 3's cost (``phase3.cost_weights``; one unit of cost weighs as ``lookahead_cost``
    vehicles halting for one decision interval): a teacher that ends greens in front of the
    dilemma zone only where the waiting it saves is worth it (0: queue only)."""

    teacher: str = "auto"
    candidates: list[str] = field(default_factory=lambda: list(AUTO_CANDIDATES))
    episodes: int = 16
    dagger_rounds: int = 1
    dagger_episodes: int = 4
    clone: CloneConfig = field(default_factory=CloneConfig)
    coeff: float = 1.0
    decay_iterations: int = 20
    lookahead_s: float = 0.0
    lookahead_sees: Literal["all", "observed"] = "all"
    lookahead_cost: float = 0.0

    def __post_init__(self) -> None:
        positive(self, "episodes")
        if self.teacher not in ("auto", "none", *CLONABLE):
            raise ValueError(f"teacher must be auto, none or one of {list(CLONABLE)}, "
                             f"got {self.teacher!r}")  # fmt: skip
        bad = [c for c in self.candidates if c not in CLONABLE]
        if bad or not self.candidates:
            raise ValueError(f"candidates: one or more of {list(CLONABLE)} (baselines that act "
                             f"through the env), got {self.candidates}")  # fmt: skip
        if self.dagger_rounds < 0 or self.dagger_episodes < 1:
            raise ValueError("need dagger_rounds >= 0 and dagger_episodes >= 1")
        if not (math.isfinite(self.coeff) and self.coeff >= 0) or self.decay_iterations < 0:
            raise ValueError("need coeff >= 0 and decay_iterations >= 0")
        if not (math.isfinite(self.lookahead_s) and self.lookahead_s >= 0):
            raise ValueError(f"lookahead_s: seconds >= 0 (0: off), got {self.lookahead_s}")
        if not (math.isfinite(self.lookahead_cost) and self.lookahead_cost >= 0):
            raise ValueError(f"lookahead_cost: >= 0 (0: queue only), got {self.lookahead_cost}")
        if self.lookahead_cost and not self.lookahead_s:
            raise ValueError("lookahead_cost weighs the look-ahead: set lookahead_s > 0 too")

    @property
    def enabled(self) -> bool:
        return self.teacher != "none"


@dataclass(kw_only=True)
class ValidationSection:
    """Traffic to choose by, never trained on and never reported on: route seeds disjoint from
    training and held-out, SUMO seeds disjoint from evaluation's. It picks the teacher and, at
    every checkpoint, scores the policy; ``select: best`` exports the checkpoint with the lowest
    validation delay (early stopping), ``last`` the final one. ``windows``: the time windows its
    episodes run in, ``training`` (phase 2's) or ``held-out`` (those held-out evaluation runs in,
    with the validation seeds: for a day whose quarter hours differ, choose by the traffic the
    policy will meet; the same windows when the span holds no other)."""

    route_seeds: list[int] = field(default_factory=lambda: [5_001, 5_002])
    sumo_seeds: list[int] = field(default_factory=lambda: [80_001, 80_002])
    select: Literal["best", "last"] = "best"
    windows: Literal["training", "held-out"] = "training"

    def __post_init__(self) -> None:
        if not self.route_seeds or not self.sumo_seeds:
            raise ValueError("validation: one or more route_seeds and sumo_seeds")
        if self.windows not in ("training", "held-out"):
            raise ValueError(f"validation.windows: training or held-out, got {self.windows!r}")


@dataclass(kw_only=True)
class Phase2Section:
    """Safe RL: PPO trains the controller (GNN frozen per the seeds unless ``gnn`` says not)."""

    iterations: int = 60
    episode_seconds: float = 900.0
    # the episodes' time windows in the scenario's span: each training episode draws one, and
    # the held-out evaluation runs every one (phase 3 trains and evaluates on the same)
    windows: TimeWindows = None
    env_runners: int | None = None  # None: from the CPUs and the memory budget
    # simulations each env runner (or the driver, with 0 runners) steps at once, each libsumo in
    # its own child process, their lights batched into one forward (tj_rl.rllib.ParallelEnvRunner):
    # 1 is the plain env in the runner's process (README, phase 2, item 4; docs/BENCHMARKS.md)
    sims_per_runner: int = 1
    # torch threads of the driver's sampling and CPU learner: one, because a 2-thread OpenMP pool
    # spin-waits between a small network's ops (training/threads.py has the measurements)
    torch_threads: int = 1
    reward: Literal["queue", "pressure", "diff-waiting-time", "delay"] = "queue"
    reward_scale: float = 0.02  # returns of a few units: a critic fits them fast
    gnn: Literal["frozen", "finetune", "random"] = "frozen"
    # graph: the vehicle-graph policy (exported as a tj-models agent, phase 3's input);
    # lane-mlp: the benchmark's baseline, an MLP on lanes + phase (its RLModule is the export)
    policy: Literal["graph", "lane-mlp"] = "graph"
    checkpoint_every: int = 5
    keep_checkpoints: int = 2
    ray_address: str | None = None  # attach to an existing Ray cluster instead of starting one
    # training episodes (phases 2 and 3) that gridlock end as a penalised failure (tj-rl's
    # GridlockConfig: SUMO teleports, or queues that stop moving); null: off. Evaluation and
    # demonstrations always run to the window's end (a cut episode would hide its real delay)
    gridlock: GridlockConfig | None = field(default_factory=GridlockConfig)
    # the teleport rule's count: ``best-baseline`` raises it above the teleports of the best
    # candidate baseline's worst validation episode (nets where good controllers teleport too;
    # tj_hybrid.gridlock_rule), ``config``: ``gridlock.teleports`` as it is
    gridlock_teleports: Literal["best-baseline", "config"] = "best-baseline"
    ppo: PPOSection = field(default_factory=PPOSection)
    demand: DemandSection = field(default_factory=DemandSection)
    eval: EvalSection = field(default_factory=EvalSection)
    imitation: ImitationSection = field(default_factory=ImitationSection)
    validation: ValidationSection = field(default_factory=ValidationSection)

    def __post_init__(self) -> None:
        positive(self, "iterations", "episode_seconds", "reward_scale", "checkpoint_every")
        v, d = self.validation, self.demand
        clash = set(v.route_seeds) & (set(range(1, d.train_seeds + 1)) | set(d.heldout_seeds))
        if clash:
            raise ValueError(f"validation.route_seeds {sorted(clash)} are training or held-out "
                             "route seeds (phase2.demand)")  # fmt: skip
        if set(v.sumo_seeds) & set(self.eval.sumo_seeds):
            raise ValueError("validation.sumo_seeds overlap eval.sumo_seeds")
        check_windows(self.windows)
        if self.gridlock_teleports not in ("best-baseline", "config"):
            raise ValueError("gridlock_teleports: 'best-baseline' or 'config', got "
                             f"{self.gridlock_teleports!r}")  # fmt: skip
        positive(self, "sims_per_runner", "torch_threads")
        if self.env_runners is not None and self.env_runners < 0:
            raise ValueError(f"env_runners must be >= 0, got {self.env_runners}")
        if self.keep_checkpoints < 1:
            raise ValueError(f"keep_checkpoints must be >= 1, got {self.keep_checkpoints}")
