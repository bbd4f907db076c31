"""What one instruction costs on a given Hardware: cycles on its unit, and its MACs.

Defined once, here, beside the formats: the simulator's plans (vpuc.sim) take every
instruction's cycles from `instruction_cycles`, and the compiler's cost model and
compile-time estimates (compiler/lower/codegen/estimate.py, compiler/partition/cost.py) read the
same functions. What differs between the two sides (overlap between units, stalls on
tokens, the schedule) is what the tests that compare them are about. docs/isa.md gives
each formula in prose; docs/targets.md defines every figure.

Every instruction but END costs issue_cycles + its work; with issue_order = "before_wait"
the issue may run while the instruction waits on its tokens (`issue_overlap`). Scratchpad
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
            on the SRAM side (`interleave_cycles`)
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
from dataclasses import replace

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
    sides. DRAM moves every DRAM-side contiguous run's bytes, at least a whole burst (a 1-byte
    run costs a whole burst; a longer run's last, partial burst is a shorter burst and moves
    only its bytes: Vela's `_estimate_memory_transfer_efficiency`); the SRAM side moves
    dram_bytes_per_cycle a cycle, at least one cycle for every SRAM-side run (a scatter of
    single bytes takes a cycle per byte). Strides are (row, plane); sram_strides None:
    contiguous in SRAM."""
    runs, run_bytes = dram_runs(row_bytes, rows, planes, *dram_strides)
    dram = ceil_div(runs * max(run_bytes, hw.dram_burst_bytes), hw.dram_bytes_per_cycle)
    sram_runs, sram_run_bytes = dram_runs(
        row_bytes, rows, planes, *(sram_strides or (row_bytes, rows * row_bytes))
    )
    port = min(hw.dram_bytes_per_cycle, hw.sram_bytes_per_cycle or hw.dram_bytes_per_cycle)
    sram = sram_runs * ceil_div(sram_run_bytes, port)
    return hw.dram_latency_cycles + max(dram, sram)


def flash_view(hw: Hardware) -> Hardware:
    """The figures a constant-region transfer sees: flash's bandwidth, latency and burst when
    the target keeps its weights there (weights_in = "flash"), else DRAM's own."""
    if hw.weights_in != "flash":
        return hw
    return replace(
        hw,
        dram_bytes_per_cycle=hw.flash_bytes_per_cycle,
        dram_latency_cycles=hw.flash_latency_cycles,
        dram_burst_bytes=hw.flash_burst_bytes or hw.flash_bytes_per_cycle,
    )


def _dma(i: Dma, hw: Hardware) -> int:
    port = flash_view(hw) if i.region else hw
    size, dram_strides = (i.row_bytes, i.rows, i.planes), (i.dram_row_stride, i.dram_plane_stride)
    if i.interleave:  # the SRAM side writes whole interleaved rows (docs/isa.md)
        return interleave_cycles(port, *size, dram_strides, i.sram_row_stride)
    return dma_cycles(port, *size, dram_strides, (i.sram_row_stride, i.sram_plane_stride))


def interleave_cycles(
    hw: Hardware, row_bytes: int, rows: int, planes: int, dram_strides: tuple[int, int], sram_row_stride: int
) -> int:
    """Cycles of an interleaving load (Dma.interleave): the DRAM side as any load's (whole
    bursts per contiguous run of each plane); the engine holds a burst of every plane in a
    line buffer (planes x dram_burst_bytes) and writes their interleave as contiguous SRAM
    runs, a row of row_bytes x planes bytes each (adjacent rows merge), at the port's rate."""
    runs, run_bytes = dram_runs(row_bytes, rows, planes, *dram_strides)
    bursts = runs * ceil_div(run_bytes, hw.dram_burst_bytes)
    dram = ceil_div(bursts * hw.dram_burst_bytes, hw.dram_bytes_per_cycle)
    sram_runs, sram_run_bytes = dram_runs(row_bytes * planes, rows, 1, sram_row_stride, 0)
    port = min(hw.dram_bytes_per_cycle, hw.sram_bytes_per_cycle or hw.dram_bytes_per_cycle)
    return hw.dram_latency_cycles + max(dram, sram_runs * ceil_div(sram_run_bytes, port))


def dma_port(i: Dma, hw: Hardware) -> str:
    """The memory port a transfer uses: "flash" for the constant region (region = 1) on a
    target whose weights live in flash (its own AXI port beside DRAM's), else "dram"."""
    return "flash" if getattr(i, "region", 0) and hw.weights_in == "flash" else "dram"


def dma_latency(port: str, hw: Hardware) -> int:
    return hw.flash_latency_cycles if port == "flash" else hw.dram_latency_cycles


class DmaPorts:
    """When the DMA unit's transfers run: the one rule the simulator's schedule
    (vpuc.sim.timing) and the compile-time estimate (codegen/estimate.py) both follow.

    The DMA unit takes its transfers in program order; taking one holds it issue_cycles.
    Each transfer then uses its region's port (`dma_port`): its first byte arrives the
    port's latency after issue, and its data (the transfer's cycles past issue and latency)
    streams once the port has finished the transfer before it, so a port moves one
    transfer's data at a time while up to `<port>_outstanding` transfers are in flight
    (their latencies overlap). A transfer is taken only when fewer than that many earlier
    transfers on its port are still in flight. With 1 outstanding and one port this is the
    plain sequence: every transfer issue + latency + data after the one before."""

    def __init__(self, hw: Hardware) -> None:
        self.hw = hw
        self.taken = 0  # when the unit can take its next transfer
        self.port_free = {"dram": 0, "flash": 0}
        self.ends: dict[str, list[int]] = {"dram": [], "flash": []}  # per port, non-decreasing

    def outstanding(self, port: str) -> int:
        return self.hw.flash_outstanding if port == "flash" else self.hw.dram_outstanding

    def earliest(self, port: str, ready: int) -> int:
        """When a transfer ready at `ready` can be taken: the unit free and a slot on its port."""
        start = max(ready, self.taken)
        ends, limit = self.ends[port], self.outstanding(port)
        if len(ends) >= limit:
            start = max(start, ends[-limit])
        return start

    def run(self, port: str, start: int, cycles: int) -> int:
        """Take a transfer of `cycles` (instruction_cycles) at `start` (>= earliest); its end."""
        hw = self.hw
        latency = dma_latency(port, hw)
        data = cycles - hw.issue_cycles - latency
        end = max(start + hw.issue_cycles + latency, self.port_free[port]) + data
        self.taken = start + hw.issue_cycles
        self.port_free[port] = end
        ends = self.ends[port]
        ends.append(end)
        if len(ends) > 64:
            del ends[:-64]
        return end

    def copy(self) -> DmaPorts:
        """An independent copy of this state (the estimate tries schedules from a point on)."""
        other = DmaPorts(self.hw)
        other.taken, other.port_free = self.taken, dict(self.port_free)
        other.ends = {port: list(ends) for port, ends in self.ends.items()}
        return other

    @property
    def drained(self) -> int:
        """When every transfer taken so far has ended."""
        return max(self.taken, *self.port_free.values())


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
