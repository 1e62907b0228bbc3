"""The imitation room: learning from demonstrations (DemoLight-style). ``record_demonstrations``
runs a teacher (a baseline) or a student labelled by the teacher (DAgger) and keeps every light's
padded observation with the teacher's action and the discounted return; ``clone`` fits a graph
policy's controller to them (cross-entropy on the teacher's greens, the value head on the
returns). Names that need torch load on first use.
"""

import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach(
    __name__,
    submod_attrs={
        "demonstrations": ["Demonstrations", "discounted_returns", "record_demonstrations"],
        "config": ["CloneConfig"],
        "cloning": ["CloneResult", "clone", "value_weight"],
    },
)
