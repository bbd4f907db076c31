"""Prefetches: a layer's weights or lookup table loaded while an earlier layer runs.

A planner marks the buffer of a layer's one-off constant load (whole weights, a table)
prefetchable (tiling.buffer). emit.py's layer planning offers it the SRAM free beside the
buffers and resident tensors of the last PREFETCH_DEPTH layers with events (`rooms`); the
buffer is then live from the earliest of them it fits. `choose` then decides, layer by
layer, during which of those layers the load runs, or whether it stays at its own layer's
start: the choice for which the estimate of the whole subgraph (estimate.py, the
schedule the tokens enforce) is fastest; ties keep it at its own layer.
The chosen load moves into that layer's events, after its first tile's loads: the DMA
unit takes it while that layer computes, where it would otherwise wait behind the layer's
last store while the flash (or DRAM) port sits idle. The tokens order it against every
other access to its bytes (sync.py); the buffer's lifetime then starts at that layer, so
no buffer or tensor live in between shares its bytes (memory.py). Its instruction belongs
to that layer (layer id, DRAM bytes).
"""

from __future__ import annotations

from dataclasses import replace

from vpuc.compiler.lower.codegen.estimate import Clock
from vpuc.compiler.lower.codegen.plan import OpPlan
from vpuc.compiler.lower.codegen.residency import Placement
from vpuc.compiler.lower.codegen.tiling import Context, Events
from vpuc.targets import Target

PREFETCH_DEPTH = 2  # how many layers with events back a prefetch may run
# Where a prefetched load goes among the events of the layer it runs during: after that
# layer's first tile's loads (key -1 and earlier), before its second tile's (-0.5).
PREFETCH_KEY = -0.875


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


def estimate_cycles(plans: list[OpPlan], placement: Placement, target: Target) -> tuple[int, list]:
    """The subgraph's estimated cycles and each layer's (start, end) on one clock."""
    clock = Clock()
    spans = []
    for plan in plans:
        before = clock.now
        Events(Context(target, placement, plan.index, 0), list(plan.events)).estimate(clock, plan.op.output)
        spans.append((before, clock.now))
        if not plan.events:  # a view: ready when its source is
            clock.ready[plan.op.output] = max((clock.ready.get(t, 0) for t in plan.op.inputs), default=0)
    return clock.now, spans


def choose(plans: list[OpPlan], placement: Placement, target: Target) -> None:
    """For every layer with prefetchable buffers, the layer its loads run during (or its
    own), by the estimate; moves the loads and sets the buffers' lifetimes to match."""
    best, _ = estimate_cycles(plans, placement, target)
    for plan in plans:
        early = [b for b in plan.buffers if b.first < plan.index]
        if not early:
            continue
        hosts = [t for t in range(max(b.first for b in early), plan.index) if plans[t].events]
        saved = {t: (list(plans[t].events), plans[t].dram_read_bytes) for t in (*hosts, plan.index)}
        chosen = None
        for host in hosts:
            _hoist(plans, plan, host, {b.name for b in early})
            cycles, _ = estimate_cycles(plans, placement, target)
            if cycles < best:
                best, chosen = cycles, host
            for t, (events, nbytes) in saved.items():
                plans[t].events, plans[t].dram_read_bytes = list(events), nbytes
        if chosen is not None:
            _hoist(plans, plan, chosen, {b.name for b in early})
        else:
            _after_the_layer_before_last(plans, plan, {b.name for b in early})
        for b in early:  # not moved: live from the layer before (its load waits on nothing there)
            b.first = max(b.first, plan.index - 1) if chosen is None else chosen


def _after_the_layer_before_last(plans: list[OpPlan], plan: OpPlan, names: set[str]) -> None:
    """A load left at its own layer into a buffer live from the layer before may share bytes
    with what the layer before that reads or writes (memory.py): in the estimate it waits
    for that layer's output, as the tokens make it wait for those accesses (the estimate
    ran it while that layer still read them: opzoonet's stage4 weights on vpu-plus, 296
    cycles early)."""
    if plan.index < 2:
        return
    ready = plans[plan.index - 2].op.output
    plan.events = [
        replace(event, tensors=[*event.tensors, ready])
        if event.what == "weights" and any(name in names for name, _ in event.writes)
        else event
        for event in plan.events
    ]


def _hoist(plans: list[OpPlan], plan: OpPlan, host: int, names: set[str]) -> None:
    """Move `plan`'s loads into buffers `names` to layer `host`; its events that read them
    wait for them by name in the estimate (Event.tensors, Clock.ready)."""
    target = plans[host]
    kept = []
    for event in plan.events:
        if event.what == "weights" and any(name in names for name, _ in event.writes):
            target.events = [*target.events, replace(event, key=target.key_base + PREFETCH_KEY)]
            nbytes = sum(_bytes(spec) for spec in event.specs)
            plan.dram_read_bytes -= nbytes
            target.dram_read_bytes += nbytes
            continue
        waits = [name for name, _ in event.reads if name in names and name not in event.tensors]
        kept.append(replace(event, tensors=[*event.tensors, *waits]) if waits else event)
    plan.events = kept


def _bytes(spec) -> int:
    f = spec.fields
    return f["row_bytes"] * f.get("rows", 1) * f.get("planes", 1)
