"""Prefetches: a layer's weights or lookup table loaded while an earlier layer runs.

A planner marks the buffer of a layer's one-off constant load (whole weights, a table)
prefetchable, and the ring of streamed weights too, whose first block (or first block of
every slot) may then load early (tiling.buffer; its role one of PREFETCH_ROLES, which
`disabled` narrows). emit.py's layer planning offers it the SRAM free beside the buffers
and resident tensors of the last PREFETCH_DEPTH layers with events (`rooms`); the buffer is
then live from the earliest of them it fits. `choose` then decides, layer by layer, during
which of those layers the load runs and where among its transfers, or whether it stays at
its own layer's start: the choice for which the estimate of the whole subgraph
(estimate.py, the schedule the tokens enforce) is fastest; ties keep it at its own layer.
Early: after that layer's first tile's loads, so the DMA unit takes it while that layer
computes, whole or cut into pieces after each of its tiles' loads (`_spread`,
docs/targets.md "Hoisted weight loads in pieces"); late: after that layer's last load,
where it holds back none of that layer's loads (the DMA unit retires transfers in program
order, so a long flash load early in a layer would hold every later band of it), only its
last stores. Either way it does not wait behind the layer's last store while the flash (or
DRAM) port sits idle. The tokens order it against every other access to its bytes
(sync.py); the buffer's lifetime then starts at that layer, so no buffer or tensor live in
between shares its bytes (memory.py). Its instruction belongs to that layer (layer id, DRAM
bytes).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from vpuc.compiler.lower.codegen import cascade, tiling, transfer
from vpuc.compiler.lower.codegen.estimate import Clock
from vpuc.compiler.lower.codegen.plan import Addr, OpPlan
from vpuc.compiler.lower.codegen.residency import Placement, aligned
from vpuc.compiler.lower.codegen.tiling import Context, Events, spec_cycles
from vpuc.targets import Target

# How many layers with events back a prefetch may run: 4 reaches past stage-2's layers on
# resnet8 at u55-256, where the flash port idles (docs/targets.md "Prefetching further back").
PREFETCH_DEPTH = 4
# Where a prefetched load goes among the events of the layer it runs during: after that
# layer's first tile's loads (key -1 and earlier), before its second tile's (-0.5).
PREFETCH_KEY = -0.875
# Or after its last load: a quarter of the gap to a store keyed a tile behind (tiling.STORE_KEY).
LATE_KEY = 0.125


# Into how many transfers a load hoisted early may be cut, one after each of the host's
# tiles' loads (_spread).
PIECES = 8


PREFETCH_ROLES = frozenset({"w", "table"})  # buffers whose load may move: whole weights, a table


@contextmanager
def disabled(roles: frozenset[str] = PREFETCH_ROLES) -> Iterator[None]:
    """While it lasts no load into a buffer of these roles moves: it runs at its own layer's
    start, so that layer's span holds it (bench/vs_vela.py's like-for-like figures: Vela's
    per-op figure charges an op with its own weight reads)."""
    global PREFETCH_ROLES
    saved, PREFETCH_ROLES = PREFETCH_ROLES, PREFETCH_ROLES - roles
    try:
        yield
    finally:
        PREFETCH_ROLES = saved


def rooms(plans: list[OpPlan], free: list[int], index: int) -> tuple[tuple[int, int], ...]:
    """(layer, the SRAM free from it up to `index`) for the last PREFETCH_DEPTH layers
    with events, nearest first (a view between has no events: nothing runs during it).
    `free[t]`: the bytes no resident tensor, buffer or earlier prefetch takes at layer t."""
    found, room = [], None
    for t in range(index - 1, -1, -1):
        if len(found) >= PREFETCH_DEPTH:
            break
        room = free[t] if room is None else min(room, free[t])
        if plans[t].events:
            found.append((t, max(0, room)))
    return tuple(found)


def estimate_cycles(
    plans: list[OpPlan],
    placement: Placement,
    target: Target,
    start: int = 0,
    clock: Clock | None = None,
    snapshots: list[Clock] | None = None,
    no_sooner_than: tuple[list[Clock], dict[int, frozenset[str]]] | None = None,
    kept: dict | None = None,
) -> tuple[int | None, list]:
    """The subgraph's estimated cycles and each layer's (start, end) on one clock: from layer
    `start` on `clock` (the clock as it was before that layer), keeping in `snapshots` a copy
    of the clock before every layer. With `no_sooner_than` (another schedule's clocks before
    each layer, and for some layers t the tensors layers t.. wait on): None as soon as the
    clock before such a layer is nowhere sooner than that schedule's (_no_sooner), from where
    the layers left end no sooner than they did there: every step of the estimate is a max
    or a sum of what the clock holds. `kept`: choose's layers' events already prepared (_layer)."""
    clock = clock or Clock()
    spans = []
    for index, plan in enumerate(plans[start:], start):
        if plan.cascade and index > start:  # estimated with the layer it is cascaded onto
            if snapshots is not None:
                snapshots.append(snapshots[-1])  # (the clock before that layer's group)
            continue
        if no_sooner_than is not None and index in no_sooner_than[1]:
            if _no_sooner(clock, no_sooner_than[0][index], no_sooner_than[1][index]):
                return None, spans
        if snapshots is not None:
            snapshots.append(clock.copy())
        before = clock.now
        group = _cascaded(plans, index)
        if len(group) > 1:  # a layer with the layers cascaded onto it: one pipeline
            group_kept = kept if tiling.KEEP_FIXED else None
            spans += [
                (before, end) for end in cascade.estimate_group(group, placement, target, clock, group_kept)
            ]
            continue
        _layer(plan, placement, target, kept).estimate(clock, plan.op.output)
        spans.append((before, clock.now))
        if not plan.events:  # a view: ready when its source is
            clock.ready[plan.op.output] = max((clock.ready.get(t, 0) for t in plan.op.inputs), default=0)
    return clock.now, spans


def _cascaded(plans: list[OpPlan], index: int) -> list[OpPlan]:
    """plans[index] and the layers after it cascaded onto it, one onto the next (cascade.py)."""
    stop = index + 1
    while stop < len(plans) and plans[stop].cascade:
        stop += 1
    return plans[index:stop]


def _layer(plan: OpPlan, placement: Placement, target: Target, kept: dict | None) -> Events:
    """The layer's events as an Events to estimate; with `kept` (choose's, by layer) the same
    one while the plan's events are the same list: the trials move loads between a few
    layers and estimate the others again unchanged (Events._fixed is then kept)."""
    kept = kept if tiling.KEEP_FIXED else None
    found = kept.get(plan.index) if kept is not None else None
    if found is None or found[0] is not plan.events:
        found = (plan.events, Events(Context(target, placement, plan.index, 0), list(plan.events)))
        if kept is not None:
            kept[plan.index] = found
    return found[1]


def _no_sooner(clock: Clock, other: Clock, waited: frozenset[str]) -> bool:
    """Whether `clock` is at least `other` in all that the layers after read: each unit's
    free time, the ready time of each tensor in `waited`, the DMA unit's ports (when it
    takes its next transfer, when each port is free and the ends of the transfers still
    counted in flight) and when every transfer so far retired."""
    if (
        any(clock.free[unit] < other.free[unit] for unit in other.free)
        or clock.dma_retired < other.dma_retired
    ):
        return False
    if any(clock.ready.get(name, 0) < other.ready.get(name, 0) for name in waited):
        return False
    if (clock.ports is None) != (other.ports is None):
        return False
    if other.ports is None:
        return True
    mine, theirs = clock.ports, other.ports
    if mine.taken < theirs.taken or any(mine.port_free[p] < theirs.port_free[p] for p in theirs.port_free):
        return False
    for port, ends in theirs.ends.items():
        limit = theirs.outstanding(port)
        last, own = ends[-limit:], mine.ends[port][-limit:]
        if len(own) < len(last) or any(a < b for a, b in zip(own[::-1], last[::-1], strict=False)):
            return False
    return True


def _waited_from(plans: list[OpPlan], first: int) -> dict[int, frozenset[str]]:
    """For every layer t from `first` on: the tensors whose ready time layers t.. read (their
    events' waits, a view's sources)."""
    waited, names = {}, set()
    for t in range(len(plans) - 1, first - 1, -1):
        plan = plans[t]
        names.update(name for event in plan.events for name in event.tensors)
        if not plan.events:
            names.update(plan.op.inputs)
        waited[t] = frozenset(names)
    return waited


def choose(plans: list[OpPlan], placement: Placement, target: Target) -> None:
    """For every layer with prefetchable buffers, the layer its loads run during (or its
    own) and where among that layer's transfers (early or late, `_hoist`), by the estimate
    (from the host on: the clock before it is the same; a trial stops where it can no
    longer beat the kept schedule, _no_sooner); moves the loads and sets the buffers'
    lifetimes to match."""
    snapshots: list[Clock] = []
    layers: dict = {}  # each layer's events as estimated, while unchanged (_layer)
    best, _ = estimate_cycles(plans, placement, target, snapshots=snapshots, kept=layers)
    for plan in plans:
        early = [b for b in plan.buffers if b.first < plan.index]
        if not early:
            continue
        hosts = [t for t in range(max(b.first for b in early), plan.index) if plans[t].events]
        saved = {t: (list(plans[t].events), plans[t].dram_read_bytes) for t in (*hosts, plan.index)}
        chosen = None
        depths = sorted({1, max(b.slots for b in early)})
        # a trial whose clock, past this layer, is nowhere sooner than the kept schedule's
        # there ends no sooner than it (`best` or later): it stops there
        kept = (snapshots, _waited_from(plans, plan.index + 1))
        for host in hosts:
            for late, pieces in ((False, 1), (False, PIECES), (True, 1)):
                for depth in depths:
                    _hoist(plans, plan, host, early, late, depth, pieces, target)
                    cycles, _ = estimate_cycles(
                        plans, placement, target, host, snapshots[host].copy(), None, kept, layers
                    )
                    if cycles is not None and cycles < best:
                        best, chosen = cycles, (host, late, depth, pieces)
                    for t, (events, nbytes) in saved.items():
                        plans[t].events, plans[t].dram_read_bytes = list(events), nbytes
        if chosen is not None:
            host = chosen[0]
            _hoist(plans, plan, host, early, *chosen[1:], target)
            later: list[Clock] = []
            estimate_cycles(plans, placement, target, host, snapshots[host].copy(), later, kept=layers)
            snapshots[host:] = later
        else:
            _after_the_layer_before_last(plans, plan, {b.name for b in early})
            later = []
            start = plan.index
            best, _ = estimate_cycles(
                plans, placement, target, start, snapshots[start].copy(), later, kept=layers
            )
            snapshots[start:] = later
        for b in early:  # not moved: live from the layer before (its load waits on nothing there)
            b.first = max(b.first, plan.index - 1) if chosen is None else chosen[0]


def _after_the_layer_before_last(plans: list[OpPlan], plan: OpPlan, names: set[str]) -> None:
    """A load left at its own layer into a buffer live from the layer before may share bytes
    with what the layer before that reads or writes (memory.py): in the estimate it waits
    for that layer's output, as the tokens make it wait for those accesses (the estimate
    ran it while that layer still read them: opzoonet's stage4 weights on vpu-plus, 296
    cycles early)."""
    if plan.index < 2:
        return
    ready = plans[plan.index - 2].op.output
    plan.provisional_wait = (ready, frozenset(names))
    plan.events = [
        replace(event, tensors=[*event.tensors, ready])
        if event.what == "weights" and any(name in names for name, _ in event.writes)
        else event
        for event in plan.events
    ]


def refine_waits(plans: list[OpPlan], placement: Placement) -> None:
    """Once SRAM is allocated, a load `_after_the_layer_before_last` made wait for the output
    of the layer before last waits instead for the events of the layers before it that touch
    bytes its buffers take (an SRAM tensor or buffer they name: Event.marks), up to the
    latest layer whose SRAM tensors or buffers share bytes with its buffers, or for nothing
    when none does: the tokens make it wait for those accesses only (tinyconv's conv3
    weights on vpu-plus waited in the estimate for conv2, 296 cycles, and in the simulator
    for conv1; tinyconvnet's stage3 weights on `vpu`, cascaded, for stage2's last
    requantisation where they overwrite its working buffers only)."""
    for plan in plans:
        if plan.provisional_wait is None:
            continue
        ready, names = plan.provisional_wait
        spans = [(b.address, b.address + b.nbytes) for b in plan.buffers if b.name in names]
        found = next((t for t in range(plan.index - 2, -1, -1)
                      if _shares_bytes(plans, placement, t, spans)), None)  # fmt: skip
        mark, touching = f"~{plan.index}.overwrites", False
        ranges = _ranges(plans, placement)
        for t in range(found + 1 if found is not None else 0):
            marked = [
                replace(event, marks=[*event.marks, mark]) if _touches(event, ranges, spans) else event
                for event in plans[t].events
            ]
            touching = touching or any(mark in event.marks for event in marked)
            plans[t].events = marked
        plan.events = [
            replace(event, tensors=[t for t in event.tensors if t != ready] + ([mark] if touching else []))
            if event.what == "weights" and ready in event.tensors
            else event
            for event in plan.events
        ]
        plan.provisional_wait = None


def _ranges(plans: list[OpPlan], placement: Placement) -> dict[str, tuple[int, int]]:
    """The SRAM bytes of every buffer and SRAM storage, by the name an Addr gives."""
    found = {s.name: (s.address, s.address + aligned(s.nbytes)) for s in placement.storages.values()
             if s.home == "sram"}  # fmt: skip
    found.update((b.name, (b.address, b.address + b.nbytes)) for other in plans for b in other.buffers)
    return found


def _touches(event, ranges: dict[str, tuple[int, int]], spans: list[tuple[int, int]]) -> bool:
    """Whether an event's instructions name a buffer or SRAM tensor overlapping `spans`."""
    for spec in event.specs:
        for value in spec.fields.values():
            if value.__class__ is Addr and value.base in ranges:
                a0, a1 = ranges[value.base]
                if any(a0 < b1 and b0 < a1 for b0, b1 in spans):
                    return True
    return False


