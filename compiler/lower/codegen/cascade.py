"""Cascading at band grain: a layer's first tiles start once the rows of its input they read
are written, not after the layer before has ended.

The tokens already order instructions byte by byte (sync.py), so what holds a layer back at
a hand-over is only program order: each unit runs its queue in order and every event of a
layer is keyed after every event of the layer before (emit._plan_layers). Cascading a layer
lowers all its keys alike by a shift, as far as its events that read or overwrite the bytes
of the layer before stay keyed after those events: its first tiles then interleave with the
last ones of the layer before, in every unit's queue. A vector layer that reads and writes
SRAM-resident tensors directly (a pool after a conv) may also take fewer rows a tile, so its
first bands can run behind the conv's first requantisations.

The estimate sees the same: a cascaded layer is estimated in one pipeline with the layer
before (prefetch.estimate_cycles), its events depending on the events of that layer, and of
every layer of a chain cascaded onto one another, whose bytes they touch (the ISA's
footprints, as sync.py reads them: `cross_deps`), not on the input tensor's last write. A
hand-over is cascaded only where the estimate of the whole subgraph is lower (`choose`);
the switch CASCADE turns the search off.

    choose(plans, placement, target, resolve)   after addresses are known (emit._emit)
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from vpuc.compiler.lower import ops as vops
from vpuc.compiler.lower.codegen import tile_vector
from vpuc.compiler.lower.codegen.plan import OpPlan
from vpuc.compiler.lower.codegen.tiling import Context
from vpuc.targets.isa.footprint import footprint

CASCADE = True  # search cascaded hand-overs (off: every layer after the one before)

SHIFT_STEPS = (0.0, 0.5, 1.0, 2.0)  # how far short of the largest shift to try as well


def choose(plans: list[OpPlan], placement, target, resolve) -> None:
    """For every hand-over, cascade it (and re-band a vector consumer) where the estimate
    of the subgraph is lower; sets plan.cascade and the events' keys and pseudo slots."""
    if not CASCADE:
        return
    from vpuc.compiler.lower.codegen.prefetch import _waited_from, estimate_cycles

    mode = target.numerics.requant
    snapshots: list = []  # the clock before every layer: a trial runs from its group's first
    seen: dict = {}  # each event's accesses (cross_deps), by its specs
    layers: dict = {}  # the layers after the hand-over, as estimated (unchanged by its trials)
    best, _ = estimate_cycles(plans, placement, target, snapshots=snapshots, kept=layers)
    for index in range(1, len(plans)):
        producer, consumer = plans[index - 1], plans[index]
        if not producer.events or not consumer.events:
            continue
        # a trial whose clock before a later layer is nowhere sooner than the kept schedule's
        # there ends no sooner than it (`best` or later): it stops there (prefetch._no_sooner;
        # the layers after this one are the same in both, none of them cascaded yet)
        kept = (snapshots, _waited_from(plans, index + 1))
        head = index - 1
        while plans[head].cascade:
            head -= 1
        # the layers it would run beside: the group of the layer before, from its first
        earlier = {g: list(plans[g].events) for g in range(head, index) if plans[g].events}
        saved = (list(consumer.events), dict(consumer.choice))
        lowest = min(e.key for e in earlier[head])
        chosen = None
        for events, choice in _variants(consumer, placement, target):
            deps = {g: cross_deps(made, events, resolve, mode, seen) for g, made in earlier.items()}
            if not deps[index - 1]:
                continue  # it reads nothing of the layer before
            room = min(events[e].key - earlier[g][d].key for g, pairs in deps.items() for d, e in pairs)
            room = min(room, min(e.key for e in events) - lowest)  # none of it before the group
            for step in SHIFT_STEPS:
                shift = room - step
                if shift <= 0:
                    continue
                linked, consumer.events = _linked(earlier, events, deps, shift, index)
                for g, made in linked.items():
                    plans[g].events = made
                consumer.cascade = True
                cycles, _ = estimate_cycles(
                    plans, placement, target, head, snapshots[head].copy(), None, kept, layers
                )
                if cycles is not None and cycles < best:
                    best, chosen = cycles, (linked, list(consumer.events), choice)
                for g, made in earlier.items():
                    plans[g].events = list(made)
                consumer.events, consumer.cascade = list(saved[0]), False
        if chosen is not None:
            linked, consumer.events, choice = chosen
            for g, made in linked.items():
                plans[g].events = made
            consumer.choice = {**choice, "cascade": True}
            consumer.cascade = True
            later: list = []
            estimate_cycles(plans, placement, target, head, snapshots[head].copy(), later, kept=layers)
            snapshots[head:] = later


