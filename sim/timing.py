"""The timing model: in-order unit queues synchronised by tokens, as an event schedule.

Runs after every instruction has a Plan (its unit and cost in cycles) and before anything
executes. The DMA, MAC and vector units each take their instructions in program order.
An instruction starts when its unit is free and it has taken one count of every token in
its `wait` mask; it gives one count of every token in its `signal` mask when it ends. On a
target with issue_order = "before_wait" its issue runs while it waits: it starts at
max(unit free, last token - issue_cycles) (targets/isa/cost.py `issue_overlap`), so its work
still begins after the token; with mac_load_order = "before_wait" a MAC instruction's first
weight-block load runs during the wait too (`wait_overlap`).
Each token links one signalling unit to one waiting unit (checked by `check_tokens`), so
the k-th wait on a token takes the k-th signal: the schedule is deterministic without
stepping cycle by cycle. END starts when every unit has drained. A unit whose next wait
can never be satisfied is a deadlock, reported with the pc of the blocked instruction.

The DMA unit takes its transfers in order but keeps several in flight, one queue per memory
port (targets/isa/cost.py `DmaPorts`: the same rule the compile-time estimate follows), so
transfers on two ports, or several on one port, overlap. It retires them in program
order, as Ethos-U's DMA_WAIT counts outstanding transfers: a transfer gives its tokens
when it and every earlier transfer have ended, so waiting on the last of several loads
still covers them all (what the compiler's token placement relies on). A transfer
whose SRAM bytes conflict with a transfer still in flight on the other port (one of them
writing) is taken only when that one has ended: the DMA unit orders its own accesses,
and the race check (hazards.py) looks only at pairs on different units.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from vpuc.sim.errors import SimError
from vpuc.sim.machine import Plan
from vpuc.targets.isa.asm import format_instruction
from vpuc.targets.isa.cost import issue_overlap, wait_overlap
from vpuc.targets.isa.dma_cost import DmaPorts
from vpuc.targets.isa.formats import TOKEN_COUNT, Instruction, Unit, token_ids
from vpuc.targets.model import Hardware

QUEUED_UNITS = (Unit.DMA, Unit.MAC, Unit.VEC)


@dataclass(frozen=True)
class Timeline:
    """When each instruction ran: start and end cycle per pc, the cycles it stalled on
    tokens after its unit was free and the unit whose token came last, and every token
    edge (signalling pc, waiting pc, token)."""

    start: tuple[int, ...]
    end: tuple[int, ...]
    stall: tuple[int, ...]
    stall_cause: tuple[Unit | None, ...]
    edges: tuple[tuple[int, int, int], ...]
    total_cycles: int
    # Cycles from an instruction's start to its first memory access that may overlap the
    # wait on its tokens (targets/isa/cost.py issue_overlap): the race check's accesses
    # begin this long after `start`.
    issue_overlap: int = 0
    # On top of it for a MAC instruction with mac_load_order = "before_wait": its first weight
    # block's load (targets/isa/cost.py wait_overlap), which may also run during the wait.
    mac_load_overlap: int = 0

    def accesses_from(self, pc: int, unit: Unit) -> int:
        """When instruction `pc` (on `unit`) begins the memory accesses the race check sees."""
        return self.start[pc] + self.issue_overlap + (self.mac_load_overlap if unit == Unit.MAC else 0)


@cache
def _tokens(mask: int) -> tuple[int, ...]:
    return tuple(token_ids(mask))


def check_tokens(instructions: Sequence[Instruction], plans: Sequence[Plan]) -> None:
    """Every token has at most one signalling unit and one waiting unit."""
    users: dict[tuple[str, int], tuple[Unit, int]] = {}
    for pc, (instruction, plan) in enumerate(zip(instructions, plans, strict=True)):
        if plan.unit == Unit.CTRL and (instruction.wait or instruction.signal):
            _fail(pc, instruction, "END takes no tokens (it waits for every unit anyway)")
        for role, mask in (("signal", instruction.signal), ("wait", instruction.wait)):
            for token in _tokens(mask):
                unit, first_pc = users.setdefault((role, token), (plan.unit, pc))
                if unit != plan.unit:
                    _fail(
                        pc,
                        instruction,
                        f"token {token} is already used to {role} by the "
                        f"{unit.name} unit (pc {first_pc}); a token links one signalling "
                        "unit to one waiting unit",
                    )


def schedule(
    instructions: Sequence[Instruction], plans: Sequence[Plan], hardware: Hardware | None = None
) -> Timeline:
    """Start and end cycles of every instruction; SimError on a deadlock. Without
    `hardware` the DMA unit runs one transfer at a time."""
    n = len(instructions)
    start, end, stall = [0] * n, [0] * n, [0] * n
    cause: list[Unit | None] = [None] * n
    queues = {u: [pc for pc in range(n) if plans[pc].unit == u] for u in QUEUED_UNITS}
    position = dict.fromkeys(QUEUED_UNITS, 0)
    free_at = dict.fromkeys(QUEUED_UNITS, 0)
    given: list[list[tuple[int, int]]] = [[] for _ in range(TOKEN_COUNT)]  # (cycle, pc)
    taken = [0] * TOKEN_COUNT
    edges: list[tuple[int, int, int]] = []
    ports = DmaPorts(hardware) if hardware is not None else None
    overlap = issue_overlap(hardware) if hardware is not None else 0
    early = {u: wait_overlap(hardware, u) if hardware is not None else 0 for u in QUEUED_UNITS}
    in_flight: dict[str, list[int]] = {"dram": [], "flash": []}  # DMA pcs per port
    retired = 0  # when every DMA transfer so far has ended
    progress = True
    while progress:
        progress = False
        for unit, queue in queues.items():
            while position[unit] < len(queue):
                pc = queue[position[unit]]
                waits = _tokens(instructions[pc].wait)
                if any(taken[t] >= len(given[t]) for t in waits):
                    break
                ready, last = free_at[unit], None
                for t in waits:
                    cycle, producer = given[t][taken[t]]
                    taken[t] += 1
                    edges.append((producer, pc, t))
                    if cycle - early[unit] > ready:  # its issue (a MAC: its load) may run while it waits
                        ready, last = cycle - early[unit], producer
                stall[pc] = ready - free_at[unit]
                cause[pc] = None if last is None else plans[last].unit
                if ports is not None and unit == Unit.DMA:
                    ready = _dma_start(pc, ready, plans, ports, in_flight, end, overlap)
                    start[pc], end[pc] = ready, ports.run(plans[pc].port, ready, plans[pc].cycles)
                    in_flight[plans[pc].port].append(pc)
                    free_at[unit] = ports.taken
                else:
                    start[pc], end[pc] = ready, ready + plans[pc].cycles
                    free_at[unit] = end[pc]
                given_at = end[pc]
                if unit == Unit.DMA:
                    retired = given_at = max(retired, end[pc])
                for t in _tokens(instructions[pc].signal):
                    given[t].append((given_at, pc))
                position[unit] += 1
                progress = True
    blocked = [queue[position[u]] for u, queue in queues.items() if position[u] < len(queue)]
    if blocked:
        _deadlock(instructions, plans, sorted(blocked), given, taken)
    total = max(free_at.values(), default=0)
    if ports is not None:
        total = max(total, ports.drained)
    for pc in range(n):
        if plans[pc].unit == Unit.CTRL:
            start[pc] = end[pc] = total
    load = early[Unit.MAC] - overlap
    return Timeline(tuple(start), tuple(end), tuple(stall), tuple(cause), tuple(edges), total, overlap, load)


def _dma_start(pc: int, ready: int, plans, ports: DmaPorts, in_flight, end, overlap: int) -> int:
    """When DMA transfer `pc`, ready at `ready`, is taken: a slot on its port, and after
    every transfer still in flight on the other port whose SRAM bytes it conflicts with
    (its accesses begin `overlap` after it is taken)."""
    plan = plans[pc]
    start = ports.earliest(plan.port, ready)
    for port, pcs in in_flight.items():
        if port == plan.port:
            continue  # one port moves one transfer's data at a time, in order
        for other in reversed(pcs):
            if end[other] <= start + overlap:
                break  # ends on a port are non-decreasing
            if _conflicts(plans[other], plan):
                start = max(start, end[other] - overlap)
        if len(pcs) > 64:
            del pcs[:-64]
    return start


def _conflicts(a: Plan, b: Plan) -> bool:
    return any(w.overlaps(r) for w in a.writes for r in (*b.reads, *b.writes)) or any(
        r.overlaps(w) for r in a.reads for w in b.writes
    )


def _deadlock(instructions, plans, blocked: list[int], given, taken) -> None:
    def missing(pc: int) -> int:
        return next(t for t in _tokens(instructions[pc].wait) if taken[t] >= len(given[t]))

    first = blocked[0]
    token = missing(first)
    if not given[token] and not any(i.signal >> token & 1 for i in instructions):
        reason = f"waits on token {token}, which no instruction signals"
    else:
        reason = (
            f"waits on token {token}, which no instruction that can still run signals "
            f"({len(given[token])} signal(s) already taken)"
        )
    others = ", ".join(f"{plans[pc].unit.name} at pc {pc} on token {missing(pc)}" for pc in blocked[1:])
    _fail(first, instructions[first], f"deadlock: {reason}" + (f"; also blocked: {others}" if others else ""))


def _fail(pc: int, instruction: Instruction, message: str) -> None:
    raise SimError(pc, format_instruction(instruction), message)
