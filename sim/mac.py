"""The MAC array: conv (grouped, dilated, padded, depthwise) and matmul into int32 accumulators.

One of the operation modules gathered by ops.py. Semantics (the living definition is
reference.py): acc = wrap32(sum((x - src_zp) * w) [+ bias] [+ acc already at dst]), pad
values equal src_zp so they contribute nothing.

Speed: a whole tile is one numpy matrix product in float32, exact because int8 x int8
products are at most 2^14 in magnitude: a reduction of up to 1023 of them stays below 2^24
whatever the summation order, so longer reductions are summed in blocks of 1023 and the
blocks' int32 results added (wrapping, as the accumulators do). Zero points are folded out
afterwards: sum((x - zp) w) = sum(x w) - zp sum(w). The float32 windows and weights of the
last conv stay in State.memo until SRAM under them is written, so convs that stream weight
chunks over one resident input, or row tiles under one weight chunk, convert them once.

Cost: targets/isa/cost.py (`mac_cycles`): every rows x cols weight block of every kernel
tap streams the tile's pixels through the array while the next block's weights load.
vconv (a depthwise conv run on the vector unit's lanes, `vconv_vectors`) computes the same
values: its plan puts it on the vector unit, its run is the conv's.
"""

from __future__ import annotations

import numpy as np

from vpuc.sim.machine import (
    Plan,
    State,
    require,
    require_padded_fits,
    require_positive,
    touched,
    window_view,
)
from vpuc.sim.memory import Region
from vpuc.targets.isa.cost import conv_output_shape, instruction_cycles, instruction_macs
from vpuc.targets.isa.formats import Conv, Matmul, Unit

EXACT_BLOCK_K = 1023  # K * 2^14 < 2^24: a float32 sum of this many products is exact
CHUNK_ELEMENTS = 1 << 22  # window elements converted at once (bounds the simulator's memory)
MAX_ROW_ELEMENTS = 1 << 26  # simulator limit: window elements of one output row
# the fields that decide a conv's windows (the memo's key)
WINDOW_FIELDS = ("src", "in_h", "in_w", "in_c", "kernel_h", "kernel_w", "stride_h", "stride_w",
                 "dilation_h", "dilation_w", "pad_top", "pad_bottom", "pad_left", "pad_right",
                 "groups", "src_zp", "src_stride", "src_row_stride")  # fmt: skip


def plan_conv(instruction: Conv, state: State) -> Plan:
    i = instruction
    _check_conv(i)
    reads, writes = touched(i, state)
    cycles = instruction_cycles(i, state.hardware)
    return Plan(Unit.MAC, cycles, instruction_macs(i), reads, writes)


def plan_vconv(instruction: Conv, state: State) -> Plan:
    """vconv: the conv's semantics on the vector unit, depthwise only (one input and one
    output channel per group), on targets with vector_mac_per_cycle."""
    i = instruction
    _check_conv(i)
    require(
        state.hardware.vector_mac_per_cycle > 0,
        "this target's vector unit has no multiply-accumulate (hardware.vector_mac_per_cycle)",
    )
    require(i.groups == i.in_c == i.out_c, "vconv is depthwise only: groups {}, in_c {}, out_c {}",
            i.groups, i.in_c, i.out_c)  # fmt: skip
    reads, writes = touched(i, state)
    return Plan(Unit.VEC, instruction_cycles(i, state.hardware), 0, reads, writes)


def _check_conv(i: Conv) -> None:
    require_positive(
        i,
        "in_h",
        "in_w",
        "in_c",
        "out_c",
        "kernel_h",
        "kernel_w",
        "stride_h",
        "stride_w",
        "dilation_h",
        "dilation_w",
        "groups",
    )
    require(i.in_c % i.groups == 0, "in_c {} is not a multiple of groups {}", i.in_c, i.groups)
    require(i.out_c % i.groups == 0, "out_c {} is not a multiple of groups {}", i.out_c, i.groups)
    out_h, out_w = conv_output_shape(i)
    require(out_h >= 1 and out_w >= 1, "the kernel does not fit: output {} x {}", out_h, out_w)
    require_padded_fits(i, i.in_c)
    row_elements = out_w * i.kernel_h * i.kernel_w * i.in_c
    require(
        row_elements <= MAX_ROW_ELEMENTS,
        "simulator limit: one output row spans {} window elements (at most {})",
        row_elements,
        MAX_ROW_ELEMENTS,
    )