def _variants(consumer: OpPlan, placement, target):
    """The consumer's events as planned, and for a vector layer without working buffers
    (it reads and writes SRAM-resident tensors in place) every other rows-a-tile choice,
    with the loads of later layers prefetch.choose moved into it (a layer without buffers
    has no weights of its own: its "weights" events are those). The new bands carry no
    Event.marks (prefetch.refine_waits): a later load into bytes they touch does not wait
    for them in the estimate, as before they were banded anew (resnet8 on vpu-plus: 19378
    estimated and simulated; with the marks given to the bands that name the same tensors,
    19416)."""
    yield list(consumer.events), dict(consumer.choice)
    op = consumer.op
    if consumer.buffers or not isinstance(op, vops.Pool | vops.Add | vops.Rescale | vops.Lut | vops.Mul):
        return
    hosted = [e for e in consumer.events if e.what == "weights"]
    ctx = Context(target, placement, consumer.index, 1 << 62, consumer.key_base)
    for band in tile_vector.fitting_bands(op, ctx):
        plan, ev = tile_vector._build(op, ctx, band)
        if plan.buffers or plan.choice == consumer.choice:
            continue
        yield [*ev.events, *hosted], dict(plan.choice)


def cross_deps(
    producer: list, consumer: list, resolve, mode: str, seen: dict | None = None
) -> list[tuple[int, int]]:
    """(producer event, consumer event) pairs where the consumer's instructions read or
    write bytes the producer's write, or write bytes they read (bounding intervals, as
    sync.py takes them). `seen`: the events' accesses already found, by their specs."""
    seen = {} if seen is None else seen
    made = [_touched(e, resolve, mode, seen) for e in producer]
    used = [_touched(e, resolve, mode, seen) for e in consumer]
    pairs = []
    for d, e in _boxes_meet([box for _, _, box in made], [box for _, _, box in used]):
        p_reads, p_writes, _ = made[d]
        c_reads, c_writes, _ = used[e]
        if _meet(c_reads, p_writes) or _meet(c_writes, p_writes) or _meet(c_writes, p_reads):
            pairs.append((d, e))
    return pairs


def _boxes_meet(made: list[list], used: list[list]) -> list[tuple[int, int]]:
    """(d, e) in order where made[d]'s span in some memory overlaps used[e]'s (numpy: a
    layer's events against the next one's are thousands of pairs)."""
    hits = np.zeros((len(made), len(used)), bool)
    for memory in {m for boxes in made for m, _, _ in boxes}:
        lo_p, hi_p = _spans(made, memory)
        lo_c, hi_c = _spans(used, memory)
        hits |= np.maximum(lo_p[:, None], lo_c[None, :]) < np.minimum(hi_p[:, None], hi_c[None, :])
    return [(int(d), int(e)) for d, e in zip(*np.nonzero(hits), strict=True)]


def _spans(boxes: list[list], memory: str) -> tuple[np.ndarray, np.ndarray]:
    """Each event's span in `memory` as (starts, stops); an empty one where it has none."""
    lo, hi = np.zeros(len(boxes), np.int64), np.zeros(len(boxes), np.int64)
    for k, box in enumerate(boxes):
        for m, start, stop in box:
            if m == memory:
                lo[k], hi[k] = start, stop
    return lo, hi


def _touched(event, resolve, mode: str, seen: dict) -> tuple[list, list, list]:
    """An event's reads and writes as (memory, start, stop), and their span in each memory."""
    found = seen.get(id(event.specs))
    if found is not None and found[0] is event.specs:
        return found[1]
    reads, writes, box = [], [], {}
    for spec in event.specs:
        for access in footprint(spec.build(resolve), mode):
            region = access.region
            (writes if access.write else reads).append((access.memory, region.start, region.stop))
            lo, hi = box.get(access.memory, (region.start, region.stop))
            box[access.memory] = (min(lo, region.start), max(hi, region.stop))
    touched = (reads, writes, [(m, lo, hi) for m, (lo, hi) in box.items()])
    seen[id(event.specs)] = (event.specs, touched)  # (the list kept: its id stays its own)
    return touched


