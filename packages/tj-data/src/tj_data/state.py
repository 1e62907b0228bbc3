"""One resumable-state protocol for everything in tj-data that has a position.

Samplers (`DistributedChunkSampler`, `ChunkShuffleSampler`, `ByteBudgetBatchSampler`), iterable
datasets (`StreamingGraphDataset`, `LiveGraphDataset`) and `PlannedLoader` are
`torch.distributed.checkpoint.stateful.Stateful`: `state_dict()` / `load_state_dict(state)`, no
arguments (a structural protocol: tj-data does not import it at run time, importing
torch.distributed.checkpoint costs ~0.6 s, measured). Every state holds the same keys:

- "kind", "version": who wrote it (a state of another kind is refused), format version;
- "epoch": the epoch of the pass; "consumed": items of that epoch consumed (samples for index
  samplers and sample streams, batches for batch samplers, batched streams and loaders);
- identity keys ("dataset" fingerprint, "seed", "rank", "world_size", ...): a state is valid only
  for the same setup, so `load_state_dict` refuses another one with `StateMismatchError`.

`Resumable` owns that round trip once (torchdata nodes' shape: a class writes `get_state` /
`reset(initial_state)`, the base class `state_dict` / `load_state_dict`): a class declares its
integer position fields (`state_fields`, default "epoch" and "consumed") and writes three hooks,
`_state_identity()`, `_get_position()` and `_reset_position(state)`; the mixin adds "kind" and
"version", validates the fields and the identity, and upgrades tj-data 0.1 states.
`SamplerPosition` and `StreamPosition` are the two positions built on it (a sampler's epoch is
set from outside, a stream advances its own).
`DynamicBatchSize` keeps its controller state the same way (fields "batch_size" and "step").

`state_dict()` is the position after what the object has handed out; the next `__iter__` after a
`load_state_dict` continues exactly there. How the training loop reports what it consumed: iterate
a `PlannedLoader` and take `loader.state_dict()` right after receiving each batch (a small dict, no
I/O); the state kept with the last batch the step used is the one to checkpoint (look-ahead
wrappers and prefetching workers are then never counted).

Why not torchdata's `StatefulDataLoader` (0.11, its last release): its state is tied to
`num_workers` (a 2-worker loader's state loaded into a 0- or 3-worker one fails with a bare
AssertionError, measured on torch 2.15), while `plan_loader` may pick another worker count for the
resumed run; and it forks torch's DataLoader iterators (2.4k lines) where `PlannedLoader` records
its sampler's state per batch in ~100.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

__all__ = [
    "STATE_VERSION",
    "Resumable",
    "SamplerPosition",
    "StateMismatchError",
    "StreamPosition",
]

STATE_VERSION = 1
# keys of states written before this protocol (tj-data 0.1): old name -> new name
_LEGACY_KEYS = {"offset": "consumed", "num_replicas": "world_size"}


class StateMismatchError(ValueError):
    """A resumable state that does not belong to this object (another kind, dataset, seed, rank,
    world size, ...) or is malformed; the message names the key."""


class Resumable:
    """Mixin: `state_dict()` / `load_state_dict(state)` in the common layout, validated once here.

    A class writes the hooks; the mixin checks a loaded state's kind (the class name), format
    version, declared integer fields (each an int >= 0) and identity, naming the first key that
    differs (`StateMismatchError`), before `_reset_position` sees it.
    """

    state_fields: ClassVar[tuple[str, ...]] = ("epoch", "consumed")

    def _state_identity(self) -> dict[str, Any]:
        """What a saved position is only valid for (compared on load); default: nothing."""
        return {}

    def _get_position(self) -> dict[str, Any]:
        """The position now: every name of `state_fields` (plus any further keys)."""
        raise NotImplementedError

    def _reset_position(self, state: dict[str, Any]) -> None:
        """Continue from a checked state (the next pass starts at its position)."""
        raise NotImplementedError

    def _consumed_limit(self, state: dict[str, Any]) -> tuple[int, str] | None:
        """(most items an epoch has, what they are) to refuse a larger "consumed"; default none."""
        return None

    def state_dict(self) -> dict[str, Any]:
        """The position after what this object handed out, with its kind, version and identity
        (plain Python values: JSON- and weights_only-safe)."""
        position = self._get_position()
        for key in self.state_fields:
            position[key] = int(position[key])
        return {
            "kind": type(self).__name__,
            "version": STATE_VERSION,
            **position,
            **self._state_identity(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from `state` (see `_reset_position`); a state of another kind or setup, or a
        malformed one, raises `StateMismatchError` and changes nothing."""
        st = self._check_state(state)
        limit = self._consumed_limit(st)
        if limit is not None and st["consumed"] > limit[0]:
            raise StateMismatchError(
                f"{type(self).__name__}.load_state_dict: consumed={st['consumed']} exceeds the "
                f"{limit[0]} {limit[1]}"
            )
        self._reset_position(st)

    def _check_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """The state, upgraded to the current layout, after checking it belongs here.

        A state written before this protocol (no "version"; "offset" / "num_replicas" keys)
        loads: its keys are renamed, and identity keys it did not record are not checked."""
        kind = type(self).__name__
        if not isinstance(state, Mapping):
            raise StateMismatchError(
                f"{kind}.load_state_dict: expected a dict, got {type(state).__name__}"
            )
        out = dict(state)
        legacy = "version" not in out
        if legacy:
            for old, new in _LEGACY_KEYS.items():
                if old in out and new not in out:
                    out[new] = out.pop(old)
            out.setdefault("kind", kind)
            out["version"] = STATE_VERSION
        elif out["version"] != STATE_VERSION:
            raise StateMismatchError(
                f"{kind}.load_state_dict: state format version {out['version']!r}, this tj-data "
                f"reads version {STATE_VERSION}"
            )
        for key in self.state_fields:
            value = out.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise StateMismatchError(
                    f"{kind}.load_state_dict: state has {key}={value!r}, expected an int >= 0"
                    + (" (an old state needs 'offset' or 'consumed')" if legacy else "")
                )
        if out["kind"] != kind:
            raise StateMismatchError(
                f"{kind}.load_state_dict: the state was written by a {out['kind']}, not a {kind}"
            )
        for key, value in self._state_identity().items():
            if legacy and key not in out:
                continue
            if out.get(key) != value:
                raise StateMismatchError(
                    f"{kind}.load_state_dict: state has {key}={out.get(key)!r}, this {kind} has "
                    f"{value!r}; an exact resume needs the same {key}"
                )
        return out


