"""The compile-time estimate: cycles of a layer's events on the three units, tile by tile.

Each event's cycles come from the ISA's cost functions (targets/isa/cost.py: the same
functions the simulator charges). What this model adds is the overlap: events run in the
order the emitter gives them (by key: loads a tile ahead, stores a tile behind), each
unit in order, each event after the events it depends on (its buffer's previous reader,
the load that fills its operand, the compute that fills its accumulators). That is the
schedule the emitted tokens enforce, at the grain of tiles; the simulator runs the
instructions themselves, with the exact token waits. tests/lower/test_zoo_programs.py keeps
the two within 4% on every zoo subgraph, tests/lower/test_estimate_check.py on the anchors
too, and shows that a cost changed on the simulator's side alone breaks that. DMA events
run their transfers through the ISA's port rule (targets/isa/cost.py `DmaPorts`), as the
simulator does: transfers on two ports, or several in flight on one, overlap. With
issue_order = "before_wait" an event's issue runs while it waits on the events before it
(targets/isa/cost.py `issue_overlap`), as an instruction's does in the simulator, and with
mac_load_order = "before_wait" a MAC event's first weight load too (`wait_overlap`).

    pipeline(events, deps, clock) -> (finish times, clock after)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vpuc.targets.isa.cost import wait_overlap
from vpuc.targets.isa.dma_cost import DmaPorts
from vpuc.targets.isa.formats import Unit
from vpuc.targets.model import Hardware

QUEUES = (Unit.DMA, Unit.MAC, Unit.VEC)


@dataclass
class Clock:
    """When each unit is next free, and when each tensor's last write ends."""

    free: dict[Unit, int] = field(default_factory=lambda: dict.fromkeys(QUEUES, 0))
    ready: dict[str, int] = field(default_factory=dict)
    ports: DmaPorts | None = None  # the DMA unit's ports, once a layer has run transfers
    dma_retired: int = 0  # when every transfer so far has ended (the DMA unit retires in order)

    @property
    def now(self) -> int:
        return max(*self.free.values(), self.ports.drained if self.ports else 0)

    def copy(self) -> Clock:
        """An independent copy: the clock as it is now, to run other schedules on from here."""
        ports = self.ports.copy() if self.ports is not None else None
        return Clock(dict(self.free), dict(self.ready), ports, self.dma_retired)

    def dma_ports(self, hw: Hardware) -> DmaPorts:
        if self.ports is None:
            self.ports = DmaPorts(hw)
            self.ports.taken = self.free[Unit.DMA]
        return self.ports


def order(keys: list[float]) -> list[int]:
    """Event indices by key, ties in generation order (what the emitter does too)."""
    return sorted(range(len(keys)), key=keys.__getitem__)  # (a stable sort keeps the ties in order)


def pipeline(
    units: list[Unit],
    cycles: list[int],
    keys: list[float],
    deps: list[list[int]],
    clock: Clock,
    waits: list[int] | None = None,
    transfers: list[list[tuple[str, int]]] | None = None,
    hw: Hardware | None = None,
    sequence: list[int] | None = None,
) -> list[int]:
    """End cycle of every event; `waits[i]` is an external ready time (an input tensor's).
    With `transfers` (a DMA event's (port, cycles) per instruction) and `hw`, DMA events
    run their transfers on the DMA unit's ports; else each event holds its unit `cycles`.
    `sequence`: the order to take the events in (else by key, `order`)."""
    end = [0] * len(units)
    early = {u: wait_overlap(hw, u) if hw is not None else 0 for u in QUEUES}
    free, dma = clock.free, Unit.DMA
    with_ports = transfers is not None and hw is not None
    for i in sequence if sequence is not None else order(keys):
        ready = 0
        for d in deps[i]:
            if end[d] > ready:
                ready = end[d]
        if waits is not None and waits[i] > ready:
            ready = waits[i]
        unit = units[i]
        start = max(free[unit], ready - early[unit])  # the issue (a MAC's load) may overlap the wait
        if with_ports and unit == dma and transfers[i]:
            ports = clock.dma_ports(hw)
            ended = start
            for port, spec_cycles in transfers[i]:
                ended = max(ended, ports.run(port, ports.earliest(port, start), spec_cycles))
            end[i] = clock.dma_retired = max(ended, clock.dma_retired)  # retired in order
            free[dma] = ports.taken
            continue
        end[i] = start + cycles[i]
        free[unit] = end[i]
    return end
