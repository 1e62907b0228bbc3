"""The shield as a pure timed automaton: programs, clearance states, min/max green, vetoes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tj_rl.env import PhaseProgram, RuleShield, ScenarioError, derive_program

PHASES = [
    ("GGGgrrrrGGGgrrrr", 33),
    ("yyygrrrryyygrrrr", 3),
    ("rrrGrrrrrrrGrrrr", 6),
    ("rrryrrrrrrryrrrr", 3),
    ("rrrrGGGgrrrrGGGg", 33),
    ("rrrryyygrrrryyyg", 3),
    ("rrrrrrrGrrrrrrrG", 6),
    ("rrrrrrryrrrrrrry", 3),
]


def _program(yellow: float = 3.0, all_red: float = 2.0) -> PhaseProgram:
    return derive_program("A0", PHASES, yellow_time=yellow, all_red_time=all_red)


def test_greens_and_transitions() -> None:
    p = _program()
    assert p.greens == (
        "GGGgrrrrGGGgrrrr",
        "rrrGrrrrrrrGrrrr",
        "rrrrGGGgrrrrGGGg",
        "rrrrrrrGrrrrrrrG",
    )
    assert p.durations == (33.0, 6.0, 33.0, 6.0)
    # the permissive left (g) continues as a protected left (G): only the others clear
    assert p.transition(0, 1) == (
        (0.0, "yyygrrrryyygrrrr"),
        (3.0, "rrrgrrrrrrrgrrrr"),
        (5.0, "rrrGrrrrrrrGrrrr"),
    )
    # no link loses its green: immediate switch, no clearance
    assert p.transition(1, 0) == ((0.0, "GGGgrrrrGGGgrrrr"),)
    assert p.transition(0, 2)[1] == (3.0, "r" * 16)
    assert _program(all_red=0).transition(0, 2) == (
        (0.0, "yyyyrrrryyyyrrrr"),
        (3.0, "rrrrGGGgrrrrGGGg"),
    )


def test_no_green_is_an_error() -> None:
    with pytest.raises(ScenarioError, match="'J9': its program has no green phase"):
        derive_program("J9", [("rrrr", 10), ("yyyy", 3)], yellow_time=3, all_red_time=1)


def test_min_max_green_and_clearance_vetoes() -> None:
    sh = RuleShield(_program(), min_green=10, max_green=30)
    sh.reset(0.0)
    assert sh.mask(0.0).tolist() == [1, 0, 0, 0]
    d = sh.decide(0.0, 2)  # before min green
    assert (d.applied, d.vetoed, d.reason) == (0, True, "min_green")
    d = sh.decide(10.0, 2)
    assert (d.applied, d.vetoed) == (2, False) and sh.green_since == 15.0
    assert sh.in_clearance(12.0) and sh.mask(12.0).tolist() == [0, 0, 1, 0]
    d = sh.decide(12.0, 0)  # switching during clearance
    assert (d.applied, d.vetoed, d.reason) == (2, True, "clearance")
    d = sh.decide(45.0, 2)  # held 30 s = max green: must move on (next in program order)
    assert (d.applied, d.vetoed, d.reason) == (3, True, "max_green")
    assert sh.vetoes == 3
    events = sh.pop_events(100.0)
    assert [t for t, _ in events] == [0.0, 10.0, 13.0, 15.0, 45.0, 48.0, 50.0]
    assert sh.pop_events(100.0) == []
    with pytest.raises(ValueError, match="action 7 outside"):
        sh.decide(60.0, 7)


def _timeline(events: list[tuple[float, str]], end: float) -> list[str]:
    """State shown during each second [k, k+1)."""
    out, cur, i = [], None, 0
    for k in range(int(end)):
        while i < len(events) and events[i][0] <= k:
            cur = events[i][1]
            i += 1
        out.append(cur)
    return out


@settings(max_examples=300, deadline=None)
@given(
    actions=st.lists(st.integers(0, 3), min_size=1, max_size=40),
    delta=st.sampled_from([5, 10]),
    all_red=st.sampled_from([0, 1, 2]),
    min_green=st.sampled_from([5, 10, 15]),
)
def test_shield_property(
    check_safe, actions: list[int], delta: int, all_red: int, min_green: int
) -> None:
    prog = _program(yellow=3.0, all_red=float(all_red))
    sh = RuleShield(prog, min_green=min_green, max_green=min_green + 20)
    sh.reset(0.0)
    vetoes = 0
    for k, a in enumerate(actions):
        feasible = bool(sh.mask(k * delta)[a])
        d = sh.decide(k * delta, a)
        vetoes += d.vetoed
        assert d.vetoed == (not feasible)
        assert sh.mask(k * delta).dtype == np.int8
    assert sh.vetoes == vetoes
    end = len(actions) * delta + 10
    states = _timeline(sh.pop_events(end), end)
    check_safe(states, prog.greens, yellow=3, all_red=all_red, min_green=min_green)
