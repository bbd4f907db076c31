"""The living definition of what every VPU operation computes, in plain numpy integer code.

Written for clarity, independently of the fast functional model (dma.py, mac.py,
vector.py, pool.py, numerics.py): loops over kernel taps, windows and rows, int64
arithmetic wrapped to int32 at the end, and its own round-half-to-even. Tests run every
operation through the simulator and compare with these functions bit for bit; the
compiler's tests use them as the VPU's expected numerics. Arrays are NHWC without batch.
"""

from __future__ import annotations

import numpy as np

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


def wrap_int32(values: np.ndarray) -> np.ndarray:
    """Two's complement wrap of int64 values to int32, as the accumulators behave."""
    return ((values.astype(np.int64) - INT32_MIN) % (1 << 32) + INT32_MIN).astype(np.int32)


def round_half_even(values: np.ndarray) -> np.ndarray:
    """Nearest integer, ties to even, as int64 (values are clipped to +-2^40 first)."""
    v = np.clip(np.asarray(values, dtype=np.float64), -(2.0**40), 2.0**40)
    low = np.floor(v)
    fraction = v - low
    up = (fraction > 0.5) | ((fraction == 0.5) & (low % 2 == 1))
    return low.astype(np.int64) + up


def strided_input(memory, src: int, shape, pixel_stride: int, row_stride: int) -> np.ndarray:
    """The (H, W, C) int8 input a conv reads at byte `src` of `memory` (uint8) with its
    src_stride and src_row_stride: x[y, x, c] = memory[src + y*row_stride + x*pixel_stride + c].
    A pixel stride below C overlaps the pixels: pixel x then holds C bytes from x*pixel_stride,
    the kernel columns of a window laid side by side (docs/isa.md, "conv")."""
    height, width, channels = shape
    x = np.empty(shape, dtype=np.int8)
    for y in range(height):
        for col in range(width):
            start = src + y * row_stride + col * pixel_stride
            x[y, col] = np.asarray(memory[start : start + channels], dtype=np.uint8).view(np.int8)
    return x


