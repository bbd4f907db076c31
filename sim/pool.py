"""The vector unit's pooling: maxpool and avgpool over NHWC int8 windows.

One of the operation modules gathered by ops.py. Padding never contributes to a result:
maxpool takes the maximum of each window's valid elements; avgpool sums (x - src_zp) over
the valid elements and divides by their number (or by kernel_h * kernel_w when
count_include_pad, padding counting as zero):

    y = clamp(rne(f32(f32(sum) * f32(scale / f32(count)))) + dst_zp, clamp_min, clamp_max)

Padding must be smaller than the window, so every window holds a valid element.
Cost (targets/isa/cost.py): ceil(channels / lanes) cycles per output pixel and window tap.
"""

from __future__ import annotations

import numpy as np

from vpuc.sim.machine import (
    Plan,
    State,
    require,
    require_clamp,
    require_padded_fits,
    require_positive,
    touched,
    window_view,
)
from vpuc.sim.numerics import requant_float32
from vpuc.targets.isa.cost import instruction_cycles, pool_output_shape
from vpuc.targets.isa.formats import AvgPool, MaxPool, Unit


def plan_pool(instruction: MaxPool | AvgPool, state: State) -> Plan:
    i = instruction
    require_positive(i, "in_h", "in_w", "channels", "kernel_h", "kernel_w", "stride_h", "stride_w")
    for pad, kernel in (
        ("pad_top", "kernel_h"),
        ("pad_bottom", "kernel_h"),
        ("pad_left", "kernel_w"),
        ("pad_right", "kernel_w"),
    ):
        value, size = getattr(i, pad), getattr(i, kernel)
        require(value < size, "{} {} must be smaller than {} {}", pad, value, kernel, size)
    if isinstance(i, AvgPool):
        require_clamp(i)
    out_h, out_w = pool_output_shape(i)
    require(out_h >= 1 and out_w >= 1, "the window does not fit: output {} x {}", out_h, out_w)
    require_padded_fits(i, i.channels)
    reads, writes = touched(i, state)
    return Plan(Unit.VEC, instruction_cycles(i, state.hardware), reads=reads, writes=writes)


def run_maxpool(instruction: MaxPool, state: State) -> None:
    i = instruction
    x = state.sram.view(i.src, (i.in_h, i.in_w, i.channels), np.int8)
    result = window_view(x, i, -128, pool_output_shape(i)).max(axis=(2, 3))
    state.sram.view(i.dst, result.shape, np.int8)[...] = result


def run_avgpool(instruction: AvgPool, state: State) -> None:
    i = instruction
    x = state.sram.view(i.src, (i.in_h, i.in_w, i.channels), np.int8)
    windows = window_view(x, i, i.src_zp, pool_output_shape(i))
    sums = windows.sum(axis=(2, 3), dtype=np.int32) - np.int32(i.src_zp * i.kernel_h * i.kernel_w)
    counts = np.float32(i.kernel_h * i.kernel_w) if i.count_include_pad else _valid_counts(i)
    multiplier = (np.float32(i.scale) / np.asarray(counts, dtype=np.float32))[..., None]
    result = requant_float32(sums, multiplier, i.dst_zp, i.clamp_min, i.clamp_max)
    state.sram.view(i.dst, result.shape, np.int8)[...] = result


def _valid_counts(i: AvgPool) -> np.ndarray:
    """(out_h, out_w) float32: how many taps of each window fall inside the input."""
    out_h, out_w = pool_output_shape(i)
    rows = _valid_1d(out_h, i.stride_h, i.pad_top, i.kernel_h, i.in_h)
    cols = _valid_1d(out_w, i.stride_w, i.pad_left, i.kernel_w, i.in_w)
    return (rows[:, None] * cols[None, :]).astype(np.float32)


def _valid_1d(count: int, stride: int, pad: int, kernel: int, size: int) -> np.ndarray:
    start = np.arange(count) * stride - pad
    return np.minimum(start + kernel, size) - np.maximum(start, 0)
