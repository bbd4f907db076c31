"""Tiling: what every layer's planner shares, and the dispatch to them.

    tile_mac.py     conv, dense (a 1x1 conv), matmul of two activations
    tile_vector.py  pools, add, mul, lookup tables, rescale

A planner enumerates choices (rows per tile, channels per tile, loop order, whether the
weights stay resident), keeps those whose working set fits the SRAM left by the resident
tensors, builds each one's events and keeps the one the estimate (estimate.py) finds
fastest, then the one that moves fewer DRAM bytes.

`Events` builds a layer's events: each reads and writes (buffer, slot) pairs, so the
dependencies between them follow from generation order (read after write, write after
read and write); rings rotate their slots (double buffering).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from vpuc.compiler.lower.codegen.estimate import Clock, pipeline
from vpuc.compiler.lower.codegen.plan import Addr, Buffer, Event, OpPlan, Spec, View
from vpuc.compiler.lower.codegen.residency import Placement, aligned
from vpuc.targets import Target
from vpuc.targets.isa.cost import instruction_cycles, softmax_round_trip_bytes
from vpuc.targets.isa.dma_cost import dma_port
from vpuc.targets.isa.formats import Opcode, Unit

# A tile's store is keyed a tile behind it (step + STORE_KEY), its input loads a tile ahead
# (step - 1): a quarter step more puts the load of tile t + 2 ahead of the store of tile t in
# the DMA unit's queue, so it is not held behind that tile's requantisation (the DMA unit
# takes its transfers in order) while the MAC array waits for its input.
STORE_KEY = 1.25

# Whether an Events keeps what its estimate reads of the events whatever the clock (_fixed)
# for its next estimate, prefetch.choose estimates a layer's unchanged events with the same
# Events, and a one-transfer DMA event's transfer takes the event's cycles (spec_transfers);
# off, each estimate derives them again (the same figures).
KEEP_FIXED = True

UNIT_OF_OPCODE = {
    Opcode.LOAD: Unit.DMA,
    Opcode.STORE: Unit.DMA,
    Opcode.CONV: Unit.MAC,
    Opcode.MATMUL: Unit.MAC,
}


def spec_cycles(spec: Spec, target: Target) -> int:
    """The cycles of one spec by the ISA's cost functions (addresses do not matter);
    memoised on the spec's fields (a planner costs the same instruction many times)."""
    hw, fields = target.hardware, spec.fields
    # the class and the field names and values (addresses as 0) fix the opcode as well
    values = tuple([0 if v.__class__ is Addr else v for v in fields.values()])
    key = (spec.cls, id(hw), tuple(fields), values)
    try:
        found = _CYCLES.get(key)
    except TypeError:  # a field that is not hashable: not memoised
        return _spec_cycles(spec, dict(zip(fields, values, strict=True)), hw)
    if found is None or found[0] is not hw:
        if len(_CYCLES) >= _CYCLES_MAX:
            _CYCLES.clear()
        found = _CYCLES[key] = (hw, _spec_cycles(spec, dict(zip(fields, values, strict=True)), hw))
    return found[1]


_CYCLES: dict[tuple, tuple] = {}  # key -> (the hardware, cycles); the hardware checks the id
_CYCLES_MAX = 1 << 16


def _spec_cycles(spec: Spec, fields: dict, hw) -> int:
    fields.setdefault("opcode", spec.opcode)
    defaults = {f: d for f, d in _defaults(spec.cls).items() if f not in fields}
    return instruction_cycles(SimpleNamespace(**defaults, **fields), hw)


def spec_transfers(event, target: Target) -> list[tuple[str, int]]:
    """A DMA event's transfers as (port, cycles) (targets/isa/cost.py dma_port); [] else."""
    if event.unit != Unit.DMA:
        return []
    def port(spec) -> str:
        return dma_port(SimpleNamespace(region=spec.fields.get("region", 0)), target.hardware)

    specs = event.specs
    if len(specs) == 1 and KEEP_FIXED:  # its cycles are the spec's (Events.add, prefetch._spread)
        return [(port(specs[0]), event.cycles)]
    return [(port(spec), spec_cycles(spec, target)) for spec in specs]


