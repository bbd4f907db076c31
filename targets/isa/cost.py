"""What one instruction costs on a given Hardware: cycles on its unit, and its MACs.

Defined once, here, beside the formats: the simulator's plans (vpuc.sim) take every
instruction's cycles from `instruction_cycles`, and the compiler's cost model and
compile-time estimates (compiler/lower/codegen/estimate.py, compiler/partition/cost.py) read the
same functions. What differs between the two sides (overlap between units, stalls on
tokens, the schedule) is what the tests that compare them are about. docs/isa.md gives
each formula in prose.

    DMA     dram_latency_cycles + max(DRAM side, SRAM side): DRAM side
            ceil(bursts * dram_burst_bytes / dram_bytes_per_cycle), bursts = sum over the
            DRAM-side contiguous runs of ceil(run / dram_burst_bytes); SRAM side the sum over
            the SRAM-side runs of ceil(run / dram_bytes_per_cycle)
    MAC     blocks * max(pixels, mac_weight_load_cycles) + mac_weight_load_cycles
            + mac_rows + mac_cols; a block is one rows x cols weight tile of one kernel tap
    VEC     requant ceil(channels / lanes) * pixels; add, mul, clip, lut
            ceil(elements / lanes); pools ceil(channels / lanes) * out pixels * window
"""

from __future__ import annotations

from collections.abc import Callable

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
)
from vpuc.targets.model import Hardware


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def output_size(
    size: int, pad_before: int, pad_after: int, kernel: int, stride: int, dilation: int = 1
) -> int:
    """Output length of a sliding window: (size + pads - dilation*(kernel-1) - 1) // stride + 1."""
    return (size + pad_before + pad_after - dilation * (kernel - 1) - 1) // stride + 1


def conv_output_shape(i: Conv) -> tuple[int, int]:
    return (
        output_size(i.in_h, i.pad_top, i.pad_bottom, i.kernel_h, i.stride_h, i.dilation_h),
        output_size(i.in_w, i.pad_left, i.pad_right, i.kernel_w, i.stride_w, i.dilation_w),
    )


def pool_output_shape(i: MaxPool | AvgPool) -> tuple[int, int]:
    return (
        output_size(i.in_h, i.pad_top, i.pad_bottom, i.kernel_h, i.stride_h),
        output_size(i.in_w, i.pad_left, i.pad_right, i.kernel_w, i.stride_w),
    )


# --- DMA -----------------------------------------------------------------------------------


def dram_runs(
    row_bytes: int, rows: int = 1, planes: int = 1, row_stride: int = 0, plane_stride: int = 0
) -> tuple[int, int]:
    """(number of runs, bytes per run): the contiguous pieces of a block on one side.
    Rows merge when they are adjacent, and planes when they are too."""
    if rows > 1 and row_stride != row_bytes:
        return rows * planes, row_bytes
    plane_bytes = rows * row_bytes
    if planes > 1 and plane_stride != plane_bytes:
        return planes, plane_bytes
    return 1, planes * plane_bytes


def dma_cycles(
    hw: Hardware,
    row_bytes: int,
    rows: int = 1,
    planes: int = 1,
    dram_strides: tuple[int, int] = (0, 0),
    sram_strides: tuple[int, int] | None = None,
) -> int:
    """Cycles of one DRAM<->SRAM block: the descriptor's latency, then the longer of its two
    sides. DRAM moves whole bursts for every DRAM-side contiguous run (a 1-byte run costs a
    whole burst); the SRAM side moves dram_bytes_per_cycle a cycle, at least one cycle for
    every SRAM-side run (a scatter of single bytes takes a cycle per byte). Strides are
    (row, plane); sram_strides None: contiguous in SRAM."""
    runs, run_bytes = dram_runs(row_bytes, rows, planes, *dram_strides)
    bursts = runs * ceil_div(run_bytes, hw.dram_burst_bytes)
    dram = ceil_div(bursts * hw.dram_burst_bytes, hw.dram_bytes_per_cycle)
    sram_runs, sram_run_bytes = dram_runs(
        row_bytes, rows, planes, *(sram_strides or (row_bytes, rows * row_bytes))
    )
    sram = sram_runs * ceil_div(sram_run_bytes, hw.dram_bytes_per_cycle)
    return hw.dram_latency_cycles + max(dram, sram)


