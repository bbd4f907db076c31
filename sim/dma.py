"""The DMA unit: load (DRAM -> SRAM) and store (SRAM -> DRAM) of strided blocks.

One of the operation modules gathered by ops.py. A transfer moves `planes x rows x
row_bytes` bytes; rows and planes are strided independently on each side (1-D, 2-D, 3-D
blocks). Cost: targets/isa/cost.py `dma_cycles`: latency + whole bursts per DRAM-side run.
The source may repeat bytes (stride 0 broadcasts); destination rows must not overlap. An
interleaving load (`interleave`) writes its planes channels-last (`Dma.sram_block`).
"""

from __future__ import annotations

from vpuc.sim.machine import Plan, State, require, require_positive, touched
from vpuc.targets.isa.cost import instruction_cycles
from vpuc.targets.isa.dma_cost import dma_port
from vpuc.targets.isa.formats import Dma, Opcode, Unit


def plan_dma(instruction: Dma, state: State) -> Plan:
    i = instruction
    require_positive(i, "row_bytes", "rows", "planes")
    shape = (i.planes, i.rows, i.row_bytes)
    nbytes = i.planes * i.rows * i.row_bytes
    dram_strides = (i.dram_row_stride, i.dram_plane_stride)
    sram_strides = (i.sram_row_stride, i.sram_plane_stride)
    load = i.opcode == Opcode.LOAD
    require(load or not i.interleave, "interleave is a load's mode, not a store's")
    if i.interleave:
        require(
            i.sram_plane_stride == 0,
            "an interleaving load has no sram_plane_stride ({})",
            i.sram_plane_stride,
        )
        shape, sram_strides = i.sram_block()
    _require_disjoint_rows(shape, *(("sram", sram_strides) if load else ("dram", dram_strides)))
    reads, writes = touched(i, state)
    cycles = instruction_cycles(i, state.hardware)
    port = dma_port(i, state.hardware)
    if load:
        return Plan(Unit.DMA, cycles, writes=writes, dram_read_bytes=nbytes, port=port)
    return Plan(Unit.DMA, cycles, reads=reads, dram_written_bytes=nbytes, port=port)


def _require_disjoint_rows(shape: tuple[int, int, int], side: str, strides: tuple[int, int]) -> None:
    """The destination's rows and planes may not overlap (the source's may)."""
    planes, rows, row_bytes = shape
    row_stride, plane_stride = strides
    require(
        rows == 1 or row_stride >= row_bytes,
        "destination rows overlap: {}_row_stride {} < row_bytes {}",
        side,
        row_stride,
        row_bytes,
    )
    plane_extent = (rows - 1) * row_stride + row_bytes
    require(
        planes == 1 or plane_stride >= plane_extent,
        "destination planes overlap: {}_plane_stride {} < {}",
        side,
        plane_stride,
        plane_extent,
    )


def run_load(instruction: Dma, state: State) -> None:
    i = instruction
    shape = (i.planes, i.rows, i.row_bytes)
    source = state.dram.strided(i.dram, shape, (i.dram_row_stride, i.dram_plane_stride))
    if i.interleave:  # (planes, rows, x) -> rows of x-major, plane-minor bytes
        source = source.transpose(1, 2, 0).reshape(1, i.rows, i.row_bytes * i.planes)
    state.sram.strided(i.sram, *i.sram_block())[...] = source


def run_store(instruction: Dma, state: State) -> None:
    i = instruction
    shape = (i.planes, i.rows, i.row_bytes)
    source = state.sram.strided(i.sram, shape, (i.sram_row_stride, i.sram_plane_stride))
    state.dram.strided(i.dram, shape, (i.dram_row_stride, i.dram_plane_stride))[...] = source