def _shares_bytes(plans: list[OpPlan], placement: Placement, t: int, spans: list[tuple[int, int]]) -> bool:
    """Whether an SRAM tensor or a buffer live at layer t overlaps any of `spans`."""
    live = [(s.address, s.address + aligned(s.nbytes)) for s in placement.storages.values()
            if s.home == "sram" and s.first <= t <= s.last]  # fmt: skip
    buffers = [b for other in plans for b in other.buffers if b.first <= t <= b.last]
    live += [(b.address, b.address + b.nbytes) for b in buffers]
    return any(a0 < b1 and b0 < a1 for a0, a1 in live for b0, b1 in spans)


def _hoist(
    plans: list[OpPlan],
    plan: OpPlan,
    host: int,
    buffers: list,
    late: bool,
    depth: int = 1,
    pieces: int = 1,
    machine: Target | None = None,
) -> None:
    """Move `plan`'s loads into `buffers` to layer `host`: a whole buffer's loads, a ring's
    (streamed weights) first `depth` blocks (each into a slot nothing of `plan` touched
    before it: a ring's slots are all free before its layer starts). Early: after the host's
    first tile's loads (PREFETCH_KEY), or with `pieces` > 1 cut into pieces spread over the
    host's tiles (_spread); late: after its last load (LATE_KEY), where the transfer holds
    back none of the host's loads (the DMA unit retires transfers in order), only its last
    stores.
    `plan`'s events that read the buffers wait for them by name in the estimate
    (Event.tensors, Clock.ready)."""
    target = plans[host]
    names = {b.name for b in buffers}
    rings = {b.name for b in buffers if b.slots > 1}
    key = target.key_base + PREFETCH_KEY
    if late:
        loads = [e.key for e in target.events if e.what in ("load", "weights")]
        key = max(loads, default=key) + LATE_KEY
    kept, moved, touched, hoisted = [], set(), set(), []
    for event in plan.events:
        written = {name for name, _ in event.writes if name in names}
        slots = {(name, slot) for name, slot in event.writes if name in rings}
        fresh = not slots or (not slots & touched and len(touched) < depth)  # a whole buffer's: all
        if event.what == "weights" and written and fresh:
            hoisted.append(replace(event, key=key))
            moved |= written
            touched |= slots
            nbytes = sum(_bytes(spec) for spec in event.specs)
            plan.dram_read_bytes -= nbytes
            target.dram_read_bytes += nbytes
            continue
        touched |= {(name, slot) for name, slot in (*event.reads, *event.writes) if name in rings}
        waits = [name for name, _ in event.reads if name in moved and name not in event.tensors]
        kept.append(replace(event, tensors=[*event.tensors, *waits]) if waits else event)
    plan.events = kept
    if pieces > 1 and not late:
        hoisted = _spread(
            hoisted, sorted({e.key for e in target.events if e.what == "load"}), pieces, machine
        )
    target.events = [*target.events, *hoisted]


