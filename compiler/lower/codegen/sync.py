"""Program order and tokens: from instructions in generation order to a program whose
tokens make the three units run them correctly and overlapped.

1. Dependencies: every pair of instructions that touch the same SRAM or DRAM bytes (one of
   them writing) is ordered as generated: read after write, write after read, write after
   write. Footprints are targets/isa/footprint.py's, the ones the simulator's race check
   reads, taken as byte intervals (a strided block's bounding interval: conservative).
2. Order: a topological order of those dependencies by each instruction's key (its tile,
   loads a tile ahead, stores a tile behind: software pipelining), ties as generated.
   Every dependency then points backwards in the program, so no schedule can deadlock.
3. Tokens: one token per (signalling unit, waiting unit) direction. Walking each unit's
   queue, an instruction whose latest dependency on another unit is not yet covered waits
   on that direction's token, and that dependency signals it. Signals and waits on a token
   are then in the same order on both sides: the k-th wait takes the k-th signal
   (docs/isa.md, "Synchronisation").
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from dataclasses import replace

from vpuc.compiler.lower.errors import LowerError
from vpuc.targets.isa.footprint import SRAM, footprint
from vpuc.targets.isa.formats import TOKEN_COUNT, Instruction, Unit

QUEUED = (Unit.DMA, Unit.MAC, Unit.VEC)


class _Memory:
    """Byte intervals with their last writer and the readers since, as sorted segments."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.segments: list[list] = []  # [start, stop, last writer, readers]

    def _split(self, at: int) -> None:
        k = bisect_right(self.starts, at) - 1
        if k >= 0:
            start, stop, writer, readers = self.segments[k]
            if start < at < stop:
                self.segments[k] = [start, at, writer, list(readers)]
                self.segments.insert(k + 1, [at, stop, writer, list(readers)])
                self.starts.insert(k + 1, at)

    def _covering(self, start: int, stop: int) -> list[list]:
        self._split(start)
        self._split(stop)
        lo, hi = bisect_left(self.starts, start), bisect_left(self.starts, stop)
        found = self.segments[lo:hi]
        covered, gaps = start, []
        for segment in found:
            if segment[0] > covered:
                gaps.append([covered, segment[0], None, []])
            covered = segment[1]
        if covered < stop:
            gaps.append([covered, stop, None, []])
        for gap in gaps:
            k = bisect_left(self.starts, gap[0])
            self.starts.insert(k, gap[0])
            self.segments.insert(k, gap)
        lo, hi = bisect_left(self.starts, start), bisect_left(self.starts, stop)
        return self.segments[lo:hi]

    def read(self, start: int, stop: int, pc: int, deps: set) -> None:
        for segment in self._covering(start, stop):
            if segment[2] is not None:
                deps.add(segment[2])
            segment[3].append(pc)

    def write(self, start: int, stop: int, pc: int, deps: set) -> None:
        for segment in self._covering(start, stop):
            if segment[2] is not None:
                deps.add(segment[2])
            deps.update(segment[3])
            segment[2], segment[3] = pc, []


def dependencies(instructions: list[Instruction], requant_mode: str) -> list[set[int]]:
    """For each instruction, the earlier ones (by index) it must run after."""
    sram, dram = _Memory(), _Memory()
    found: list[set[int]] = []
    for pc, instruction in enumerate(instructions):
        deps: set[int] = set()
        for access in footprint(instruction, requant_mode):  # reads first
            memory = sram if access.memory == SRAM else dram
            region = access.region
            (memory.write if access.write else memory.read)(region.start, region.stop, pc, deps)
        deps.discard(pc)
        found.append(deps)
    return found


def order(keys: list[float], deps: list[set[int]]) -> list[int]:
    """A topological order of the dependencies, by key then generation index."""
    count = len(keys)
    waiting = [len(d) for d in deps]
    users: list[list[int]] = [[] for _ in range(count)]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    ready = [(keys[i], i) for i in range(count) if waiting[i] == 0]
    heapq.heapify(ready)
    result = []
    while ready:
        _, i = heapq.heappop(ready)
        result.append(i)
        for user in users[i]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, (keys[user], user))
    if len(result) != count:
        raise LowerError("the layer's dependencies form a cycle (a code generator bug)")
    return result


def synchronise(instructions: list[Instruction], keys: list[float], requant_mode: str) -> list[Instruction]:
    """The instructions in program order with their wait and signal tokens."""
    deps = dependencies(instructions, requant_mode)
    sequence = order(keys, deps)
    position = {pc: k for k, pc in enumerate(sequence)}
    tokens = _token_table()
    covered: dict[tuple[Unit, Unit], int] = {}
    wait = [0] * len(instructions)
    signal = [0] * len(instructions)
    for pc in sequence:
        unit = instructions[pc].unit
        latest: dict[Unit, int] = {}
        for d in deps[pc]:
            other = instructions[d].unit
            if other != unit:
                latest[other] = max(latest.get(other, -1), position[d])
        for other, at in latest.items():
            if at > covered.get((other, unit), -1):
                token = tokens[(other, unit)]
                wait[pc] |= 1 << token
                signal[sequence[at]] |= 1 << token
                covered[(other, unit)] = at
    return [replace(instructions[pc], wait=wait[pc], signal=signal[pc]) for pc in sequence]


def _token_table() -> dict[tuple[Unit, Unit], int]:
    pairs = [(a, b) for a in QUEUED for b in QUEUED if a != b]
    assert len(pairs) <= TOKEN_COUNT
    return {pair: k for k, pair in enumerate(pairs)}
