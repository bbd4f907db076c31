"""A 3x3 conv kernel (TE, padding 1, NCHW) and numpy's computation of it by definition, for the
host schedule tests (test_default_conv_schedule.py, test_parallel_padding.py)."""

from __future__ import annotations

import numpy as np
from tvm import te, topi


def conv_kernel(channels: int, filters: int, size: int, stride: int):
    x = te.placeholder((1, channels, size, size), name="x")
    w = te.placeholder((filters, channels, 3, 3), name="w")
    y = topi.nn.conv2d_nchw(x, w, stride, 1, 1)
    return te.create_prim_func([x, w, y]), tuple(int(d) for d in y.shape)


def numpy_conv(x: np.ndarray, w: np.ndarray, stride: int) -> np.ndarray:
    """3x3 convolution, padding 1, NCHW, by its definition."""
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    size = (x.shape[2] + 2 - 3) // stride + 1
    out = np.zeros((1, w.shape[0], size, size), np.float64)
    for ry in range(3):
        for rx in range(3):
            window = padded[0, :, ry : ry + stride * size : stride, rx : rx + stride * size : stride]
            out[0] += np.einsum("chw,fc->fhw", window, w[:, :, ry, rx])
    return out
