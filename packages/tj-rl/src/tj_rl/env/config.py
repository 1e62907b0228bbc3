"""``EnvConfig``: every knob of ``TrafficSignalEnv`` with the common benchmark defaults.

10 s decisions and 3 s yellow follow the usual traffic-signal RL protocol (sumo-rl, RESCO); all-red,
min green and max green are the shield's; padding sizes fix the observation shapes for RLlib.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tj_rl.env.backends import BackendName
from tj_rl.env.features import GraphConfig
from tj_rl.env.gridlock import GridlockConfig

__all__ = ["COST_NAMES", "EnvConfig", "KernelName", "ReaderName", "split_env_config"]

# How the step's features are computed: numpy, or ``numba_kernels`` (the same arrays bit for bit,
# compiled; faster steps for numba's import in every env process). README "Feature kernels".
KernelName = Literal["numpy", "numba"]
# How vehicles are read from SUMO: a context subscription per light (any backend), or the compiled
# reader of ``native_reader.py`` (libsumo only; built on first use). README "Vehicle reader".
ReaderName = Literal["subscription", "native"]

# Named safety costs returned per agent and step in info["costs"] (see README, "Costs").
COST_NAMES: tuple[str, ...] = (
    "veto",
    "low_ttc",
    "hard_braking",
    "emergency_braking",
    "teleport",
    "collision",
    "dilemma_zone",
    "red_light",
)


@dataclass(frozen=True, kw_only=True)
class EnvConfig:
    """Configuration of ``TrafficSignalEnv`` (seconds, metres, m/s^2)."""

    backend: BackendName = "libsumo"
    gui: bool = False  # traci only: SUMO in sumo-gui, to watch a policy (closes at the end)
    gui_delay_ms: float = 100.0  # sumo-gui's wait per simulation step, milliseconds
    delta_time: float = 10.0
    # seconds, or "ite": per light from its approach speed and junction width (clearance.py)
    yellow_time: float | Literal["ite"] = 3.0
    all_red_time: float | Literal["ite"] = 2.0
    # walking speed (m/s) a signalled pedestrian crossing is cleared at: when a switch ends its
    # green it turns red at once and the next green waits crossing length / crossing_speed when
    # that is longer than yellow + all-red (shield.py). 1.2 m/s is the German guideline's
    # clearance speed (RiLSA; MUTCD's is 1.07). None: crossings clear like vehicle links.
    crossing_speed: float | None = 1.2
    min_green: float = 10.0
    max_green: float = 60.0
    reward: str | Callable[[], Any] = "diff-waiting-time"
    reward_scale: float = 1.0  # multiplies every reward (e.g. 0.1: returns a critic can fit)
    obs_radius: float = 100.0
    max_nodes: int = 64
    max_edges: int = 256
    graph: GraphConfig = field(default_factory=GraphConfig)
    # Padding of the per-light arrays (``phase``, ``action_mask``, ``lanes``, ``lane_mask``) so that
    # every light of a scenario has one observation and action space (one policy shared by lights
    # with different green-phase and lane counts). Padding is on when any of the three is set; an
    # unset size is the scenario's maximum. README "Padding to the scenario".
    pad_to_scenario: bool = False
    max_phases: int | None = None
    max_lanes: int | None = None
    kernel: KernelName = "numpy"
    reader: ReaderName = "subscription"
    ttc_threshold: float = 2.0
    hard_brake_decel: float = 4.5
    # Type-II dilemma zone (s of travel to the stop line) and the speed (m/s) above which a vehicle
    # counts in it at a green end: the ``dilemma_zone`` cost (README "Costs", dilemma.py)
    dilemma_zone: tuple[float, float] = (2.5, 5.5)
    dilemma_min_speed: float = 5.0
    cost_weights: Mapping[str, float] = field(
        default_factory=lambda: dict.fromkeys(COST_NAMES, 1.0)
    )
    # SUMO's tripinfo + statistics outputs for info["episode"]. They cost SUMO time every step (a
    # tripinfo device on every vehicle) and a parse per episode, so None (the default) means off in
    # the env, i.e. for training, and on in evaluate(); True / False force them.
    metrics: bool | None = None
    warmup: float = 0.0
    # Demand drawn per episode (a tj_rl.DemandPool's files): each reset runs the scenario with
    # pick_route(route_files, episode, route_stream) instead of its own routes (empty: its own).
    # route_stream (e.g. an env runner's index) gives each env its own order of the files.
    route_files: tuple[str, ...] = ()
    route_stream: int = 0
    sumo_args: tuple[str, ...] = ()
    temp_dir: str | None = None  # where episode temp dirs go (None: the system default)
    # A gridlocked episode ends as a failure (terminated, penalised: gridlock.py). Off by default:
    # evaluation must run a gridlocked episode to its end to measure its true delay (cut short, its
    # stuck vehicles stop adding delay); training turns it on. A mapping is typed.
    gridlock: GridlockConfig | None = None

    def __post_init__(self) -> None:
        if self.backend not in ("libsumo", "traci"):
            raise ValueError(f"EnvConfig.backend: {self.backend!r}, expected 'libsumo' or 'traci'")
        if self.kernel not in ("numpy", "numba"):
            raise ValueError(f"EnvConfig.kernel: {self.kernel!r}, expected 'numpy' or 'numba'")
        if self.reader not in ("subscription", "native"):
            raise ValueError(
                f"EnvConfig.reader: {self.reader!r}, expected 'subscription' or 'native'"
            )
        if self.gui and self.backend != "traci":
            raise ValueError(f"EnvConfig.gui: sumo-gui runs over traci; backend={self.backend!r}")
        if not float(self.gui_delay_ms) >= 0:
            raise ValueError(f"EnvConfig.gui_delay_ms: {self.gui_delay_ms}, must be >= 0")
        if self.reader == "native" and self.backend != "libsumo":
            raise ValueError(
                "EnvConfig.reader='native' reads the in-process libsumo simulation; with "
                f"backend={self.backend!r} use reader='subscription'"
            )
        for name in ("delta_time", "obs_radius", "ttc_threshold", "hard_brake_decel", "reward_scale"):
            if not float(getattr(self, name)) > 0:
                raise ValueError(f"EnvConfig.{name}: {getattr(self, name)}, must be > 0")
        if self.crossing_speed is not None and not float(self.crossing_speed) > 0:
            raise ValueError(
                f"EnvConfig.crossing_speed: {self.crossing_speed}, must be > 0 m/s (None: off)"
            )
        for name in ("yellow_time", "all_red_time"):
            value = getattr(self, name)
            if isinstance(value, str) and value != "ite":
                raise ValueError(f"EnvConfig.{name}: {value!r}, expected seconds or 'ite'")
        lo, hi = (float(x) for x in self.dilemma_zone)
        if not 0 <= lo < hi:
            raise ValueError(f"EnvConfig.dilemma_zone: {self.dilemma_zone}, need 0 <= low < high")
        object.__setattr__(self, "dilemma_zone", (lo, hi))
        if not float(self.dilemma_min_speed) >= 0:
            raise ValueError(f"EnvConfig.dilemma_min_speed: {self.dilemma_min_speed}, must be >= 0")
        for name in ("yellow_time", "all_red_time", "min_green", "warmup"):
            if getattr(self, name) != "ite" and float(getattr(self, name)) < 0:
                raise ValueError(f"EnvConfig.{name}: {getattr(self, name)}, must be >= 0")
        if not self.max_green > self.min_green:
            raise ValueError(
                f"EnvConfig.max_green: {self.max_green} must exceed min_green {self.min_green}"
            )
        for name in ("max_nodes", "max_edges"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"EnvConfig.{name}: {value!r}, padding size must be an int >= 1")
        for name in ("max_phases", "max_lanes"):
            value = getattr(self, name)
            bad = not isinstance(value, int) or isinstance(value, bool) or value < 1
            if value is not None and bad:
                raise ValueError(f"EnvConfig.{name}: {value!r}, expected None or an int >= 1")
        if not isinstance(self.pad_to_scenario, bool):
            raise ValueError(
                f"EnvConfig.pad_to_scenario: {self.pad_to_scenario!r}, expected True or False"
            )
        unknown = set(self.cost_weights) - set(COST_NAMES)
        if unknown:
            raise ValueError(
                f"EnvConfig.cost_weights: unknown cost(s) {sorted(unknown)}; known {COST_NAMES}"
            )
        weights = dict.fromkeys(COST_NAMES, 0.0) | {
            k: float(v) for k, v in self.cost_weights.items()
        }
        object.__setattr__(self, "cost_weights", weights)  # a plain dict: picklable for workers
        if self.metrics is not None and not isinstance(self.metrics, bool):
            raise ValueError(f"EnvConfig.metrics: {self.metrics!r}, expected None, True or False")
        if not (isinstance(self.reward, str) or callable(self.reward)):
            raise ValueError(f"EnvConfig.reward: {self.reward!r}, expected a name or a factory")
        object.__setattr__(self, "sumo_args", tuple(str(a) for a in self.sumo_args))
        object.__setattr__(self, "route_files", tuple(str(p) for p in self.route_files))
        if not isinstance(self.route_stream, int) or self.route_stream < 0:
            raise ValueError(f"EnvConfig.route_stream: {self.route_stream!r}, expected an int >= 0")
        object.__setattr__(self, "gridlock", GridlockConfig.of(self.gridlock))

    def check_step_length(self, step_length: float) -> None:
        """The timings in seconds must be multiples of a scenario's SUMO step length."""
        for name in ("delta_time", "yellow_time", "all_red_time"):
            if getattr(self, name) == "ite":  # computed per light, rounded up to the step
                continue
            value = getattr(self, name) / step_length
            if abs(value - round(value)) > 1e-6:
                raise ValueError(
                    f"EnvConfig.{name}: {getattr(self, name)} s is not a multiple of the "
                    f"scenario's step length {step_length} s"
                )

    @property
    def padded(self) -> bool:
        """Whether the per-light arrays are padded to common sizes (see ``pad_to_scenario``)."""
        return self.pad_to_scenario or self.max_phases is not None or self.max_lanes is not None


def split_env_config(config: Mapping[str, Any]) -> tuple[Any, EnvConfig]:
    """RLlib passes one dict (``env_config``): ``scenario`` plus ``EnvConfig`` fields."""
    data = dict(config)
    scenario = data.pop("scenario", None)
    known = set(EnvConfig.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"env_config: unknown key(s) {unknown}; known: scenario, {sorted(known)}")
    return scenario, EnvConfig(**data)