class SamplerPosition(Resumable):
    """A sampler's position: `epoch` (set by `set_epoch`) and the items handed out in it
    ("consumed"); after a load the next pass continues there. Call `_init_position()` in
    `__init__`, `start = self._start_pass()` when a pass begins, count `self._consumed`."""

    epoch: int
    _consumed: int  # items handed out in this epoch
    _resume: bool  # the next pass continues at _consumed (after load_state_dict)

    def _init_position(self) -> None:
        self.epoch, self._consumed, self._resume = 0, 0, False

    def _start_pass(self) -> int:
        """Items of the epoch to skip: the loaded position once after a load, else 0."""
        start = self._consumed if self._resume else 0
        self._consumed, self._resume = start, False
        return start

    def set_epoch(self, epoch: int) -> None:
        """The next pass is `epoch` from its start; the epoch of a just loaded state keeps the
        loaded position (so `load_state_dict` then `set_epoch(state["epoch"])` resumes)."""
        epoch = int(epoch)
        if not (self._resume and epoch == self.epoch):
            self.epoch, self._consumed, self._resume = epoch, 0, False

    def _get_position(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "consumed": self._consumed}

    def _reset_position(self, state: dict[str, Any]) -> None:
        self.epoch, self._consumed, self._resume = state["epoch"], state["consumed"], True


class StreamPosition(Resumable):
    """An iterable dataset's position: each pass streams `epoch`, then advances it (persistent
    workers move on by themselves); "consumed" counts the items of the running pass. Call
    `_init_position()` in `__init__`, `epoch, resume = self._start_pass()` when a pass begins,
    count `self._consumed`."""

    epoch: int  # epoch of the next pass
    _pass_epoch: int | None  # epoch of the pass started in this process
    _consumed: int  # items handed out in the current pass (a resumed pass starts above 0)
    _resume: int | None  # items of the next pass already consumed (after load_state_dict)

    def _init_position(self) -> None:
        self.epoch, self._pass_epoch, self._consumed, self._resume = 0, None, 0, None

    def _start_pass(self) -> tuple[int, int | None]:
        """(epoch of the pass that starts now, items of it consumed before a load or None)."""
        epoch, resume = self.epoch, self._resume
        self._pass_epoch, self.epoch = epoch, epoch + 1
        self._consumed, self._resume = resume or 0, None
        return epoch, resume

    def set_epoch(self, epoch: int) -> None:
        """The next pass is `epoch` from its start (a just loaded state's epoch keeps its
        position)."""
        epoch = int(epoch)
        if not (self._resume is not None and epoch == self.epoch):
            self.epoch, self._resume, self._pass_epoch, self._consumed = epoch, None, None, 0

    def _get_position(self) -> dict[str, Any]:
        """The loaded position while its pass has not started, else the running pass's, else
        the start of the next epoch."""
        if self._resume is not None:
            return {"epoch": self.epoch, "consumed": self._resume}
        if self._pass_epoch is not None:
            return {"epoch": self._pass_epoch, "consumed": self._consumed}
        return {"epoch": self.epoch, "consumed": 0}

    def _reset_position(self, state: dict[str, Any]) -> None:
        """The next pass continues epoch `state["epoch"]` from `state["consumed"]` on."""
        self.epoch, self._resume, self._pass_epoch = state["epoch"], state["consumed"], None
