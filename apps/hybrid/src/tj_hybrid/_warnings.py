"""Warnings the trainer's users should not see on every start.

PyG, imported through tj-models, still calls ``torch.jit.script``, which torch deprecates with a
FutureWarning at import time, in the main process and again in every spawned rank: nothing a
trainer user can act on. ``quiet_known_warnings()`` silences only that message; each phase
package that imports tj-models calls it first (spawned ranks import the phase package before
anything else, so they get it too).
"""

import warnings

__all__ = ["quiet_known_warnings"]


def quiet_known_warnings() -> None:
    warnings.filterwarnings(
        "ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning
    )