_DEFAULTS: dict[type, dict] = {}


def _defaults(cls) -> dict:
    if cls not in _DEFAULTS:
        from dataclasses import MISSING, fields

        _DEFAULTS[cls] = {f.name: f.default for f in fields(cls) if f.default is not MISSING}
    return _DEFAULTS[cls]


@dataclass
class Context:
    """What a planner reads: the target, the subgraph's placement and the SRAM it may use."""

    target: Target
    placement: Placement
    index: int  # the op's position in the subgraph
    budget: int  # SRAM bytes for this layer's buffers
    key_base: float = 0.0
    # (an earlier layer with events, the SRAM bytes free from it up to this layer), nearest
    # first: where a prefetched buffer may start being live (buffer())
    prefetch_rooms: tuple[tuple[int, int], ...] = ()
    prefetch_roles: frozenset[str] = frozenset()  # the buffer roles that may use them

    @property
    def hw(self):
        return self.target.hardware

    def view(self, tensor: str) -> View:
        return self.placement.views[tensor]

    def in_dram(self, tensor: str) -> bool:
        return self.placement.home(tensor) == "dram"

    def storage_addr(self, view: View, offset: int) -> Addr:
        return Addr(view.storage, view.offset + offset)


@dataclass
class Events:
    """A layer's events under construction, with their (buffer, slot) reads and writes."""

    ctx: Context
    events: list[Event] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)

    def slot(self, buffer: Buffer) -> int:
        """The next slot of a ring (advances it)."""
        count = self.counters.get(buffer.name, 0)
        self.counters[buffer.name] = count + 1
        return count % buffer.slots

    def add(
        self,
        what: str,
        specs: list[Spec],
        key: float,
        reads=(),
        writes=(),
        tensors=(),
        cycles: int | None = None,
    ) -> int:
        """Append an event of `specs`; `cycles`, when the caller has them (a memo of the
        same specs' spec_cycles sum), spares costing them again."""
        unit = UNIT_OF_OPCODE.get(specs[0].opcode, Unit.VEC)
        target = self.ctx.target
        if cycles is None:
            cycles = (
                spec_cycles(specs[0], target)
                if len(specs) == 1
                else sum([spec_cycles(s, target) for s in specs])
            )
        event = Event(
            unit, specs, self.ctx.key_base + key, what, cycles, list(reads), list(writes), list(tensors)
        )
        self.events.append(event)
        return len(self.events) - 1

    def dependencies(self) -> list[list[int]]:
        """For every event, the earlier events it must follow (RAW, WAR, WAW per slot)."""
        last_write: dict[tuple[str, int], int] = {}
        readers: dict[tuple[str, int], list[int]] = {}
        deps: list[list[int]] = []
        for i, event in enumerate(self.events):
            reads, writes = event.reads, event.writes
            found = {last_write[key] for key in reads if key in last_write}
            for key in writes:
                if key in last_write:
                    found.add(last_write[key])
                if key in readers:
                    found.update(readers[key])
            for key in reads:
                if key in readers:
                    readers[key].append(i)
                else:
                    readers[key] = [i]
            for key in writes:
                last_write[key] = i
                readers[key] = []
            deps.append(sorted(found))
        return deps

    def estimate(self, clock: Clock, output: str | None = None) -> int:
        """Run the events on `clock` (advancing it); returns the layer's cycles."""
        if not self.events:
            return 0
        start, ready = clock.now, clock.ready
        waits = [max([ready.get(t, 0) for t in e.tensors]) if e.tensors else 0 for e in self.events]
        units, cycles, keys, deps, transfers = self._fixed()
        end = pipeline(units, cycles, keys, deps, clock, waits, transfers, self.ctx.target.hardware)
        if output is not None:
            clock.ready[output] = max(end)
        for event, ended in zip(self.events, end, strict=True):
            if event.what == "weights":  # a later layer's prefetch waits for it by name
                for name, _ in event.writes:
                    clock.ready[name] = ended
            for name in event.marks:  # a later load waits for the last access to its bytes
                clock.ready[name] = max(clock.ready.get(name, 0), ended)
        return max(end) - start

    def _fixed(self) -> tuple:
        """What the estimate reads of the events whatever the clock: their units, cycles,
        keys, dependencies and transfers; kept while the list is the same object of the same
        length (prefetch.estimate_cycles estimates a layer's events once per trial)."""
        kept = self.__dict__.get("_kept")
        if kept is not None and kept[0] is self.events and kept[1] == len(self.events):
            return kept[2]
        events, target = self.events, self.ctx.target
        fixed = (
            [e.unit for e in events],
            [e.cycles for e in events],
            [e.key for e in events],
            self.dependencies(),
            [spec_transfers(e, target) for e in events],
        )
        if KEEP_FIXED:
            self._kept = (events, len(events), fixed)
        return fixed

    def finish(self, plan: OpPlan) -> OpPlan:
        plan.events = self.events
        return plan


