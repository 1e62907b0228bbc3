"""The traffic room: demand pools (route files generated once and cached: randomTrips, or
variations of a scenario's own demand) and the disjoint training / held-out sets evaluation
draws from.
"""

# Names load on first use (PEP 562 via lazy_loader): importing the room imports none of its
# modules, so a process pays only for what it touches.
import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach(
    __name__,
    submod_attrs={
        "demand": ["DemandPool", "DemandSet", "DemandSpec", "RoutePool", "generate_demand"],
        "routes": ["Departure", "is_complete", "pick_index", "pick_route", "read_departures"],
        "variations": ["ORIGINAL", "Variation", "VariationPool", "write_variation"],
    },
)
