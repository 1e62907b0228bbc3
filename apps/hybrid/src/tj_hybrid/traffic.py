"""The trainer's traffic, shared by phases 1-3: which demand trains (the scenario's own, varied,
or randomTrips), the pool and held-out sets made from it, and the time windows of the episodes.

``phase2.demand.source: auto`` picks ``scenario`` when the scenario's route files hold vehicles,
else ``random``, and says so. With the scenario's demand the held-out set is its own demand
unmodified plus variations from seeds never trained on, evaluated in time never trained on when
the span has it (``split_windows``), else in the training windows (the log says which). A scenario shorter than ``episode_seconds`` (a game
scenario of 3 minutes) runs episodes of its whole span, said in the log.

``scenario.plans: rebuilt`` puts every phase on the scenario's net with netconvert's rebuilt
plans (static; ``tj_rl.control.rebuilt_plans``), the phases ``sumo-actuated`` extends: the agent
and the baselines then switch the same greens; ``scenario-program`` still runs the scenario's own
programs (``own_programs``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from tj_hybrid.config import HybridConfig
from tj_hybrid.config.sections import TimeWindows

if TYPE_CHECKING:
    from tj_rl.env import Scenario
    from tj_rl.traffic import DemandSet

__all__ = ["Traffic", "build_traffic", "demand_source", "episode_windows", "own_programs",
           "scenario_span", "split_windows"]  # fmt: skip

log = logging.getLogger(__name__)
Source = Literal["scenario", "random"]


@dataclass(frozen=True, kw_only=True)
class Traffic:
    """Training route files and the two held-out sets, from one source."""

    source: Source
    pool_files: tuple[Path, ...]
    held_out: DemandSet
    held_out_heavy: DemandSet
    validation: DemandSet  # to choose by (teacher, checkpoint); never trained or reported on


def scenario_span(cfg: HybridConfig) -> Scenario:
    """The configured scenario over its whole time span, on the plans ``scenario.plans`` names
    (``rebuilt``: netconvert's, converted once into ``<data root>/nets``)."""
    from tj_rl.env import Scenario

    span = Scenario.from_sumocfg(cfg.scenario.path)
    if cfg.scenario.plans == "own":
        return span
    from tj_hybrid.data_paths import data_root  # it needs this module: import here
    from tj_rl.control import ActuatedSpec, rebuilt_plans

    return rebuilt_plans(span, spec=ActuatedSpec(tls_type="static"),
                         cache_dir=data_root(cfg) / "nets")  # fmt: skip


def own_programs(cfg: HybridConfig) -> Scenario | None:
    """The scenario with its own programs when the phases run other plans (``scenario.plans:
    rebuilt``): what ``scenario-program`` runs. None: the phases run the scenario's own."""
    from tj_rl.env import Scenario

    return Scenario.from_sumocfg(cfg.scenario.path) if cfg.scenario.plans != "own" else None


def _has_vehicles(scenario: Scenario) -> bool:
    """Whether a route file holds a vehicle departing in the span (flows: any)."""
    from tj_rl.traffic import read_departures

    for path in scenario.route_files:
        try:
            departures = read_departures(path)
        except ValueError:
            return True  # a broken file: the scenario source says so, with duarouter's words
        if any(math.isnan(d.depart) or scenario.begin <= d.depart < scenario.end
               for d in departures):  # fmt: skip
            return True
    return False


def demand_source(cfg: HybridConfig, span: Scenario) -> Source:
    """``phase2.demand.source`` resolved (``ScenarioError`` when ``scenario`` is asked of a
    scenario without vehicles)."""
    from tj_rl.env import ScenarioError

    asked = cfg.phase2.demand.source
    if asked == "random":
        return "random"
    if _has_vehicles(span):
        return "scenario"
    if asked == "scenario":
        raise ScenarioError(f"phase2.demand.source is scenario, but {span.name}'s route files "
                            f"hold no vehicle departing in its span {span.describe_windows()}: "
                            "set phase2.demand.source=random")  # fmt: skip
    return "random"


def episode_windows(span: Scenario, seconds: float, windows: TimeWindows,
                    what: str = "phase2") -> Scenario:  # fmt: skip
    """``span`` cut to episodes of ``seconds`` at ``windows``; with the default single window, a
    span shorter than ``seconds`` is one episode of the whole span (logged)."""
    if windows is None and seconds > span.end - span.begin:
        log.info("%s: the scenario %s spans %g s, less than episode_seconds %g: each episode is "
                 "its whole span", what, span.name, span.end - span.begin, seconds)  # fmt: skip
        seconds = span.end - span.begin
    return span.windowed(seconds, windows)


def split_windows(span: Scenario, episodes: Scenario, windows: TimeWindows,
                  source: Source) -> tuple[Scenario, Scenario]:  # fmt: skip
    """``(train, held_out)`` episode windows. With the scenario's demand, held-out episodes run
    in time never trained on: the last of the ``auto`` windows (training keeps the others), or
    the first window of the same length after the training windows if the span holds it; else
    (and with randomTrips) in the training windows, said in the log."""
    if source == "random":
        return episodes, episodes
    if windows == "auto" and len(episodes.windows) >= 2:
        *train, last = episodes.windows
        kept = span.windowed(last.seconds, [w.start for w in train])
        held = span.window(last.start, last.seconds)
    else:
        first = episodes.windows[0] if episodes.windows else None
        seconds = first.seconds if first is not None else episodes.end - episodes.begin
        kept = episodes
        held = span.window(episodes.end, seconds) if episodes.end + seconds <= span.end + 1e-6 \
            else None  # fmt: skip
    if held is None:
        log.info("held-out traffic runs in the training window(s) %s: the scenario's span holds "
                 "no other (its trips and seeds are still never trained on)",
                 episodes.describe_windows())  # fmt: skip
        return episodes, episodes
    log.info("held-out traffic runs in %s, a time window never trained on (training: %s)",
             held.describe_windows(), kept.describe_windows())  # fmt: skip
    return kept, held


def build_traffic(cfg: HybridConfig, span: Scenario, train: Scenario, data_dir: Path,
                  source: Source) -> Traffic:  # fmt: skip
    """Make (or reuse) the training pool and the held-out sets under ``data_dir/demand``: the
    scenario's variations over its whole ``span``, or randomTrips over the ``train`` windows."""
    from tj_rl.traffic import DemandPool, VariationPool

    d = cfg.phase2.demand
    seeds = tuple(range(1, d.train_seeds + 1))
    if source == "scenario":
        pool = VariationPool(span, data_dir / "demand", seeds=seeds, scales=tuple(d.scales),
                             jitter=d.jitter)  # fmt: skip
        files = pool.build()
        held, heavy = pool.held_out(d.heldout_seeds, heavy_factor=d.heavy_factor)
        validation = pool.validation(cfg.phase2.validation.route_seeds)
        log.info("training traffic: %d variations of %s's own demand (scales %s, jitter +-%g s; "
                 "phase2.demand.source=%s)", len(files), span.name, d.scales, d.jitter,
                 d.source)  # fmt: skip
    else:
        rpool = DemandPool.for_scenario(train, data_dir / "demand", seeds=seeds,
                                        rates=tuple(d.rates))  # fmt: skip
        files = rpool.build()
        held, heavy = rpool.held_out(d.heldout_seeds, heavy_factor=d.heavy_factor)
        validation = rpool.validation(cfg.phase2.validation.route_seeds)
        log.info("training traffic: %d randomTrips route files (%s veh/h; "
                 "phase2.demand.source=%s)", len(files), d.rates, d.source)  # fmt: skip
    return Traffic(source=source, pool_files=tuple(files), held_out=held, held_out_heavy=heavy,
                   validation=validation)
