"""The timing model: in-order unit queues synchronised by tokens, as an event schedule.

Runs after every instruction has a Plan (its unit and cost in cycles) and before anything
executes. The DMA, MAC and vector units each take their instructions in program order.
An instruction starts when its unit is free and it has taken one count of every token in
its `wait` mask; it gives one count of every token in its `signal` mask when it ends.
Each token links one signalling unit to one waiting unit (checked by `check_tokens`), so
the k-th wait on a token takes the k-th signal: the schedule is deterministic without
stepping cycle by cycle. END starts when every unit has drained. A unit whose next wait
can never be satisfied is a deadlock, reported with the pc of the blocked instruction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from vpuc.sim.errors import SimError
from vpuc.sim.machine import Plan
from vpuc.targets.isa.asm import format_instruction
from vpuc.targets.isa.formats import TOKEN_COUNT, Instruction, Unit, token_ids

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


def schedule(instructions: Sequence[Instruction], plans: Sequence[Plan]) -> Timeline:
    """Start and end cycles of every instruction; SimError on a deadlock."""
    n = len(instructions)
    start, end, stall = [0] * n, [0] * n, [0] * n
    cause: list[Unit | None] = [None] * n
    queues = {u: [pc for pc in range(n) if plans[pc].unit == u] for u in QUEUED_UNITS}
    position = dict.fromkeys(QUEUED_UNITS, 0)
    free_at = dict.fromkeys(QUEUED_UNITS, 0)
    given: list[list[tuple[int, int]]] = [[] for _ in range(TOKEN_COUNT)]  # (cycle, pc)
    taken = [0] * TOKEN_COUNT
    edges: list[tuple[int, int, int]] = []
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
                    if cycle > ready:
                        ready, last = cycle, producer
                start[pc], end[pc] = ready, ready + plans[pc].cycles
                stall[pc] = ready - free_at[unit]
                cause[pc] = None if last is None else plans[last].unit
                for t in _tokens(instructions[pc].signal):
                    given[t].append((end[pc], pc))
                free_at[unit] = end[pc]
                position[unit] += 1
                progress = True
    blocked = [queue[position[u]] for u, queue in queues.items() if position[u] < len(queue)]
    if blocked:
        _deadlock(instructions, plans, sorted(blocked), given, taken)
    total = max(free_at.values(), default=0)
    for pc in range(n):
        if plans[pc].unit == Unit.CTRL:
            start[pc] = end[pc] = total
    return Timeline(tuple(start), tuple(end), tuple(stall), tuple(cause), tuple(edges), total)


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
