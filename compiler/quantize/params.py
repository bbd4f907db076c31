"""Quantisation parameters (DESIGN.md, Numerics) and the numpy quantisation of constants.

    activations  int8 per tensor, asymmetric: s = (hi - lo) / 255, zp = rne(-128 - lo / s),
                 over a calibrated range [lo, hi] that contains 0
    weights      int8 per output channel, symmetric: s_c = max|W_c| / 127, zp = 0,
                 W_q = clamp(rne(W / s_c), -127, 127)
    bias         int32 per output channel: s_c = f32(s_in * s_w,c), zp = 0, b_q = rne(b / s_c)
    constants    other constant operands of a VPU op (a Mul's scale): int8 per tensor over
                 their exact [min, max]

A range with lo == hi (a tensor that is always 0) gets s = 1, like onnxruntime. All rounding
is round-half-to-even (np.round), all scales float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INT8_MIN, INT8_MAX = -128, 127
WEIGHT_MAX = 127  # symmetric weights use [-127, 127]
INT32_MIN, INT32_MAX = np.iinfo(np.int32).min, np.iinfo(np.int32).max


@dataclass(frozen=True)
class QParams:
    """Scale and zero point of one quantised tensor; per-axis when `scale` is 1-D."""

    scale: np.ndarray  # float32, shape () or (C,)
    zero_point: np.ndarray  # int8 (int32 for bias), same shape as scale
    axis: int = -1  # the channel axis for per-axis parameters
    dtype: str = "int8"

    @property
    def per_axis(self) -> bool:
        return self.scale.ndim == 1

    def dequantize(self, values: np.ndarray) -> np.ndarray:
        """Float32 values of quantised `values`, as relax.dequantize computes them."""
        scale, zero = self.scale, self.zero_point.astype(np.int32)
        if self.per_axis:
            shape = [1] * values.ndim
            shape[self.axis] = -1
            scale, zero = scale.reshape(shape), zero.reshape(shape)
        return (values.astype(np.int32) - zero).astype(np.float32) * scale

    def same_as(self, other: QParams) -> bool:
        """Equal parameters (the axis only matters when per-axis)."""
        return (
            self.dtype == other.dtype
            and self.scale.shape == other.scale.shape
            and np.array_equal(self.scale, other.scale)
            and np.array_equal(self.zero_point.astype(np.int64), other.zero_point.astype(np.int64))
            and (not self.per_axis or self.axis == other.axis)
        )

    def to_json(self) -> dict:
        return {
            "scale": self.scale.tolist(),
            "zero_point": self.zero_point.tolist(),
            "axis": self.axis if self.per_axis else None,
            "dtype": self.dtype,
        }


def activation_params(lo: float, hi: float) -> QParams:
    """int8 asymmetric parameters covering [lo, hi] (widened to contain 0)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if hi - lo <= 0.0:
        return QParams(np.array(1.0, np.float32), np.array(0, np.int8))
    scale = np.float32((hi - lo) / (INT8_MAX - INT8_MIN))
    scale = max(scale, np.float32(np.finfo(np.float32).tiny))
    zero = np.clip(np.round(INT8_MIN - lo / float(scale)), INT8_MIN, INT8_MAX)
    return QParams(np.array(scale, np.float32), np.array(zero, np.int8))


def quantize_weight(weight: np.ndarray, axis: int) -> tuple[np.ndarray, QParams]:
    """int8 symmetric per-channel weights along `axis` (the output channels)."""
    axis = axis % weight.ndim
    reduce = tuple(i for i in range(weight.ndim) if i != axis)
    peak = np.abs(weight).max(axis=reduce) if reduce else np.abs(weight)
    scale = (peak / WEIGHT_MAX).astype(np.float32)
    scale = np.where(scale > 0, scale, np.float32(1.0)).astype(np.float32)
    shape = [1] * weight.ndim
    shape[axis] = -1
    quantized = np.clip(np.round(weight / scale.reshape(shape)), -WEIGHT_MAX, WEIGHT_MAX).astype(np.int8)
    return quantized, QParams(scale, np.zeros(scale.shape, np.int8), axis)


def bias_scale(input_params: QParams, weight_params: QParams) -> np.ndarray:
    """s_in * s_w per output channel, rounded to float32 (as onnxruntime computes it)."""
    return (np.float32(input_params.scale) * weight_params.scale).astype(np.float32)


def quantize_bias(bias: np.ndarray, scale: np.ndarray, axis: int) -> tuple[np.ndarray, QParams]:
    """int32 bias with the given per-channel scale along `axis` of `bias`."""
    shape = [1] * bias.ndim
    shape[axis] = -1
    quantized = np.clip(np.round(bias.astype(np.float64) / scale.reshape(shape)), INT32_MIN, INT32_MAX)
    return quantized.astype(np.int32), QParams(scale, np.zeros(scale.shape, np.int32), axis, "int32")


def quantize_constant(value: np.ndarray) -> tuple[np.ndarray, QParams]:
    """int8 per-tensor asymmetric over the constant's exact range."""
    params = activation_params(float(value.min(initial=0.0)), float(value.max(initial=0.0)))
    return quantize_values(value, params), params


def quantize_values(values: np.ndarray, params: QParams) -> np.ndarray:
    """relax.quantize in numpy for per-tensor parameters (float32 divide, rne, clamp)."""
    scaled = np.round(values.astype(np.float32) / params.scale) + params.zero_point.astype(np.float32)
    return np.clip(scaled, INT8_MIN, INT8_MAX).astype(np.int8)
