"""How the VPU's parameters are laid out in memory: requantisation parameters by numerics
mode, and lookup tables. The compiler writes them into weight blobs; the simulator reads
them at `Requant.params` and `Lut.table`.

    float32 mode      n float32 multipliers M = f32(f32(s_x * s_w) / s_y)
    fixed_point mode  n int32 multipliers, then n int32 shifts in [-31, 30]
                      (TFLite's QuantizeMultiplier: M ~ multiplier * 2^(shift - 31))
    lut               256 int8 entries, the outputs for x = -128..127
"""

from __future__ import annotations

import math

import numpy as np

LUT_ENTRIES = 256
SHIFT_RANGE = (-31, 30)


def requant_multiplier(scale_x: float, scale_w: np.ndarray | float, scale_y: float) -> np.ndarray:
    """The float32 multipliers M = f32(f32(s_x * s_w) / s_y) that float32 mode expects."""
    product = np.float32(scale_x) * np.asarray(scale_w, dtype=np.float32)
    return (product / np.float32(scale_y)).astype(np.float32)


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier: (multiplier in [2^30, 2^31), shift) with real ~ m * 2^(shift-31)."""
    if real == 0.0:
        return 0, 0
    fraction, shift = math.frexp(real)
    multiplier = int(math.floor(abs(fraction) * (1 << 31) + 0.5)) * (1 if fraction > 0 else -1)
    if abs(multiplier) == 1 << 31:
        multiplier //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return multiplier, shift


def requant_param_bytes(mode: str, sets: int) -> int:
    """Bytes of `sets` parameter sets in `mode`."""
    return sets * (4 if mode == "float32" else 8)


def pack_requant_params(mode: str, multipliers: np.ndarray) -> bytes:
    """The parameter block of float32 multipliers `multipliers` in `mode`'s layout. A
    fixed-point shift outside SHIFT_RANGE (a multiplier too small or too large) saturates to
    the range's end with the multiplier adjusted, or is refused when it cannot be."""
    multipliers = np.asarray(multipliers, dtype=np.float32).reshape(-1)
    if mode == "float32":
        return multipliers.tobytes()
    pairs = [_fixed_point(float(m)) for m in multipliers]
    ints = np.array([p[0] for p in pairs], dtype=np.int32)
    shifts = np.array([p[1] for p in pairs], dtype=np.int32)
    return ints.tobytes() + shifts.tobytes()


def _fixed_point(real: float) -> tuple[int, int]:
    multiplier, shift = quantize_multiplier(real)
    if shift > SHIFT_RANGE[1]:
        raise ValueError(f"requantisation multiplier {real:g} is too large for fixed point")
    if shift < SHIFT_RANGE[0]:  # |real| < 2^-32: the product rounds to zero either way
        return 0, 0
    return multiplier, shift
