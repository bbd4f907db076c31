"""Program order and tokens: from instructions in generation order to a program whose
tokens make the three units run them correctly and overlapped.

1. Dependencies: every pair of instructions that touch the same SRAM or DRAM bytes (one of
   them writing) is ordered as generated: read after write, write after read, write after
   write. Footprints are byte intervals (a strided block's bounding interval: conservative).
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
from vpuc.targets.isa.cost import SOFTMAX_TABLE_BYTES, conv_output_shape, pool_output_shape
from vpuc.targets.isa.formats import (
    TOKEN_COUNT,
    Add,
    AvgPool,
    Clip,
    Conv,
    Dma,
    Instruction,
    Lut,
    Matmul,
    MaxPool,
    Mul,
    Opcode,
    Requant,
    Softmax,
    Unit,
)
from vpuc.targets.isa.params import LUT_ENTRIES, requant_param_bytes

QUEUED = (Unit.DMA, Unit.MAC, Unit.VEC)


def footprint(i: Instruction, requant_mode: str) -> tuple[list, list, list, list]:
    """(SRAM reads, SRAM writes, DRAM reads, DRAM writes) as [start, stop) intervals."""
    if isinstance(i, Dma):
        sram = (
            i.sram,
            i.sram + _extent(i.row_bytes, i.rows, i.planes, i.sram_row_stride, i.sram_plane_stride),
        )
        dram = (
            i.dram,
            i.dram + _extent(i.row_bytes, i.rows, i.planes, i.dram_row_stride, i.dram_plane_stride),
        )
        return ([], [sram], [dram], []) if i.opcode == Opcode.LOAD else ([sram], [], [], [dram])
    if isinstance(i, Conv):
        out_h, out_w = conv_output_shape(i)
        pixels = i.in_h * i.in_w
        reads = [(i.src, i.src + (pixels - 1) * (i.src_stride or i.in_c) + i.in_c)]
        reads.append((i.weights, i.weights + i.out_c * i.kernel_h * i.kernel_w * (i.in_c // i.groups)))
        dst = (i.dst, i.dst + out_h * out_w * i.out_c * 4)
        return _mac(reads, dst, i, i.out_c)
    if isinstance(i, Matmul):
        reads = [(i.src, i.src + i.m * i.k), (i.weights, i.weights + i.n * i.k)]
        return _mac(reads, (i.dst, i.dst + i.m * i.n * 4), i, i.n)
    if isinstance(i, Requant):
        sets = i.channels if i.per_channel else 1
        reads = [
            (i.src, i.src + i.pixels * i.channels * 4),
            (i.params, i.params + requant_param_bytes(requant_mode, sets)),
        ]
        dst = (i.dst, i.dst + (i.pixels - 1) * (i.dst_stride or i.channels) + i.channels)
        return reads, [dst], [], []
    if isinstance(i, Add):
        return (
            [(i.src_a, i.src_a + i.count), (i.src_b, i.src_b + i.count)],
            [(i.dst, i.dst + i.count)],
            [],
            [],
        )
    if isinstance(i, Mul):
        count = i.pixels * i.channels
        b = i.channels if i.broadcast_b else count
        return [(i.src_a, i.src_a + count), (i.src_b, i.src_b + b)], [(i.dst, i.dst + count)], [], []
    if isinstance(i, Clip):
        return [(i.src, i.src + i.count)], [(i.dst, i.dst + i.count)], [], []
    if isinstance(i, Lut):
        return (
            [(i.src, i.src + i.count), (i.table, i.table + LUT_ENTRIES)],
            [(i.dst, i.dst + i.count)],
            [],
            [],
        )
    if isinstance(i, Softmax):
        count = i.rows * i.depth
        table = (i.table, i.table + SOFTMAX_TABLE_BYTES)
        return [(i.src, i.src + count), table], [(i.dst, i.dst + count)], [], []
    if isinstance(i, MaxPool | AvgPool):
        out_h, out_w = pool_output_shape(i)
        src = (i.src, i.src + i.in_h * i.in_w * i.channels)
        return [src], [(i.dst, i.dst + out_h * out_w * i.channels)], [], []
    return [], [], [], []


def _extent(row_bytes: int, rows: int, planes: int, row_stride: int, plane_stride: int) -> int:
    return (planes - 1) * plane_stride + (rows - 1) * row_stride + row_bytes


def _mac(reads: list, dst: tuple, i, channels: int):
    if i.with_bias:
        reads.append((i.bias, i.bias + 4 * channels))
    if i.accumulate:
        reads.append(dst)
    return reads, [dst], [], []


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
        reads, writes, dram_reads, dram_writes = footprint(instruction, requant_mode)
        for start, stop in reads:
            sram.read(start, stop, pc, deps)
        for start, stop in dram_reads:
            dram.read(start, stop, pc, deps)
        for start, stop in writes:
            sram.write(start, stop, pc, deps)
        for start, stop in dram_writes:
            dram.write(start, stop, pc, deps)
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
