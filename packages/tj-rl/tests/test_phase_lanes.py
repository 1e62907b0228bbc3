"""``phase_lanes`` (tj-rl 0.6): what each green serves, in the ``lanes`` row order, padded and cut
like ``lanes``; an observation never aliases the env's copy."""

from __future__ import annotations

import numpy as np

from tj_rl.env import EnvConfig, Scenario, TrafficSignalCore


def test_phase_lanes_match_the_lights_green_links(default_sc: Scenario) -> None:
    env = TrafficSignalCore(EnvConfig(metrics=False), scenario=default_sc)
    try:
        obs, _ = env.reset(seed=1)
        light = env.lights["A0"]
        pl = obs["A0"]["phase_lanes"]
        moves = light.phase_movements()  # [P, n_in, n_out]
        assert pl.shape == (light.program.n_greens, light.n_in + light.n_out)
        assert pl.dtype == np.int8 and env.observation_spaces["A0"].contains(obs["A0"])
        assert np.array_equal(pl[:, : light.n_in] == 1, moves.any(axis=2))
        assert np.array_equal(pl[:, light.n_in :] == -1, moves.any(axis=1))
        assert set(np.unique(pl[:, : light.n_in])) <= {0, 1}
        assert set(np.unique(pl[:, light.n_in :])) <= {-1, 0}
        pl[:] = 0  # a policy scribbling on its observation changes nothing for the next step
        nxt, *_ = env.step({"A0": 0})
        assert nxt["A0"]["phase_lanes"].any()
    finally:
        env.close()


def test_phase_lanes_are_padded_and_cut_like_lanes(default_sc: Scenario) -> None:
    env = TrafficSignalCore(EnvConfig(metrics=False, max_phases=6, max_lanes=16),
                            scenario=default_sc)  # fmt: skip
    try:
        obs, _ = env.reset(seed=1)
        light = env.lights["A0"]
        pl = obs["A0"]["phase_lanes"]
        assert pl.shape == (6, 16)
        assert not pl[light.program.n_greens :].any()  # padded actions serve nothing
        full = light.phase_lanes()
        assert np.array_equal(pl[: light.program.n_greens], full[:, :16])  # rows beyond: cut
        assert env.observation_spaces["A0"].contains(obs["A0"])
    finally:
        env.close()
