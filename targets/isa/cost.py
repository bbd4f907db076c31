"""What one instruction costs on a given Hardware: cycles on its unit, and its MACs.

Defined once, here, beside the formats: the simulator's plans (vpuc.sim) take every
instruction's cycles from `instruction_cycles`, and the compiler's cost model and
compile-time estimates (compiler/lower/codegen/estimate.py, compiler/partition/cost.py) read the
same functions. What differs between the two sides (overlap between units, stalls on
tokens, the schedule) is what the tests that compare them are about. docs/isa.md gives
each formula in prose; docs/targets.md defines every figure.

Every instruction but END costs issue_cycles + its work; with issue_order = "before_wait"
the issue may run while the instruction waits on its tokens (`issue_overlap`), and with
mac_load_order = "before_wait" a MAC instruction's first weight load too (`wait_overlap`). Scratchpad
traffic: a unit moves at most sram_bytes_per_cycle bytes of SRAM a cycle (no limit when the
target leaves it out), so an instruction's work is at least ceil(its SRAM bytes /
sram_bytes_per_cycle).

    DMA     dram_latency_cycles + max(DRAM side, SRAM side): DRAM side
            ceil(sum over the DRAM-side contiguous runs of max(run, dram_burst_bytes) /
            dram_bytes_per_cycle) (a run pays at least one whole burst); SRAM side the sum over
            the SRAM-side runs of ceil(run / min(dram_bytes_per_cycle, sram_bytes_per_cycle));
            a transfer of the constant region (region = 1) on a target with weights_in =
            "flash" takes flash_bytes_per_cycle, flash_latency_cycles, flash_burst_bytes;
            an interleaving load (interleave = 1) writes rows of row_bytes x planes bytes
            on the SRAM side (dma_cost.py: `interleave_cycles`)
    MAC     mac_weight_load_cycles + (blocks - 1) * max(pixels', mac_weight_load_cycles)
            + pixels' + blocks * mac_fill_cycles + the array's fill and drain once
            (mac_drain_cycles; left out, mac_rows + mac_cols) (the first block's load, every
            block streaming while the next loads, the last with no load behind it); a block
            is one rows x cols weight tile of one kernel tap (with
            mac_row_slice, of up to rows // slice taps of a narrow input: tap_blocks);
            pixels' = pixels, or ceil(pixels / mac_grouped_pixels_per_cycle) when several
            groups share a block (depthwise). SRAM bytes: the input once per column block,
            the weights, the int32 output (twice when accumulating) and the biases
    VCONV   a depthwise conv on the vector unit: per kernel tap ceil(channels / lanes) vectors
            per output pixel, or with fewer channels than lanes and stride_w 1, out_h *
            ceil(out_w / (lanes // channels)) (neighbouring pixels share a vector), at
            vector_mac_per_cycle; SRAM bytes as the MAC array's conv
    VEC     the unit works in vector_lanes-wide vectors at its kind's rate r (elements per
            cycle, vector_<kind>_per_cycle): ceil(vectors * vector_lanes / r); requant
            vectors = ceil(channels / lanes) * pixels; add, mul, clip, lut
            ceil(elements / lanes); pools ceil(channels / lanes) * out pixels * window taps,
            out pixels counted in whole vector_pool_block_h x vector_pool_block_w blocks;
            softmax three passes over rows * ceil(depth / lanes) vectors (max at the clip
            rate, table + sum at the lut rate, multiply + requantise at the mul rate) plus
            vector_reciprocal_cycles per row; SRAM bytes 3 reads + 1 write per element and
            the 1 KiB table; with softmax_passes_in = "dram" each of its 4 passes also
            pays issue_cycles and a read and a write of the tensor through the DRAM port
            (`softmax_round_trip_cycles`)
"""

from __future__ import annotations

import math
from collections.abc import Callable