def buffer(ctx: Context, role: str, slot_bytes: int, slots: int, prefetch: bool = False) -> Buffer:
    """A working buffer of the current layer. A prefetched one (weights, a table) is live
    from the earliest layer of `ctx.prefetch_rooms` whose room it fits (up to this one): its
    load then runs while that layer computes (emit.py moves it into that layer's events)."""
    size = aligned(slot_bytes)
    first = ctx.index
    if prefetch and role in ctx.prefetch_roles:
        for index, room in ctx.prefetch_rooms:
            if size * slots > room:
                break
            first = index
    return Buffer(f"L{ctx.index}.{role}", size, slots, first, ctx.index)


def count_dram(plan: OpPlan, ev: Events, hw) -> None:
    """Add the DRAM bytes of the plan's LOAD and STORE specs to its counters, and a
    softmax's passes through DRAM (cost.softmax_round_trip_bytes)."""
    for event in ev.events:
        for spec in event.specs:
            opcode = spec.opcode
            if opcode == Opcode.SOFTMAX:
                nbytes = softmax_round_trip_bytes(hw, spec.fields["rows"] * spec.fields["depth"])
                plan.dram_read_bytes += nbytes
                plan.dram_write_bytes += nbytes
            if opcode == Opcode.LOAD or opcode == Opcode.STORE:
                f = spec.fields
                nbytes = f["row_bytes"] * f.get("rows", 1) * f.get("planes", 1)
                if opcode == Opcode.LOAD:
                    plan.dram_read_bytes += nbytes
                else:
                    plan.dram_write_bytes += nbytes


def working_set(buffers: list[Buffer]) -> int:
    return sum(b.nbytes for b in buffers)


def halo(out_rows: tuple[int, int], size: int, kernel: int, stride: int, dilation: int, pad_before: int):
    """Input rows [i0, i1) that output rows [r0, r1) read, and the padding they need above
    and below: (i0, i1, pad_top, pad_bottom)."""
    r0, r1 = out_rows
    start = r0 * stride - pad_before
    end = (r1 - 1) * stride - pad_before + (kernel - 1) * dilation + 1
    i0, i1 = max(0, start), min(size, end)
    return i0, i1, i0 - start, end - i1


def bands(rows: int, per: int) -> list[tuple[int, int]]:
    return [(r, min(rows, r + per)) for r in range(0, rows, per)]


def band_options(rows: int) -> list[int]:
    """Rows per tile to try: all, then halves down to one."""
    options, per = [], rows
    while per >= 1:
        if per not in options:
            options.append(per)
        if per == 1:
            break
        per = max(1, -(-per // 2))
    return options
