"""The authoritative safety shield: green phases, clearance transitions, min/max green, vetoes.

Built from the net's own link-state strings (``G``/``g`` green, ``y`` yellow, ``r`` red, ``s``
stop-priority, ``o``/``O`` off): the green phases of a light are its program's distinct phases that
show a green and no yellow. Between two greens, every link that loses its green shows yellow for
``yellow_time``, then red for ``all_red_time`` while links that keep their green stay green; only
then does the next green start. A switch in which no link loses its green needs no clearance.
A pedestrian crossing that loses its green (``crossing_clear`` > 0 on its link) turns red at once
(pedestrians get no yellow) and the next green waits until the last pedestrian who stepped onto it
can have crossed (its ``crossing_clear`` seconds), when that is longer than yellow + all-red.

The shield is a pure timed automaton (no SUMO): ``decide`` takes the agent's wish at a decision
time, applies it when feasible or the safe action when not (a veto, never a silent ignore), and
queues the timed link states that the environment pushes into SUMO. ``mask`` is the same
feasibility as an ``action_mask``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tj_rl.env.errors import ScenarioError

__all__ = [
    "Decision",
    "PhaseProgram",
    "RuleShield",
    "derive_program",
    "is_green_state",
]

_GREEN = frozenset("Gg")
_TRANSITION = frozenset("yYu")


def is_green_state(state: str) -> bool:
    """A green phase shows at least one green link and no yellow / red-yellow link."""
    return any(c in _GREEN for c in state) and not any(c in _TRANSITION for c in state)


def _keep_green(a: str, b: str) -> str:
    return "g" if "g" in (a, b) else "G"


@dataclass(frozen=True, kw_only=True)
class PhaseProgram:
    """The green phases of one light and the clearance states between any two of them."""

    tls_id: str
    greens: tuple[str, ...]
    durations: tuple[float, ...]
    yellow_time: float
    all_red_time: float
    # seconds a pedestrian needs to clear each link's crossing once its green ends (0: not a
    # crossing); empty: the light controls no crossing (topology.py computes it)
    crossing_clear: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if not self.greens:
            raise ScenarioError(f"traffic light {self.tls_id!r}: program has no green phase")
        lengths = {len(s) for s in self.greens}
        if len(lengths) != 1:
            raise ScenarioError(
                f"traffic light {self.tls_id!r}: green states differ in length {sorted(lengths)}"
            )
        if len(self.durations) != len(self.greens):
            raise ScenarioError(
                f"traffic light {self.tls_id!r}: {len(self.durations)} durations for {len(self.greens)} greens"
            )
        if self.crossing_clear and len(self.crossing_clear) != len(self.greens[0]):
            raise ScenarioError(
                f"traffic light {self.tls_id!r}: {len(self.crossing_clear)} crossing clearance "
                f"times for {len(self.greens[0])} links"
            )

    @property
    def n_greens(self) -> int:
        return len(self.greens)

    @property
    def n_links(self) -> int:
        return len(self.greens[0])

    def needs_clearance(self, i: int, j: int) -> bool:
        """True when some link that is green in phase i is not green in phase j."""
        a, b = self.greens[i], self.greens[j]
        return any(x in _GREEN and y not in _GREEN for x, y in zip(a, b, strict=True))

    def losing_crossings(self, i: int, j: int) -> list[int]:
        """Link indices of the crossings that are green in phase i and not in phase j."""
        a, b = self.greens[i], self.greens[j]
        return [
            k for k, c in enumerate(self.crossing_clear)
            if c > 0 and a[k] in _GREEN and b[k] not in _GREEN
        ]  # fmt: skip

    def clearance_time(self, i: int, j: int) -> float:
        """Seconds from a switch i -> j until green j shows: 0 without clearance, else yellow +
        all-red, or longer while a crossing that loses its green is still being cleared."""
        if i == j or not self.needs_clearance(i, j):
            return 0.0
        vehicles = self.yellow_time + self.all_red_time
        return max([vehicles, *(self.crossing_clear[k] for k in self.losing_crossings(i, j))])

    def yellow_state(self, i: int, j: int) -> str:
        a, b = self.greens[i], self.greens[j]
        crossing = self.crossing_clear or (0.0,) * len(a)
        out = []
        for x, y, c in zip(a, b, crossing, strict=True):
            if x in _GREEN:
                out.append(_keep_green(x, y) if y in _GREEN else ("r" if c > 0 else "y"))
            else:
                out.append(x if x == y or x in "rs" else "r")
        return "".join(out)

    def all_red_state(self, i: int, j: int) -> str:
        a, b = self.greens[i], self.greens[j]
        out = []
        for x, y in zip(a, b, strict=True):
            if x in _GREEN and y in _GREEN:
                out.append(_keep_green(x, y))
            elif x == y and x in "sOo":
                out.append(x)
            else:
                out.append("r")
        return "".join(out)

    def transition(self, i: int, j: int) -> tuple[tuple[float, str], ...]:
        """(offset s, state) pairs from the switch decision until green j shows (memoised)."""
        cache = self.__dict__.setdefault("_transitions", {})
        if (i, j) not in cache:
            cache[(i, j)] = self._transition(i, j)
        return cache[(i, j)]

    def _transition(self, i: int, j: int) -> tuple[tuple[float, str], ...]:
        if i == j:
            return ()
        if not self.needs_clearance(i, j):
            return ((0.0, self.greens[j]),)
        total = self.clearance_time(i, j)
        steps: list[tuple[float, str]] = [(0.0, self.yellow_state(i, j))]
        if total > self.yellow_time:
            steps.append((self.yellow_time, self.all_red_state(i, j)))
        steps.append((total, self.greens[j]))
        return tuple(steps)


def derive_program(
    tls_id: str,
    phases: Sequence[tuple[str, float]],
    *,
    yellow_time: float,
    all_red_time: float,
) -> PhaseProgram:
    """Green phases (distinct, in program order, with their program durations) of a light."""
    greens: list[str] = []
    durations: list[float] = []
    for state, duration in phases:
        if is_green_state(state) and state not in greens:
            greens.append(state)
            durations.append(float(duration))
    if not greens:
        raise ScenarioError(
            f"traffic light {tls_id!r}: its program has no green phase "
            f"(states: {[s for s, _ in phases]})"
        )
    return PhaseProgram(
        tls_id=tls_id,
        greens=tuple(greens),
        durations=tuple(durations),
        yellow_time=yellow_time,
        all_red_time=all_red_time,
    )


@dataclass(kw_only=True, slots=True)
class Decision:
    """What the shield did with one request (a per-decision value: treat as read-only)."""

    requested: int
    applied: int
    vetoed: bool
    reason: str  # "" when not vetoed, else "clearance", "min_green" or "max_green"


class RuleShield:
    """Min green, max green and clearance for one light; queues the timed states to apply."""

    def __init__(self, program: PhaseProgram, *, min_green: float, max_green: float) -> None:
        if not 0 <= min_green < max_green:
            raise ValueError(
                f"RuleShield({program.tls_id}): need 0 <= min_green < max_green, got {min_green}, {max_green}"
            )
        self.program = program
        self._n = program.n_greens
        self.min_green = float(min_green)
        self.max_green = float(max_green)
        self.current = 0
        self.green_since = 0.0
        self.vetoes = 0
        self._pending: deque[tuple[float, str]] = deque()

    def reset(self, t: float, initial: int = 0) -> None:
        """Start an episode at time ``t`` showing green ``initial``."""
        self.current = int(initial)
        self.green_since = float(t)
        self.vetoes = 0
        self._pending = deque([(float(t), self.program.greens[self.current])])

    def in_clearance(self, t: float) -> bool:
        return t < self.green_since

    def time_in_green(self, t: float) -> float:
        """Seconds the current green has shown at ``t`` (0 during clearance)."""
        return max(0.0, t - self.green_since)

    def mask(self, t: float) -> np.ndarray:
        """int8 [n_greens]: 1 where requesting that green at ``t`` is feasible."""
        return np.array(self.feasible(t), dtype=np.int8)

    def feasible(self, t: float) -> list[int]:
        """``mask(t)`` as a list (the env batches the lists of all lights into one array)."""
        n = self._n
        if t < self.green_since or t - self.green_since < self.min_green or n == 1:
            m = [0] * n
            m[self.current] = 1
        elif t - self.green_since >= self.max_green:
            m = [1] * n
            m[self.current] = 0
        else:
            m = [1] * n
        return m

    def _reason(self, t: float) -> str:
        if self.in_clearance(t):
            return "clearance"
        if t - self.green_since < self.min_green:
            return "min_green"
        return "max_green"

    def decide(self, t: float, action: int) -> Decision:
        """Apply ``action`` (a green index) at decision time ``t``, or the safe action if infeasible."""
        n = self._n
        if not 0 <= int(action) < n:
            raise ValueError(
                f"traffic light {self.program.tls_id!r}: action {action} outside [0, {n})"
            )
        mask = self.feasible(t)
        action = int(action)
        if mask[action]:
            applied, vetoed, reason = action, False, ""
        else:
            vetoed, reason = True, self._reason(t)
            self.vetoes += 1
            if mask[self.current]:
                applied = self.current
            else:  # max green: the next green in program order
                applied = next(
                    (self.current + k) % n for k in range(1, n + 1) if mask[(self.current + k) % n]
                )
        if applied != self.current:
            steps = self.program.transition(self.current, applied)
            for offset, state in steps:
                self._pending.append((t + offset, state))
            self.current = applied
            self.green_since = t + steps[-1][0]
        return Decision(requested=action, applied=applied, vetoed=vetoed, reason=reason)

    def pop_events(self, until: float) -> list[tuple[float, str]]:
        """Queued (time, state) changes with time < ``until``, removed from the queue."""
        out = []
        while self._pending and self._pending[0][0] < until - 1e-9:
            out.append(self._pending.popleft())
        return out
