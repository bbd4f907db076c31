"""The vector unit's elementwise operations: requant, add, mul, clip and lut.

One of the operation modules gathered by ops.py (pooling lives in pool.py). Costs
(targets/isa/cost.py): requant takes ceil(channels / lanes) cycles per pixel (channels map
to lanes); add, mul, clip and lut take ceil(elements / lanes) cycles.

Requant parameters, at `params` in SRAM (per_channel = 0: one set for every channel):
  float32 mode:      n float32 multipliers M
  fixed_point mode:  n int32 multipliers, then n int32 shifts in [-31, 30]
"""

from __future__ import annotations

import numpy as np

from vpuc.sim.errors import OpError
from vpuc.sim.machine import (
    Plan,
    State,
    require,
    require_clamp,
    require_positive,
    touched,
)
from vpuc.sim.numerics import add_float32, mul_float32, requant_fixed_point, requant_float32
from vpuc.targets.isa.cost import instruction_cycles
from vpuc.targets.isa.formats import Add, Clip, Lut, Mul, Requant, Unit
from vpuc.targets.isa.params import LUT_ENTRIES, SHIFT_RANGE


def plan_requant(instruction: Requant, state: State) -> Plan:
    i = instruction
    require_positive(i, "pixels", "channels")
    require_clamp(i)
    require(
        i.dst_stride == 0 or i.dst_stride >= i.channels,
        "dst_stride {} is below channels {}: output pixels would overlap",
        i.dst_stride,
        i.channels,
    )
    reads, writes = touched(i, state)
    return Plan(Unit.VEC, instruction_cycles(i, state.hardware), reads=reads, writes=writes)


def run_requant(instruction: Requant, state: State) -> None:
    i = instruction
    sram = state.sram
    acc = sram.view(i.src, (i.pixels, i.channels), np.int32)
    sets = i.channels if i.per_channel else 1
    if state.requant_mode == "float32":
        multiplier = sram.view(i.params, (sets,), np.float32)
        bad = np.flatnonzero(~np.isfinite(multiplier))
        if bad.size:
            raise OpError(f"multiplier {bad[0]} is {multiplier[bad[0]]}, not a finite float32")
        y = requant_float32(acc, multiplier, i.dst_zp, i.clamp_min, i.clamp_max)
    else:
        multiplier = sram.view(i.params, (sets,), np.int32)
        shift = sram.view(i.params + 4 * sets, (sets,), np.int32)
        bad = np.flatnonzero((shift < SHIFT_RANGE[0]) | (shift > SHIFT_RANGE[1]))
        if bad.size:
            raise OpError(f"shift {bad[0]} is {shift[bad[0]]}, outside {list(SHIFT_RANGE)}")
        y = requant_fixed_point(acc, multiplier, shift, i.dst_zp, i.clamp_min, i.clamp_max)
    stride = i.dst_stride or i.channels
    np.ndarray((i.pixels, i.channels), np.int8, sram.data, i.dst, (stride, 1))[...] = y


def plan_add(instruction: Add, state: State) -> Plan:
    i = instruction
    require_positive(i, "count")
    require_clamp(i)
    reads, writes = touched(i, state)
    return Plan(Unit.VEC, instruction_cycles(i, state.hardware), reads=reads, writes=writes)


def run_add(instruction: Add, state: State) -> None:
    i = instruction
    a = state.sram.view(i.src_a, (i.count,), np.int8)
    b = state.sram.view(i.src_b, (i.count,), np.int8)
    y = add_float32(a, b, i.zp_a, i.zp_b, i.scale_a, i.scale_b, i.dst_zp, i.clamp_min, i.clamp_max)
    state.sram.view(i.dst, (i.count,), np.int8)[...] = y


def plan_mul(instruction: Mul, state: State) -> Plan:
    i = instruction
    require_positive(i, "pixels", "channels")
    require_clamp(i)
    reads, writes = touched(i, state)
    return Plan(Unit.VEC, instruction_cycles(i, state.hardware), reads=reads, writes=writes)


def run_mul(instruction: Mul, state: State) -> None:
    i = instruction
    a = state.sram.view(i.src_a, (i.pixels, i.channels), np.int8)
    b = state.sram.view(i.src_b, (1 if i.broadcast_b else i.pixels, i.channels), np.int8)
    y = mul_float32(a, b, i.zp_a, i.zp_b, i.scale, i.dst_zp, i.clamp_min, i.clamp_max)
    state.sram.view(i.dst, (i.pixels, i.channels), np.int8)[...] = y


def plan_clip(instruction: Clip, state: State) -> Plan:
    i = instruction
    require_positive(i, "count")
    require_clamp(i)
    reads, writes = touched(i, state)
    return Plan(Unit.VEC, instruction_cycles(i, state.hardware), reads=reads, writes=writes)


def run_clip(instruction: Clip, state: State) -> None:
    i = instruction
    x = state.sram.view(i.src, (i.count,), np.int8)
    np.clip(x, i.clamp_min, i.clamp_max, out=state.sram.view(i.dst, (i.count,), np.int8))


def require_table(state: State) -> None:
    """The target's lookup table, which LUT and SOFTMAX read, must have LUT_ENTRIES entries."""
    entries = state.hardware.lut_entries
    require(
        entries >= LUT_ENTRIES,
        "this target has no {}-entry lookup table (lut_entries = {})",
        LUT_ENTRIES,
        entries,
    )


def plan_lut(instruction: Lut, state: State) -> Plan:
    i = instruction
    require_table(state)
    require_positive(i, "count")
    reads, writes = touched(i, state)
    return Plan(Unit.VEC, instruction_cycles(i, state.hardware), reads=reads, writes=writes)


def run_lut(instruction: Lut, state: State) -> None:
    i = instruction
    x = state.sram.view(i.src, (i.count,), np.uint8)
    table = state.sram.view(i.table, (LUT_ENTRIES,), np.int8)
    state.sram.view(i.dst, (i.count,), np.int8)[...] = table[x ^ 0x80]