from vpuc.targets.isa.dma_cost import (
    _dma,
    ceil_div,
)
from vpuc.targets.isa.formats import (
    Add,
    AvgPool,
    Clip,
    Conv,
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
from vpuc.targets.model import Hardware


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


# --- MAC array -----------------------------------------------------------------------------


def groups_per_block(hw: Hardware, groups: int, cin_g: int, cout_g: int) -> int:
    """Groups that share one weight block side by side (1 unless they are narrow)."""
    return max(1, min(groups, hw.mac_rows // cin_g, hw.mac_cols // cout_g))


def mac_blocks(hw: Hardware, groups: int, cin_g: int, cout_g: int) -> int:
    """Weight tiles of one kernel tap: groups too narrow for the array share it side by side
    (block-diagonal, as for depthwise), wider ones take ceil(cin/rows) x ceil(cout/cols)."""
    packed = groups_per_block(hw, groups, cin_g, cout_g)
    return ceil_div(groups, packed) * ceil_div(cin_g, hw.mac_rows) * ceil_div(cout_g, hw.mac_cols)


def tap_blocks(hw: Hardware, cin: int, taps: int) -> int:
    """Weight blocks of one column block of a dense conv over all its kernel taps: one tap
    of mac_rows input channels a block (ceil(cin / rows) per tap), or, on a target with
    mac_row_slice, the rows in slices of that many channels each holding a tap (Ethos-U55's
    PartKernel: 4 taps of 8 channels), ceil(taps / (rows // slice)) * ceil(cin / slice)
    blocks, whichever is fewer (Vela picks the traversal per op the same way)."""
    depth_first = taps * ceil_div(cin, hw.mac_rows)
    if not hw.mac_row_slice or taps == 1:
        return depth_first
    per_block = hw.mac_rows // hw.mac_row_slice
    return min(depth_first, ceil_div(taps, per_block) * ceil_div(cin, hw.mac_row_slice))


def mac_cycles(
    hw: Hardware,
    groups: int,
    cin_g: int,
    cout_g: int,
    pixels: int,
    taps: int = 1,
    accumulate: bool = False,
    bias: bool = False,
) -> int:
    """The first block's weights load; then every block streams `pixels` through the array
    while the next block's weights load (double-buffered): max(pixels, weight load) each,
    but the last, with no load behind it, only its pixels; every block's pipeline fill
    (mac_fill_cycles); the array's fill and drain once (`Hardware.array_drain_cycles`).
    Blocks shared by several groups (depthwise) take mac_grouped_pixels_per_cycle pixels a cycle. At least the
    scratchpad time of the bytes it reads and writes (mac_sram_bytes)."""
    blocks = mac_blocks(hw, groups, cin_g, cout_g) * taps
    if groups == 1:
        blocks = ceil_div(cout_g, hw.mac_cols) * tap_blocks(hw, cin_g, taps)
    load = hw.mac_weight_load_cycles
    streamed = pixels
    if groups_per_block(hw, groups, cin_g, cout_g) > 1:
        streamed = ceil_div(pixels, hw.mac_grouped_pixels_per_cycle)
    stream = (blocks - 1) * max(streamed, load) + streamed + blocks * hw.mac_fill_cycles
    compute = load + stream + hw.array_drain_cycles
    traffic = mac_sram_bytes(hw, groups, cin_g, cout_g, pixels, taps, accumulate, bias)
    return max(compute, _sram_cycles(hw, traffic))


def mac_sram_bytes(
    hw: Hardware,
    groups: int,
    cin_g: int,
    cout_g: int,
    pixels: int,
    taps: int = 1,
    accumulate: bool = False,
    bias: bool = False,
) -> int:
    """Scratchpad bytes of one MAC instruction: every tap's input once per column block of
    its group's outputs, each weight once, the int32 outputs (read too when accumulating),
    the int32 biases."""
    in_c, out_c = groups * cin_g, groups * cout_g
    inputs = taps * pixels * in_c * ceil_div(cout_g, hw.mac_cols)
    weights = taps * cin_g * out_c
    outputs = pixels * out_c * 4 * (2 if accumulate else 1)
    return inputs + weights + outputs + (out_c * 4 if bias else 0)


def _sram_cycles(hw: Hardware, nbytes: int) -> int:
    return ceil_div(nbytes, hw.sram_bytes_per_cycle) if hw.sram_bytes_per_cycle else 0


def _conv(i: Conv, hw: Hardware) -> int:
    out_h, out_w = conv_output_shape(i)
    taps = i.kernel_h * i.kernel_w
    return mac_cycles(
        hw,
        i.groups,
        i.in_c // i.groups,
        i.out_c // i.groups,
        out_h * out_w,
        taps,
        bool(i.accumulate),
        bool(i.with_bias),
    )


def _matmul(i: Matmul, hw: Hardware) -> int:
    return mac_cycles(hw, 1, i.k, i.n, i.m, 1, bool(i.accumulate), bool(i.with_bias))


def vconv_vectors(hw: Hardware, channels: int, out_h: int, out_w: int, stride_w: int) -> int:
    """Lanes-wide vectors of one kernel tap of a vconv: one per output pixel and lanes' worth
    of channels; with fewer channels than lanes and stride 1 a vector holds lanes // channels
    neighbouring pixels of a row (their inputs for one tap are adjacent bytes, NHWC)."""
    if channels < hw.vector_lanes and stride_w == 1:
        return out_h * ceil_div(out_w, hw.vector_lanes // channels)
    return ceil_div(channels, hw.vector_lanes) * out_h * out_w


def _vconv(i: Conv, hw: Hardware) -> int:
    """A depthwise conv on the vector lanes: every kernel tap's vectors (vconv_vectors) at
    vector_mac_per_cycle multiply-accumulates a cycle (docs/isa.md, vconv), or the
    scratchpad time of the same bytes as the MAC array's conv."""
    if not hw.vector_mac_per_cycle:
        raise ValueError("vconv on a target without vector multiply-accumulate (vector_mac_per_cycle)")
    out_h, out_w = conv_output_shape(i)
    taps = i.kernel_h * i.kernel_w
    vectors = vconv_vectors(hw, i.out_c, out_h, out_w, i.stride_w) * taps
    traffic = mac_sram_bytes(hw, i.out_c, 1, 1, out_h * out_w, taps, bool(i.accumulate), bool(i.with_bias))
    return vector_cycles(hw, vectors, hw.vector_mac_per_cycle, traffic)


def conv_macs(i: Conv) -> int:
    out_h, out_w = conv_output_shape(i)
    return out_h * out_w * i.out_c * i.kernel_h * i.kernel_w * (i.in_c // i.groups)


# --- vector unit ---------------------------------------------------------------------------


def vector_cycles(hw: Hardware, vectors: int, rate: float, sram_bytes: int) -> int:
    """`vectors` lanes-wide vectors at `rate` elements per cycle, or the scratchpad time of
    `sram_bytes`, whichever is longer."""
    compute = math.ceil(vectors * hw.vector_lanes / rate - 1e-9)
    return max(compute, _sram_cycles(hw, sram_bytes))


def _requant(i: Requant, hw: Hardware) -> int:
    vectors = ceil_div(i.channels, hw.vector_lanes) * i.pixels
    return vector_cycles(hw, vectors, hw.vector_requant_per_cycle, 5 * i.pixels * i.channels)


def _add(i: Add, hw: Hardware) -> int:
    return vector_cycles(hw, ceil_div(i.count, hw.vector_lanes), hw.vector_add_per_cycle, 3 * i.count)


def _clip(i: Clip, hw: Hardware) -> int:
    return vector_cycles(hw, ceil_div(i.count, hw.vector_lanes), hw.vector_clip_per_cycle, 2 * i.count)


def _lut(i: Lut, hw: Hardware) -> int:
    return vector_cycles(hw, ceil_div(i.count, hw.vector_lanes), hw.vector_lut_per_cycle, 2 * i.count + 256)


def _mul(i: Mul, hw: Hardware) -> int:
    elements = i.pixels * i.channels
    b = i.channels if i.broadcast_b else elements
    return vector_cycles(hw, ceil_div(elements, hw.vector_lanes), hw.vector_mul_per_cycle, 2 * elements + b)


# One reciprocal per row: hw.vector_reciprocal_cycles (a radix-2 divider's 32 by default).
SOFTMAX_TABLE_BYTES = 4 * 256
# The passes of a softmax over its rows: the max, the exp table and sum, the rows'
# reciprocals, the scale and requantisation (docs/softmax.md).
SOFTMAX_PASSES = 4


def softmax_round_trip_cycles(hw: Hardware, elements: int) -> int:
    """What softmax_passes_in = "dram" adds to a softmax of `elements` (rows x depth bytes):
    each of its SOFTMAX_PASSES is a command of its own (issue_cycles) that reads the tensor
    and writes it back through the DRAM port, each way its latency and
    ceil(elements / dram_bytes_per_cycle). 0 with the passes in the scratchpad ("sram")."""
    if hw.softmax_passes_in != "dram":
        return 0
    one_way = hw.dram_latency_cycles + ceil_div(elements, hw.dram_bytes_per_cycle)
    return SOFTMAX_PASSES * (hw.issue_cycles + 2 * one_way)


def softmax_round_trip_bytes(hw: Hardware, elements: int) -> int:
    """The DRAM bytes each way of softmax_passes_in = "dram": each of the SOFTMAX_PASSES
    reads the tensor (`elements` bytes) and writes it back (0 with the passes in the
    scratchpad). The simulator counts them as the softmax's DRAM traffic, the estimate too."""
    return SOFTMAX_PASSES * elements if hw.softmax_passes_in == "dram" else 0


def _softmax(i: Softmax, hw: Hardware) -> int:
    vectors = i.rows * ceil_div(i.depth, hw.vector_lanes)
    passes = sum(
        math.ceil(vectors * hw.vector_lanes / rate - 1e-9)
        for rate in (hw.vector_clip_per_cycle, hw.vector_lut_per_cycle, hw.vector_mul_per_cycle)
    )
    compute = passes + i.rows * hw.vector_reciprocal_cycles
    work = max(compute, _sram_cycles(hw, 4 * i.rows * i.depth + SOFTMAX_TABLE_BYTES))
    return work + softmax_round_trip_cycles(hw, i.rows * i.depth)


def _pool(i: MaxPool | AvgPool, hw: Hardware) -> int:
    out_h, out_w = pool_output_shape(i)
    taps = out_h * out_w * i.kernel_h * i.kernel_w
    bh, bw = hw.vector_pool_block_h, hw.vector_pool_block_w
    blocked = ceil_div(out_h, bh) * bh * ceil_div(out_w, bw) * bw  # whole output blocks
    vectors = ceil_div(i.channels, hw.vector_lanes) * blocked * i.kernel_h * i.kernel_w
    traffic = taps * i.channels + out_h * out_w * i.channels
    return vector_cycles(hw, vectors, hw.vector_pool_per_cycle, traffic)


CYCLES: dict[Opcode, Callable[[Instruction, Hardware], int]] = {
    Opcode.LOAD: _dma,
    Opcode.STORE: _dma,
    Opcode.CONV: _conv,
    Opcode.MATMUL: _matmul,
    Opcode.REQUANT: _requant,
    Opcode.ADD: _add,
    Opcode.MUL: _mul,
    Opcode.CLIP: _clip,
    Opcode.LUT: _lut,
    Opcode.SOFTMAX: _softmax,
    Opcode.VCONV: _vconv,
    Opcode.MAXPOOL: _pool,
    Opcode.AVGPOOL: _pool,
    Opcode.END: lambda i, hw: 0,
}


def issue_overlap(hw: Hardware) -> int:
    """Cycles of an instruction's issue that may run before its tokens are in: all of
    issue_cycles with issue_order = "before_wait" (the issue overlaps the wait), else none.
    An instruction then starts at max(its unit free, its last token - this) and its work (its
    memory accesses) issue_cycles later: the rule of the simulator's schedule
    (vpuc.sim.timing), its race check (vpuc.sim.hazards) and the estimate (estimate.py)."""
    return hw.issue_cycles if hw.issue_order == "before_wait" else 0


def wait_overlap(hw: Hardware, unit: Unit) -> int:
    """Cycles of an instruction on `unit` that may run before its tokens are in: its issue
    (issue_overlap), and on the MAC array with mac_load_order = "before_wait" its first weight
    block's load too (mac_weight_load_cycles: the weight decoder fills the buffer from the
    stream while the command waits; the load ends no sooner than the tokens, so every weight
    it reads has arrived by then). It starts at max(its unit free, its last token - this),
    its memory accesses this long after its start: the rule of the simulator's schedule, its
    race check and the estimate."""
    load = hw.mac_weight_load_cycles if unit == Unit.MAC and hw.mac_load_order == "before_wait" else 0
    return issue_overlap(hw) + load


def instruction_cycles(instruction: Instruction, hw: Hardware) -> int:
    """Cycles `instruction` keeps its unit busy (its fields must already be valid): its
    issue cost, then its work."""
    if instruction.opcode == Opcode.END:
        return 0
    return hw.issue_cycles + CYCLES[instruction.opcode](instruction, hw)


def instruction_macs(instruction: Instruction) -> int:
    """Multiply-accumulates the MAC array performs (padding taps included); 0 elsewhere
    (vconv's are the vector unit's)."""
    if isinstance(instruction, Conv) and instruction.opcode == Opcode.CONV:
        return conv_macs(instruction)
    if isinstance(instruction, Matmul):
        return instruction.m * instruction.n * instruction.k
    return 0
