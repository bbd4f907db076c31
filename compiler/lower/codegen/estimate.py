"""The compile-time estimate: cycles of a layer's events on the three units, tile by tile.

Each event's cycles come from the ISA's cost functions (targets/isa/cost.py: the same
functions the simulator charges). What this model adds is the overlap: events run in the
order the emitter gives them (by key: loads a tile ahead, stores a tile behind), each
unit in order, each event after the events it depends on (its buffer's previous reader,
the load that fills its operand, the compute that fills its accumulators). That is the
schedule the emitted tokens enforce, at the grain of tiles; the simulator runs the
instructions themselves, with the exact token waits. tests/lower/test_zoo_programs.py keeps
the two within 4% on every zoo subgraph, tests/lower/test_estimate_check.py on the anchors
too, and shows that a cost changed on the simulator's side alone breaks that.

    pipeline(events, deps, clock) -> (finish times, clock after)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vpuc.targets.isa.formats import Unit

QUEUES = (Unit.DMA, Unit.MAC, Unit.VEC)


@dataclass
class Clock:
    """When each unit is next free, and when each tensor's last write ends."""

    free: dict[Unit, int] = field(default_factory=lambda: dict.fromkeys(QUEUES, 0))
    ready: dict[str, int] = field(default_factory=dict)

    @property
    def now(self) -> int:
        return max(self.free.values())


def order(keys: list[float]) -> list[int]:
    """Event indices by key, ties in generation order (what the emitter does too)."""
    return sorted(range(len(keys)), key=lambda i: (keys[i], i))


def pipeline(
    units: list[Unit],
    cycles: list[int],
    keys: list[float],
    deps: list[list[int]],
    clock: Clock,
    waits: list[int] | None = None,
) -> list[int]:
    """End cycle of every event; `waits[i]` is an external ready time (an input tensor's)."""
    end = [0] * len(units)
    for i in order(keys):
        start = clock.free[units[i]]
        if waits is not None:
            start = max(start, waits[i])
        for d in deps[i]:
            start = max(start, end[d])
        end[i] = start + cycles[i]
        clock.free[units[i]] = end[i]
    return end
