"""Which bytes an instruction reads and writes: defined once, read by the compiler's token
placement (compiler/lower/codegen/sync.py) and the simulator's plans and race check
(sim/machine.py, sim/hazards.py).

`footprint(i, requant_mode)` lists one `Access` per operand: the memory (SRAM or DRAM),
read or write, the byte `Region` and the alignment the ISA requires of it. A region is an
interval [start, stop); a strided DMA block, a conv's spaced (or overlapping) input pixels
or rows and a requant's spaced output pixels also carry their `block` shape, so two regions
overlap only where their bytes do (the sync pass takes the bounding interval:
conservative). An accumulating MAC lists its destination twice, as a read and as a write.
Reads come before writes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vpuc.targets.isa.cost import SOFTMAX_TABLE_BYTES, conv_output_shape, pool_output_shape
from vpuc.targets.isa.formats import (
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
)
from vpuc.targets.isa.params import LUT_ENTRIES, requant_param_bytes

SRAM, DRAM = "sram", "dram"


@dataclass(frozen=True, slots=True)
class Region:
    """Bytes [start, stop); `block` = (planes, rows, row_bytes, row_stride, plane_stride)
    when only a strided block inside that span is touched."""

    start: int
    stop: int
    block: tuple[int, int, int, int, int] | None = None

    def overlaps(self, other: Region) -> bool:
        lo, hi = max(self.start, other.start), min(self.stop, other.stop)
        if lo >= hi:
            return False
        if self.block is None and other.block is None:
            return True
        return bool(np.any(self.byte_mask(lo, hi) & other.byte_mask(lo, hi)))

    def byte_mask(self, lo: int, hi: int) -> np.ndarray:
        """Which bytes of [lo, hi) this region touches."""
        if self.block is None:
            return np.ones(hi - lo, dtype=bool)
        planes, rows, row_bytes, row_stride, plane_stride = self.block
        starts = (
            self.start
            + np.arange(planes, dtype=np.int64)[:, None] * plane_stride
            + np.arange(rows, dtype=np.int64)[None, :] * row_stride
        ).ravel()
        edges = np.zeros(hi - lo + 1, dtype=np.int64)
        np.add.at(edges, np.clip(starts - lo, 0, hi - lo), 1)
        np.add.at(edges, np.clip(starts + row_bytes - lo, 0, hi - lo), -1)
        return np.cumsum(edges[:-1]) > 0

    def __str__(self) -> str:
        return f"[{self.start}, {self.stop})"


def block_region(start: int, shape: tuple[int, int, int], strides: tuple[int, int]) -> Region:
    """The region of `planes x rows x row_bytes` bytes with (row, plane) strides; a dense
    block is a plain interval."""
    planes, rows, row_bytes = shape
    row_stride, plane_stride = strides
    stop = start + (planes - 1) * plane_stride + (rows - 1) * row_stride + row_bytes
    dense = (rows == 1 or row_stride == row_bytes) and (planes == 1 or plane_stride == rows * row_bytes)
    return Region(start, stop, None if dense else (planes, rows, row_bytes, row_stride, plane_stride))


@dataclass(frozen=True, slots=True)
class Access:
    """One operand's bytes: `what` names it in messages ("read of 'src'", "int32 'dst'")."""

    memory: str
    write: bool
    region: Region
    what: str
    align: int = 1


def footprint(i: Instruction, requant_mode: str) -> tuple[Access, ...]:
    """Every byte range `i` reads and writes, reads first."""
    for kinds, rule in _RULES:
        if isinstance(i, kinds):
            accesses = rule(i, requant_mode)
            return tuple(a for a in accesses if not a.write) + tuple(a for a in accesses if a.write)
    return ()


def _read(name: str, start: int, nbytes: int) -> Access:
    return Access(SRAM, False, Region(start, start + nbytes), f"read of '{name}'")


def _write(name: str, start: int, nbytes: int) -> Access:
    return Access(SRAM, True, Region(start, start + nbytes), f"write of '{name}'")


def _int32(name: str, start: int, count: int, write: bool = False) -> Access:
    return Access(SRAM, write, Region(start, start + 4 * count), f"int32 '{name}'", align=4)