def conv2d(
    x, w, *, zp=0, stride=(1, 1), dilation=(1, 1), pads=(0, 0, 0, 0), groups=1, bias=None, accumulator=None
) -> np.ndarray:
    """int32 accumulators of a conv: x (H, W, C) int8, w (O, kh, kw, C/groups) int8.

    acc[y, x, o] = sum over taps and the group's input channels of (x - zp) * w, where
    padding (pads = top, bottom, left, right) holds zp; then + bias, + accumulator.
    """
    height, width, channels = x.shape
    out_c, kh, kw, cin_g = w.shape
    top, bottom, left, right = pads
    padded = np.zeros((height + top + bottom, width + left + right, channels), dtype=np.int64)
    padded[top : top + height, left : left + width] = x.astype(np.int64) - zp
    out_h = (height + top + bottom - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    out_w = (width + left + right - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    cout_g = out_c // groups
    out = np.zeros((out_h, out_w, out_c), dtype=np.int64)
    for g in range(groups):
        inputs, outputs = slice(g * cin_g, (g + 1) * cin_g), slice(g * cout_g, (g + 1) * cout_g)
        for ky in range(kh):
            for kx in range(kw):
                row0, col0 = ky * dilation[0], kx * dilation[1]
                patch = padded[
                    row0 : row0 + stride[0] * (out_h - 1) + 1 : stride[0],
                    col0 : col0 + stride[1] * (out_w - 1) + 1 : stride[1],
                    inputs,
                ]
                out[:, :, outputs] += patch @ w[outputs, ky, kx, :].astype(np.int64).T
    return _finish_accumulators(out, bias, accumulator)


def vconv(x, w, **conv) -> np.ndarray:
    """The vector unit's depthwise conv (vconv): conv2d with one input and one output channel
    per group, w (C, kh, kw, 1); the same int32 result as the MAC array's conv."""
    channels = x.shape[2]
    if w.shape[0] != channels or w.shape[3] != 1:
        raise ValueError(f"vconv is depthwise only: input {x.shape}, weights {w.shape}")
    return conv2d(x, w, groups=channels, **conv)


def matmul(x, w, *, zp=0, w_zp=0, bias=None, accumulator=None) -> np.ndarray:
    """int32 (m, n) = (x - zp) @ (w - w_zp).T [+ bias] [+ accumulator]; x (m, k), w (n, k) int8."""
    out = (x.astype(np.int64) - zp) @ (w.astype(np.int64) - w_zp).T
    return _finish_accumulators(out, bias, accumulator)


def _finish_accumulators(out, bias, accumulator) -> np.ndarray:
    if bias is not None:
        out = out + np.asarray(bias, dtype=np.int64)
    if accumulator is not None:
        out = out + np.asarray(accumulator, dtype=np.int64)
    return wrap_int32(out)


def requant_float32(acc, multiplier, zp=0, lo=-128, hi=127) -> np.ndarray:
    """int8 clamp(rne(f32(f32(acc) * M)) + zp, lo, hi); M float32 per channel (last axis)."""
    product = acc.astype(np.float32) * np.asarray(multiplier, dtype=np.float32)
    return np.clip(round_half_even(product) + zp, lo, hi).astype(np.int8)


def multiply_by_quantized_multiplier(x: int, multiplier: int, shift: int) -> int:
    """TFLite/gemmlowp: RoundingDivideByPOT(SRDHM(x << left, multiplier), right)."""
    left, right = max(shift, 0), max(-shift, 0)
    x = min(max(x << left, INT32_MIN), INT32_MAX)
    if x == INT32_MIN and multiplier == INT32_MIN:
        high = INT32_MAX
    else:
        total = x * multiplier + ((1 << 30) if x * multiplier >= 0 else 1 - (1 << 30))
        high = abs(total) >> 31 if total >= 0 else -(abs(total) >> 31)  # divide, toward zero
    mask = (1 << right) - 1
    threshold = (mask >> 1) + (1 if high < 0 else 0)
    return (high >> right) + (1 if (high & mask) > threshold else 0)


def requant_fixed_point(acc, multiplier, shift, zp=0, lo=-128, hi=127) -> np.ndarray:
    """int8 clamp(MultiplyByQuantizedMultiplier(acc, m, shift) + zp, lo, hi) per channel."""
    acc = np.asarray(acc)
    channels = acc.shape[-1]
    m = np.broadcast_to(np.asarray(multiplier, dtype=np.int64), (channels,))
    s = np.broadcast_to(np.asarray(shift, dtype=np.int64), (channels,))
    out = np.empty(acc.shape, dtype=np.int64)
    for index in np.ndindex(acc.shape):
        c = index[-1]
        out[index] = multiply_by_quantized_multiplier(int(acc[index]), int(m[c]), int(s[c]))
    return np.clip(out + zp, lo, hi).astype(np.int8)


def add(a, b, *, zp_a=0, zp_b=0, scale_a=1.0, scale_b=1.0, zp=0, lo=-128, hi=127):
    """int8 clamp(rne(f32(f32(M_a * (a - zp_a)) + f32(M_b * (b - zp_b)))) + zp, lo, hi)."""
    term_a = np.float32(scale_a) * (a.astype(np.int64) - zp_a).astype(np.float32)
    term_b = np.float32(scale_b) * (b.astype(np.int64) - zp_b).astype(np.float32)
    return np.clip(round_half_even(term_a + term_b) + zp, lo, hi).astype(np.int8)


def mul(a, b, *, zp_a=0, zp_b=0, scale=1.0, zp=0, lo=-128, hi=127):
    """int8 clamp(rne(f32(M * f32((a - zp_a) * (b - zp_b)))) + zp, lo, hi); b broadcasts."""
    product = (a.astype(np.int64) - zp_a) * (b.astype(np.int64) - zp_b)
    term = np.float32(scale) * product.astype(np.float32)
    return np.clip(round_half_even(term) + zp, lo, hi).astype(np.int8)


def clip(x, lo=-128, hi=127) -> np.ndarray:
    return np.minimum(np.maximum(x, lo), hi).astype(np.int8)


def lut(x, table) -> np.ndarray:
    """table[x + 128] for int8 x and a 256-entry int8 table."""
    return np.asarray(table, dtype=np.int8)[x.astype(np.int64) + 128]


def _windows(height, width, kernel, stride, pads):
    """Each output (oy, ox) with its window's valid input rows and columns."""
    top, bottom, left, right = pads
    out_h = (height + top + bottom - kernel[0]) // stride[0] + 1
    out_w = (width + left + right - kernel[1]) // stride[1] + 1
    for oy in range(out_h):
        for ox in range(out_w):
            y0, x0 = oy * stride[0] - top, ox * stride[1] - left
            rows = slice(max(y0, 0), min(y0 + kernel[0], height))
            cols = slice(max(x0, 0), min(x0 + kernel[1], width))
            yield oy, ox, rows, cols


def maxpool(x, kernel, stride=(1, 1), pads=(0, 0, 0, 0)) -> np.ndarray:
    """Maximum over each window's valid elements; x (H, W, C) int8."""
    height, width, channels = x.shape
    results = {
        (oy, ox): x[r, c].max(axis=(0, 1)) for oy, ox, r, c in _windows(height, width, kernel, stride, pads)
    }
    return _assemble(results, channels)


def avgpool(
    x,
    kernel,
    stride=(1, 1),
    pads=(0, 0, 0, 0),
    *,
    zp=0,
    scale=1.0,
    dst_zp=0,
    lo=-128,
    hi=127,
    count_include_pad=False,
) -> np.ndarray:
    """clamp(rne(f32(f32(sum(x - zp)) * f32(scale / f32(count)))) + dst_zp, lo, hi)."""
    height, width, channels = x.shape
    results = {}
    for oy, ox, r, c in _windows(height, width, kernel, stride, pads):
        window = x[r, c].astype(np.int64) - zp
        count = kernel[0] * kernel[1] if count_include_pad else window.shape[0] * window.shape[1]
        multiplier = np.float32(scale) / np.float32(count)
        scaled = window.sum(axis=(0, 1)).astype(np.float32) * multiplier
        results[oy, ox] = np.clip(round_half_even(scaled) + dst_zp, lo, hi)
    return _assemble(results, channels)


def _assemble(results: dict, channels: int) -> np.ndarray:
    out_h, out_w = (max(k) + 1 for k in zip(*results, strict=True))
    out = np.zeros((out_h, out_w, channels), dtype=np.int8)
    for (oy, ox), values in results.items():
        out[oy, ox] = values
    return out


def dma_copy(source, source_addr, dest, dest_addr, shape, source_strides, dest_strides):
    """Copy planes x rows x row_bytes bytes; strides are (row, plane) in bytes. In place."""
    planes, rows, row_bytes = shape
    for p in range(planes):
        for r in range(rows):
            s = source_addr + p * source_strides[1] + r * source_strides[0]
            d = dest_addr + p * dest_strides[1] + r * dest_strides[0]
            dest[d : d + row_bytes] = source[s : s + row_bytes]


def softmax(x, table, multiplier: int, shift: int, zp: int) -> np.ndarray:
    """int8 softmax of each row of x (rows, depth) with a 256-entry int32 exp table, in
    Python integers, one row at a time (docs/softmax.md):

        e_j = table[x_j - max + 255];  S = sum e_j;  n = bit length of S
        r = round(2^(n+29) / S);  t_j = round(e_j * r / 2^(n-1));
        y_j = clamp(zp + round(t_j * multiplier / 2^shift), -128, 127)

    every round() here is half up (add half the divisor, floor-divide).
    """
    rows = np.asarray(x, dtype=np.int64)
    out = np.zeros(rows.shape, dtype=np.int8)
    for index, row in enumerate(rows):
        top = max(int(v) for v in row)
        exps = [int(table[int(v) - top + 255]) for v in row]
        total = sum(exps)
        n = total.bit_length()
        reciprocal = (2 ** (n + 29) + total // 2) // total
        for j, e in enumerate(exps):
            t = (e * reciprocal + 2 ** (n - 1) // 2) // 2 ** (n - 1)
            y = zp + (t * multiplier + 2 ** (shift - 1)) // 2**shift
            out[index, j] = min(max(y, -128), 127)
    return out