def _spread(events: list, keys: list[float], pieces: int, target: Target) -> list:
    """The hoisted loads cut into up to `pieces` transfers of about equal bytes, the i-th
    after the host's i-th tile's loads: the DMA unit retires transfers in order, so one long
    flash load would hold back every later tile's loads; pieces hold back one tile each by
    at most their own length."""
    cuts = [(e, s) for e in events for s in e.specs]
    if not keys or any(s.fields.get("rows", 1) != 1 or s.fields.get("planes", 1) != 1 for _, s in cuts):
        return events
    n = min(pieces, len(keys))
    size = aligned(-(-sum(_bytes(s) for _, s in cuts) // n))
    parts = []
    for event, spec in cuts:
        total = _bytes(spec)
        for at in range(0, total, size):
            nbytes = min(size, total - at)
            piece = transfer.contiguous(
                spec.opcode, spec.fields["dram"] + at, spec.fields["sram"] + at, nbytes
            )
            parts.append((event, piece))
    # each piece writes bytes of its own: in the estimate it follows no other piece (a
    # (buffer, (slot, piece)) key), as the tokens order it after none in the program
    return [replace(event, specs=[piece], key=keys[min(i, len(keys) - 1)] + LATE_KEY,
                    cycles=spec_cycles(piece, target), writes=[(n, (s, i)) for n, s in event.writes])
            for i, (event, piece) in enumerate(parts)]  # fmt: skip


def _bytes(spec) -> int:
    f = spec.fields
    return f["row_bytes"] * f.get("rows", 1) * f.get("planes", 1)
