"""Warnings the trainer's users should not see on every start (imported first by the package).

PyG, imported through tj-models, still calls ``torch.jit.script``, which torch deprecates with a
FutureWarning at import time, in the main process and again in every spawned rank: nothing a
trainer user can act on. Only that message is silenced; every other warning is shown.
"""

import warnings

__all__: list[str] = []

warnings.filterwarnings(
    "ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning
)
