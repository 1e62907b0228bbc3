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
from typing import Any

__all__ = ["STATE_VERSION", "StateMismatchError", "check_state", "make_state", "pass_position"]

STATE_VERSION = 1
# keys of states written before this protocol (tj-data 0.1): old name -> new name
_LEGACY_KEYS = {"offset": "consumed", "num_replicas": "world_size"}


class StateMismatchError(ValueError):
    """A resumable state that does not belong to this object (another kind, dataset, seed, rank,
    world size, ...) or is malformed; the message names the key."""


def make_state(
    kind: str, *, epoch: int, consumed: int, identity: Mapping[str, Any]
) -> dict[str, Any]:
    """A state dict in the common layout (plain Python values: JSON- and weights_only-safe)."""
    return {
        "kind": kind,
        "version": STATE_VERSION,
        "epoch": int(epoch),
        "consumed": int(consumed),
        **identity,
    }


def check_state(
    state: Mapping[str, Any], *, kind: str, identity: Mapping[str, Any]
) -> dict[str, Any]:
    """The state, upgraded to the current layout, after checking it belongs to `kind` with
    `identity`; raises `StateMismatchError` naming the first key that differs.

    A state written before this protocol (no "version"; "offset" / "num_replicas" keys) loads:
    its keys are renamed, and identity keys it did not record are not checked."""
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
            f"{kind}.load_state_dict: state format version {out['version']!r}, this tj-data reads "
            f"version {STATE_VERSION}"
        )
    for key in ("epoch", "consumed"):
        if not isinstance(out.get(key), int) or out[key] < 0:
            raise StateMismatchError(
                f"{kind}.load_state_dict: state has {key}={out.get(key)!r}, expected an int >= 0"
                + (" (an old state needs 'offset' or 'consumed')" if legacy else "")
            )
    if out["kind"] != kind:
        raise StateMismatchError(
            f"{kind}.load_state_dict: the state was written by a {out['kind']}, not a {kind}"
        )
    for key, value in identity.items():
        if legacy and key not in out:
            continue
        if out.get(key) != value:
            raise StateMismatchError(
                f"{kind}.load_state_dict: state has {key}={out.get(key)!r}, this {kind} has "
                f"{value!r}; an exact resume needs the same {key}"
            )
    return out


def pass_position(
    epoch: int, resume: int | None, pass_epoch: int | None, consumed: int
) -> tuple[int, int]:
    """(epoch, consumed) of an iterable dataset: the loaded position while its pass has not
    started (``resume``), else the running pass's, else the start of ``epoch``."""
    if resume is not None:
        return epoch, resume
    if pass_epoch is not None:
        return pass_epoch, consumed
    return epoch, 0
