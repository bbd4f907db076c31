"""Where the channels are in a conv2d/dense call: its output, its weight, its data input.

Shared by calibration (per-channel input means for bias correction) and realisation (per-
channel weight scales, the bias's channel axis); layouts come from the op's attributes,
so NCHW/OIHW and, after the layout pass, NHWC/OHWI both work.
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from vpuc.compiler import compat


def output_channel_axis(call: relax.Call, kind: str) -> int:
    if kind == "conv2d":
        return str(call.attrs.out_layout or call.attrs.data_layout).index("C")
    return len(compat.tensor_type(call)[0]) - 1


def weight_channel_axis(call: relax.Call, kind: str) -> int:
    if kind == "conv2d":
        return str(call.attrs.kernel_layout).index("O")
    return len(compat.tensor_type(call.args[1])[0]) - 1


def input_channel_axis(call: relax.Call, kind: str) -> int:
    if kind == "conv2d":
        return str(call.attrs.data_layout).index("C")
    return len(compat.tensor_type(call.args[0])[0]) - 1


def expected_output_error(
    weight_error: np.ndarray, input_mean: np.ndarray, call: relax.Call, kind: str
) -> np.ndarray:
    """E[(W_q - W) x] per output channel, with E[x] per input channel (padding ignored)."""
    if kind != "conv2d":
        return input_mean.astype(np.float64) @ weight_error.astype(np.float64)  # (K,) @ (K, N)
    layout = str(call.attrs.kernel_layout)
    error = np.transpose(weight_error, [layout.index(axis) for axis in "OHWI"]).astype(np.float64)
    out_channels, per_group = error.shape[0], error.shape[3]
    groups = max(int(call.attrs.groups), 1)
    means = input_mean.astype(np.float64).reshape(groups, per_group)
    return np.einsum("ohwi,oi->o", error, means[np.arange(out_channels) // (out_channels // groups)])