def conv_input(i: Conv, state: State) -> np.ndarray:
    """The (in_h, in_w, in_c) int8 input, a strided view when src_stride or src_row_stride
    space the pixels or rows (a pixel stride below in_c overlaps the pixels: pixel x holds
    bytes [x*src_stride, x*src_stride + in_c) of its row, reference.strided_input)."""
    pixel, row = input_strides(i)
    if (pixel, row) == (i.in_c, i.in_w * i.in_c):
        return state.sram.view(i.src, (i.in_h, i.in_w, i.in_c), np.int8)
    data = state.sram.data
    return np.ndarray((i.in_h, i.in_w, i.in_c), np.int8, data, i.src, (row, pixel, 1))


def input_strides(i: Conv) -> tuple[int, int]:
    """(pixel, row) strides of a conv's input in bytes."""
    pixel = i.src_stride or i.in_c
    return pixel, i.src_row_stride or i.in_w * pixel


def plan_matmul(instruction: Matmul, state: State) -> Plan:
    i = instruction
    require_positive(i, "m", "k", "n")
    reads, writes = touched(i, state)
    cycles = instruction_cycles(i, state.hardware)
    return Plan(Unit.MAC, cycles, instruction_macs(i), reads, writes)


def run_conv(instruction: Conv, state: State) -> None:
    i = instruction
    x = conv_input(i, state)
    w = state.sram.view(i.weights, (i.out_c, i.kernel_h, i.kernel_w, i.in_c // i.groups), np.int8)
    windows = conv_windows(x, i)
    out_h, out_w = windows.shape[:2]
    rows = max(1, CHUNK_ELEMENTS // (out_w * i.kernel_h * i.kernel_w * i.in_c))
    parts = [_conv_rows(windows[r : r + rows], w, i, state, rows >= out_h) for r in range(0, out_h, rows)]
    _write_accumulators(i, state, parts[0] if len(parts) == 1 else np.concatenate(parts), i.out_c)


def _conv_rows(windows: np.ndarray, w: np.ndarray, i: Conv, state: State, whole: bool) -> np.ndarray:
    """(rows, out_w, out_c) int32 for some output rows' windows (whole: all of the tile's)."""
    if w.shape[3] == 1 and i.groups > 1:
        return depthwise_int32(windows, w, i.src_zp)
    weights = _float_weights(w.reshape(i.groups, w.shape[0] // i.groups, -1), i.weights, state)
    product = dot_int32(_columns(windows, i, state, whole), *weights, i.src_zp)
    return product.transpose(1, 0, 2).reshape(*windows.shape[:2], -1)


def run_matmul(instruction: Matmul, state: State) -> None:
    i = instruction
    x = state.sram.view(i.src, (1, i.m, i.k), np.int8)
    if i.weights_kn:
        w = state.sram.view(i.weights, (i.k, i.n), np.int8).T[None]
    else:
        w = state.sram.view(i.weights, (1, i.n, i.k), np.int8)
    weights = _float_weights(w, i.weights, state, i.weights_kn)
    acc = dot_int32(x.astype(np.float32), *weights, i.src_zp)[0]
    if i.weights_zp:  # sum((x - zx)(w - zw)) = sum((x - zx) w) - zw sum(x - zx)
        centred = x[0].sum(axis=1, dtype=np.int32) - np.int32(i.src_zp * i.k)
        acc -= np.int32(i.weights_zp) * centred[:, None]
    _write_accumulators(i, state, acc, i.n)


def _write_accumulators(i: Conv | Matmul, state: State, acc: np.ndarray, out_c: int) -> None:
    """dst = acc [+ bias] [+ dst], all in wrapping int32."""
    if i.with_bias:
        acc += state.sram.view(i.bias, (out_c,), np.int32)
    dst = state.sram.view(i.dst, acc.shape, np.int32)
    if i.accumulate:
        dst += acc
    else:
        dst[...] = acc


def conv_windows(x: np.ndarray, i: Conv) -> np.ndarray:
    """The (out_h, out_w, kh, kw, in_c) int8 view of every window, padded with src_zp."""
    return window_view(x, i, i.src_zp, conv_output_shape(i), (i.dilation_h, i.dilation_w))


def _columns(windows: np.ndarray, i: Conv, state: State, whole: bool) -> np.ndarray:
    """(groups, pixels, taps * cin_g) float32 windows; the whole tile's are kept in State."""
    key = tuple(getattr(i, name) for name in WINDOW_FIELDS)
    if whole and (columns := state.recall("windows", key)) is not None:
        return columns
    out_h, out_w, kh, kw, in_c = windows.shape
    cin_g = in_c // i.groups
    columns = windows.reshape(out_h, out_w, kh, kw, i.groups, cin_g).transpose(4, 0, 1, 2, 3, 5)
    columns = columns.astype(np.float32, order="C").reshape(i.groups, out_h * out_w, -1)
    if whole:
        pixel, row = input_strides(i)
        region = Region(i.src, i.src + (i.in_h - 1) * row + (i.in_w - 1) * pixel + in_c)
        state.remember("windows", key, region, columns)
    return columns


def _float_weights(w: np.ndarray, addr: int, state: State, layout: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(G, K, N) float32 weights and their (G, N) int32 sums, for w (G, N, K) int8 at addr
    (`layout` tells the memo how they were read)."""
    key = (addr, w.shape, layout)
    if (weights := state.recall("weights", key)) is not None:
        return weights
    value = (w.astype(np.float32).transpose(0, 2, 1), w.sum(axis=2, dtype=np.int32))
    return state.remember("weights", key, Region(addr, addr + w.nbytes), value)


def dot_int32(x: np.ndarray, weights: np.ndarray, sums: np.ndarray, zp: int) -> np.ndarray:
    """(G, P, N) int32 = (x - zp) @ weights per group: x (G, P, K) and weights (G, K, N)
    float32 holding int8 values, sums (G, N) the int32 sums of weights over K."""
    k = x.shape[-1]
    blocks = -(-k // EXACT_BLOCK_K)
    step = -(-k // blocks)  # equal blocks of at most EXACT_BLOCK_K
    acc = np.matmul(x[..., :step], weights[:, :step]).astype(np.int32)
    for k0 in range(step, k, step):
        acc += np.matmul(x[..., k0 : k0 + step], weights[:, k0 : k0 + step]).astype(np.int32)
    if zp:  # int32 sums wrap, but so does everything else: the result is exact mod 2^32
        acc -= np.int32(zp) * sums[:, None, :]
    return acc


def depthwise_int32(windows: np.ndarray, w: np.ndarray, zp: int) -> np.ndarray:
    """(out_h, out_w, out_c) int32 of a convolution with one input channel per group."""
    out_h, out_w, kh, kw, groups = windows.shape
    multiplier = w.shape[0] // groups
    weights = w.reshape(groups, multiplier, kh, kw).astype(np.int32)
    acc = np.zeros((out_h, out_w, groups, multiplier), dtype=np.int32)
    for ky in range(kh):
        for kx in range(kw):
            acc += windows[:, :, ky, kx, :, None] * weights[:, :, ky, kx]
    acc = acc.reshape(out_h, out_w, groups * multiplier)
    if zp:
        acc -= np.int32(zp) * w.reshape(groups * multiplier, -1).sum(axis=1, dtype=np.int32)
    return acc