def _meet(a: list, b: list) -> bool:
    return any(m == n and max(s, t) < min(e, f) for m, s, e in a for n, t, f in b)


def _linked(earlier: dict[int, list], consumer: list, deps: dict, shift: float, index: int):
    """The events of the layers of the group (by layer) and the consumer's, its keys lowered
    by `shift`; for the estimate, each dependency as a pseudo slot the earlier layer's event
    writes and the consumer's reads (Events.dependencies orders them; a layer estimated
    alone ignores them)."""
    reads: dict[int, list] = {}
    linked = {}
    for g, made in earlier.items():
        writes: dict[int, list] = {}
        for d, e in deps[g]:
            slot = (f"~{index}.{g}", d * len(consumer) + e)
            writes.setdefault(d, []).append(slot)
            reads.setdefault(e, []).append(slot)
        linked[g] = [
            replace(event, writes=[*event.writes, *writes[d]]) if d in writes else event
            for d, event in enumerate(made)
        ]
    linked_consumer = [
        replace(event, key=event.key - shift, reads=[*event.reads, *reads.get(e, ())])
        for e, event in enumerate(consumer)
    ]
    return linked, linked_consumer


def estimate_group(group: list[OpPlan], placement, target, clock, kept: dict | None = None) -> list[int]:
    """Run a layer and the layers cascaded onto it as one pipeline on `clock` (advancing
    it); returns each layer's last end. An event waits on a tensor of the group by its
    pseudo slots where its layer's predecessor writes it (`_linked`), on all the events of
    the layer that writes it otherwise; events run in sync.py's order (by key, after what
    they depend on). `kept` (prefetch.estimate_cycles'): what the pipeline reads of the
    group's events whatever the clock, while every layer's events are the same lists."""
    from vpuc.compiler.lower.codegen.estimate import pipeline

    events, owner, units, cycles, keys, deps, transfers, sequence, outside = _group_fixed(
        group, placement, target, kept
    )
    ready = clock.ready
    waits = [max(0, *[ready.get(name, 0) for name in names]) if names else 0 for names in outside]
    end = pipeline(units, cycles, keys, deps, clock, waits, transfers, target.hardware, sequence)
    ends = [0] * len(group)
    for i, ended in enumerate(end):
        ends[owner[i]] = max(ends[owner[i]], ended)
        if events[i].what == "weights":  # a later layer's prefetch waits for it by name
            for name, _ in events[i].writes:
                if isinstance(name, str) and not name.startswith("~"):
                    clock.ready[name] = ended
        for name in events[i].marks:
            clock.ready[name] = max(clock.ready.get(name, 0), ended)
    for plan, ended in zip(group, ends, strict=True):
        clock.ready[plan.op.output] = ended
    return ends


def _group_fixed(group: list[OpPlan], placement, target, kept: dict | None) -> tuple:
    """(events, each one's layer, units, cycles, keys, dependencies, transfers, the order to
    run them in, the tensors outside the group each waits on): the group's pipeline but for
    the clock; kept in `kept` while each layer's events are the same list of the same
    length (tiling.Events._fixed's rule)."""
    from vpuc.compiler.lower.codegen.sync import order
    from vpuc.compiler.lower.codegen.tiling import Events

    lists = [(plan.events, len(plan.events)) for plan in group]
    found = kept.get(("group", group[0].index)) if kept is not None else None
    if found is not None and len(found[0]) == len(lists):
        if all(a is b and m == n for (a, m), (b, n) in zip(found[0], lists, strict=True)):
            return found[1]
    events, owner, first = [], [], {}
    for k, plan in enumerate(group):
        first[plan.op.output] = (k, len(events), len(events) + len(plan.events))
        events += plan.events
        owner += [k] * len(plan.events)
    ev = Events(Context(target, placement, group[0].index, 0), events)
    units, cycles, keys, deps, transfers = ev._fixed()
    deps = [list(d) for d in deps]
    outside = []
    for i, event in enumerate(events):
        names = []
        for name in event.tensors:
            made = first.get(name)
            if made is None:
                names.append(name)
            elif made[0] != owner[i] - 1 and made[0] < owner[i]:
                deps[i] += range(made[1], made[2])
        outside.append(names)
    sequence = order(keys, [set(d) for d in deps])
    fixed = (events, owner, units, cycles, keys, deps, transfers, sequence, outside)
    if kept is not None:
        kept[("group", group[0].index)] = (lists, fixed)
    return fixed
