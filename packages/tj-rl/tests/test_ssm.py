"""The env's ``low_ttc`` against SUMO's own surrogate-safety device (``ssm``) on the same episode.

Consistent here means: at the env's decision times, among the vehicles the env observes, the set
SUMO's device puts in a TTC < ``ttc_threshold`` conflict and the set the env flags overlap for most
of SUMO's (>= half of them flagged by the env too) and their episode totals are within a factor of
two. Not equal, because the two measure different things: the env's TTC is geometric (straight-line
centre distance minus half lengths, a course test within ``conflict_distance``, at most
``k_nearest`` neighbours within ``edge_radius``, any two lanes, crossing paths included), SUMO's is
along the lanes with its own conflict types (following, merging, crossing) and foe range. Both read
the same vehicles at the same instants, so a bug in the env's edge features (a wrong sign, units,
an off-by-one in time) would break the overlap, while the definitions' honest difference does not.
"""

from __future__ import annotations

import collections
from pathlib import Path

import sumolib

from tj_rl.env import EnvConfig, Scenario, TrafficSignalCore, build_graph

_LOW_TTC = 1  # COST_NAMES.index("low_ttc")


def _ssm_low_ttc(path: Path, threshold: float) -> dict[float, set[str]]:
    """Per time: the vehicles in an SSM conflict with 0 <= TTC < ``threshold`` (ego or foe)."""
    out: dict[float, set[str]] = collections.defaultdict(set)
    for c in sumolib.xml.parse(str(path), "conflict"):
        times = c.timeSpan[0].values.split()
        ttcs = c.TTCSpan[0].values.split()
        for t, ttc in zip(times, ttcs, strict=True):
            if ttc != "NA" and 0 <= float(ttc) < threshold:
                out[float(t)] |= {c.ego, c.foe}
    return out


def test_low_ttc_consistent_with_sumo_ssm(default_sc: Scenario, tmp_path: Path) -> None:
    ssm = tmp_path / "ssm.xml"
    args = ("--device.ssm.probability", "1", "--device.ssm.measures", "TTC",
            "--device.ssm.thresholds", "2.0", "--device.ssm.trajectories", "true",
            "--device.ssm.file", str(ssm))  # fmt: skip
    cfg = EnvConfig(metrics=False, sumo_args=args, ttc_threshold=2.0, max_nodes=256)
    env = TrafficSignalCore(cfg, scenario=default_sc.replace(end=600.0))
    observed: dict[float, set[str]] = {}
    env_flags: dict[float, set[str]] = {}  # the vehicles behind the env's count, per time
    env_total = 0.0
    try:
        env.reset(seed=0)
        k, done = 0, False
        while not done:
            _, _, _, trunc, infos = env.step({"A0": (k // 3) % 4})
            k, done = k + 1, trunc["__all__"]
            env_total += float(infos["A0"]["costs"][_LOW_TTC])
            frame = env.last_frames["A0"]
            observed[env.sim_time] = set(frame.ids)
            g = build_graph(frame, env.lights["A0"].centre, cfg.graph)
            low = g.edge_attr[:, 3] > 1.0 / cfg.ttc_threshold
            env_flags[env.sim_time] = {g.ids[v] for v in g.edge_index[1, low].tolist()}
    finally:
        env.close()
    by_time = _ssm_low_ttc(ssm, cfg.ttc_threshold)
    sumo = {t: by_time.get(t, set()) & ids for t, ids in observed.items()}
    sumo_total = sum(len(s) for s in sumo.values())
    assert sumo_total > 0 and env_total > 0
    assert sumo_total / 2 <= env_total <= 2 * sumo_total, (env_total, sumo_total)
    both = sum(len(sumo[t] & env_flags.get(t, set())) for t in sumo)
    assert sum(len(s) for s in env_flags.values()) == env_total
    assert both >= sumo_total / 2, (both, sumo_total, env_total)