def _dma(i: Dma, _mode: str) -> list[Access]:
    shape = (i.planes, i.rows, i.row_bytes)
    load = i.opcode == Opcode.LOAD
    dram = block_region(i.dram, shape, (i.dram_row_stride, i.dram_plane_stride))
    sram = block_region(i.sram, *i.sram_block())
    return [
        Access(DRAM, not load, dram, "read" if load else "write"),
        Access(SRAM, load, sram, "write" if load else "read"),
    ]


def _conv(i: Conv, _mode: str) -> list[Access]:
    out_h, out_w = conv_output_shape(i)
    pixel = i.src_stride or i.in_c
    row = i.src_row_stride or i.in_w * pixel
    if pixel < i.in_c:  # overlapping pixels: each row one run
        region = block_region(i.src, (i.in_h, 1, (i.in_w - 1) * pixel + i.in_c), (0, row))
    else:
        region = block_region(i.src, (i.in_h, i.in_w, i.in_c), (pixel, row))
    src = Access(SRAM, False, region, "read of 'src'")
    weights = _read("weights", i.weights, i.out_c * i.kernel_h * i.kernel_w * (i.in_c // i.groups))
    return [src, weights, *_mac_result(i, out_h * out_w, i.out_c)]


def _matmul(i: Matmul, _mode: str) -> list[Access]:
    return [_read("src", i.src, i.m * i.k), _read("weights", i.weights, i.n * i.k), *_mac_result(i, i.m, i.n)]


def _mac_result(i: Conv | Matmul, pixels: int, channels: int) -> list[Access]:
    dst = _int32("dst", i.dst, pixels * channels, write=True)
    found = [_int32("bias", i.bias, channels)] if i.with_bias else []
    if i.accumulate:
        found.append(Access(SRAM, False, dst.region, dst.what, dst.align))
    return [*found, dst]


def _requant(i: Requant, mode: str) -> list[Access]:
    count = i.pixels * i.channels
    sets = i.channels if i.per_channel else 1
    params = Region(i.params, i.params + requant_param_bytes(mode, sets))
    if i.dst_stride in (0, i.channels):
        dst = _write("dst", i.dst, count)
    else:
        region = block_region(i.dst, (1, i.pixels, i.channels), (i.dst_stride, 0))
        dst = Access(SRAM, True, region, "write of 'dst'")
    return [_int32("src", i.src, count), Access(SRAM, False, params, "read of 'params'", 4), dst]


def _add(i: Add, _mode: str) -> list[Access]:
    return [_read("src_a", i.src_a, i.count), _read("src_b", i.src_b, i.count), _write("dst", i.dst, i.count)]


def _mul(i: Mul, _mode: str) -> list[Access]:
    count = i.pixels * i.channels
    b = i.channels if i.broadcast_b else count
    return [_read("src_a", i.src_a, count), _read("src_b", i.src_b, b), _write("dst", i.dst, count)]


def _clip(i: Clip, _mode: str) -> list[Access]:
    return [_read("src", i.src, i.count), _write("dst", i.dst, i.count)]


def _lut(i: Lut, _mode: str) -> list[Access]:
    return [_read("src", i.src, i.count), _read("table", i.table, LUT_ENTRIES), _write("dst", i.dst, i.count)]


def _softmax(i: Softmax, _mode: str) -> list[Access]:
    count = i.rows * i.depth
    table = Access(SRAM, False, Region(i.table, i.table + SOFTMAX_TABLE_BYTES), "read of 'table'", 4)
    return [_read("src", i.src, count), table, _write("dst", i.dst, count)]


def _pool(i: MaxPool | AvgPool, _mode: str) -> list[Access]:
    out_h, out_w = pool_output_shape(i)
    return [
        _read("src", i.src, i.in_h * i.in_w * i.channels),
        _write("dst", i.dst, out_h * out_w * i.channels),
    ]


_RULES = (
    (Dma, _dma),
    (Conv, _conv),
    (Matmul, _matmul),
    (Requant, _requant),
    (Add, _add),
    (Mul, _mul),
    (Clip, _clip),
    (Lut, _lut),
    (Softmax, _softmax),
    (MaxPool | AvgPool, _pool),
)
