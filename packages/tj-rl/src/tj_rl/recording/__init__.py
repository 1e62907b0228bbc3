"""The recording room: phase 1's traffic snapshots (DESIGN 4.3) and ``record_dataset``, which
writes them from SUMO worker processes into a tj-data store.
"""

# Names load on first use (PEP 562 via lazy_loader): importing the room imports none of its
# modules, so a process pays only for what it touches.
import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach(
    __name__,
    submod_attrs={
        "record": ["record_dataset"],
        "snapshot": ["SNAPSHOT_FIELDS", "RiskConfig", "SnapshotBuilder", "snapshot_schema"],
    },
)
