"""The vector unit's rounding arithmetic, vectorised: requantisation and rescaled addition.

Used by vector.py and pool.py; reference.py defines the same formulas element by element,
and tests hold the two together. Two requantisation modes (Target.numerics.requant):

- "float32" (onnxruntime-exact): y = clamp(rne(f32(f32(acc) * M)) + zp, lo, hi), with
  M = f32(f32(s_x * s_w) / s_y) per channel and rne = round half to even.
- "fixed_point" (TFLite, gemmlowp's double rounding): y = clamp(RDBPOT(SRDHM(sat32(acc <<
  max(shift, 0)), multiplier), max(-shift, 0)) + zp, lo, hi).
"""

from __future__ import annotations

import numpy as np

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


def requant_float32(acc: np.ndarray, multiplier: np.ndarray, zp: int, lo: int, hi: int) -> np.ndarray:
    """int8 of clamp(rne(f32(f32(acc) * multiplier)) + zp, lo, hi); multiplier broadcasts."""
    with np.errstate(over="ignore"):  # a huge multiplier saturates, as the clamp says
        y = np.multiply(acc, multiplier, dtype=np.float32)  # f32(acc) * M, rounded to f32
    np.rint(y, out=y)
    y += np.float32(zp)
    np.clip(y, lo, hi, out=y)
    return y.astype(np.int8)


def requant_fixed_point(
    acc: np.ndarray, multiplier: np.ndarray, shift: np.ndarray, zp: int, lo: int, hi: int
) -> np.ndarray:
    """int8 of TFLite's MultiplyByQuantizedMultiplier(acc, multiplier, shift) + zp, clamped."""
    shift = shift.astype(np.int64)
    right = np.maximum(-shift, 0)
    x = np.clip(acc.astype(np.int64) << np.maximum(shift, 0), INT32_MIN, INT32_MAX)
    high = _saturating_rounding_doubling_high_mul(x, multiplier.astype(np.int64))
    mask = (np.int64(1) << right) - 1
    threshold = (mask >> 1) + (high < 0)
    y = (high >> right) + ((high & mask) > threshold)
    return np.clip(y + zp, lo, hi).astype(np.int8)


def _saturating_rounding_doubling_high_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """gemmlowp's SRDHM on int32 values held in int64: (a*b + nudge) / 2^31, toward zero."""
    product = a * b
    total = product + np.where(product >= 0, 1 << 30, 1 - (1 << 30))
    high = np.where(total >= 0, total >> 31, -((-total) >> 31))
    return np.where((a == INT32_MIN) & (b == INT32_MIN), INT32_MAX, high)


def add_float32(
    a: np.ndarray,
    b: np.ndarray,
    zp_a: int,
    zp_b: int,
    scale_a: float,
    scale_b: float,
    zp: int,
    lo: int,
    hi: int,
) -> np.ndarray:
    """int8 of clamp(rne(f32(f32(scale_a*(a-zp_a)) + f32(scale_b*(b-zp_b)))) + zp, lo, hi)."""
    y = a.astype(np.float32)
    y -= np.float32(zp_a)
    y *= np.float32(scale_a)
    other = b.astype(np.float32)
    other -= np.float32(zp_b)
    other *= np.float32(scale_b)
    y += other
    np.rint(y, out=y)
    y += np.float32(zp)
    np.clip(y, lo, hi, out=y)
    return y.astype(np.int8)


def mul_float32(
    a: np.ndarray, b: np.ndarray, zp_a: int, zp_b: int, scale: float, zp: int, lo: int, hi: int
) -> np.ndarray:
    """int8 of clamp(rne(f32(scale * f32((a-zp_a)*(b-zp_b)))) + zp, lo, hi); b broadcasts.
    The integer product is at most 2^16 in magnitude, so its float32 is exact."""
    product = (a.astype(np.int32) - np.int32(zp_a)) * (b.astype(np.int32) - np.int32(zp_b))
    y = product.astype(np.float32)
    y *= np.float32(scale)
    np.rint(y, out=y)
    y += np.float32(zp)
    np.clip(y, lo, hi, out=y)
    return y.astype(np.int8)


def softmax_rows(x: np.ndarray, table: np.ndarray, multiplier: int, shift: int, zp: int) -> np.ndarray:
    """int8 softmax of each row of `x` (rows, depth), docs/softmax.md:

    e = table[x - max(row) + 255]          int32, table[255] = 2^T
    S = sum(e)                              int32 (the caller checks it fits)
    n = bit_length(S); r = round(2^(n+29) / S)        in [2^29, 2^30]
    t = round(e * r / 2^(n-1))              e / S in Q30
    y = clamp(zp + round(t * multiplier / 2^shift))   rounding half up
    """
    x64 = x.astype(np.int64)
    e = table.astype(np.int64)[x64 - x64.max(axis=1, keepdims=True) + 255]
    total = e.sum(axis=1, keepdims=True)
    n = np.frexp(total.astype(np.float64))[1].astype(np.int64)  # exact bit length below 2^53
    reciprocal = ((np.int64(1) << (n + 29)) + total // 2) // total
    t = (e * reciprocal + ((np.int64(1) << (n - 1)) >> 1)) >> (n - 1)
    y = zp + ((t * np.int64(multiplier) + (np.int64(1) << (shift - 1))) >> shift)
    return np.clip(y, -128, 127).astype(np.int8)