def _dma(i: Dma, hw: Hardware) -> int:
    return dma_cycles(
        hw,
        i.row_bytes,
        i.rows,
        i.planes,
        (i.dram_row_stride, i.dram_plane_stride),
        (i.sram_row_stride, i.sram_plane_stride),
    )


# --- MAC array -----------------------------------------------------------------------------


def mac_blocks(hw: Hardware, groups: int, cin_g: int, cout_g: int) -> int:
    """Weight tiles of one kernel tap: groups too narrow for the array share it side by side
    (block-diagonal, as for depthwise), wider ones take ceil(cin/rows) x ceil(cout/cols)."""
    packed = max(1, min(groups, hw.mac_rows // cin_g, hw.mac_cols // cout_g))
    return ceil_div(groups, packed) * ceil_div(cin_g, hw.mac_rows) * ceil_div(cout_g, hw.mac_cols)


def mac_cycles(hw: Hardware, groups: int, cin_g: int, cout_g: int, pixels: int, taps: int = 1) -> int:
    """Every block streams `pixels` through the array while the next block's weights load
    (double-buffered): max(pixels, weight load) each; plus the first load, fill and drain."""
    blocks = mac_blocks(hw, groups, cin_g, cout_g) * taps
    load = hw.mac_weight_load_cycles
    return blocks * max(pixels, load) + load + hw.mac_rows + hw.mac_cols


def _conv(i: Conv, hw: Hardware) -> int:
    out_h, out_w = conv_output_shape(i)
    taps = i.kernel_h * i.kernel_w
    return mac_cycles(hw, i.groups, i.in_c // i.groups, i.out_c // i.groups, out_h * out_w, taps)


def _matmul(i: Matmul, hw: Hardware) -> int:
    return mac_cycles(hw, 1, i.k, i.n, i.m)


def conv_macs(i: Conv) -> int:
    out_h, out_w = conv_output_shape(i)
    return out_h * out_w * i.out_c * i.kernel_h * i.kernel_w * (i.in_c // i.groups)


# --- vector unit ---------------------------------------------------------------------------


def _requant(i: Requant, hw: Hardware) -> int:
    return ceil_div(i.channels, hw.vector_lanes) * i.pixels


def _elementwise(i: Add | Clip | Lut, hw: Hardware) -> int:
    return ceil_div(i.count, hw.vector_lanes)


def _mul(i: Mul, hw: Hardware) -> int:
    return ceil_div(i.pixels * i.channels, hw.vector_lanes)


def _pool(i: MaxPool | AvgPool, hw: Hardware) -> int:
    out_h, out_w = pool_output_shape(i)
    return ceil_div(i.channels, hw.vector_lanes) * out_h * out_w * i.kernel_h * i.kernel_w


CYCLES: dict[Opcode, Callable[[Instruction, Hardware], int]] = {
    Opcode.LOAD: _dma,
    Opcode.STORE: _dma,
    Opcode.CONV: _conv,
    Opcode.MATMUL: _matmul,
    Opcode.REQUANT: _requant,
    Opcode.ADD: _elementwise,
    Opcode.MUL: _mul,
    Opcode.CLIP: _elementwise,
    Opcode.LUT: _elementwise,
    Opcode.MAXPOOL: _pool,
    Opcode.AVGPOOL: _pool,
    Opcode.END: lambda i, hw: 0,
}


def instruction_cycles(instruction: Instruction, hw: Hardware) -> int:
    """Cycles `instruction` keeps its unit busy (its fields must already be valid)."""
    return CYCLES[instruction.opcode](instruction, hw)


def instruction_macs(instruction: Instruction) -> int:
    """Multiply-accumulates the MAC array performs (padding taps included); 0 elsewhere."""
    if isinstance(instruction, Conv):
        return conv_macs(instruction)
    if isinstance(instruction, Matmul):
        return instruction.m * instruction.n * instruction.k
    return 0
