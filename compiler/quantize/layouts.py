"""Where the channels are in a conv2d/dense call: its output, its weight, its data input.

Shared by calibration (per-channel input means for bias correction) and realisation (per-
channel weight scales, the bias's channel axis); layouts come from the op's attributes,
so NCHW/OIHW and, after the layout pass, NHWC/OHWI both work.
"""

from __future__ import annotations

from collections.abc import Callable

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


def bias_channels(bias: np.ndarray, call: relax.Call, kind: str) -> tuple[np.ndarray, Callable]:
    """(the bias of a conv2d/dense `call` as one value per output channel, a function that
    turns such a vector back into a constant of the bias's own rank)."""
    out_shape = compat.tensor_type(call)[0]
    axis = output_channel_axis(call, kind)
    channels = out_shape[axis]
    rank = max(bias.ndim, 1)
    bias_axis = axis - (len(out_shape) - rank)
    aligned = bias.reshape((1,) * (rank - bias.ndim) + bias.shape)
    full = np.broadcast_to(aligned, _with(rank, bias_axis, channels))
    vector = np.moveaxis(np.asarray(full, np.float64), bias_axis, 0).reshape(channels, -1)[:, 0]

    def restore(values: np.ndarray) -> np.ndarray:
        return np.asarray(values, np.float32).reshape(_with(rank, bias_axis, channels, fill=1))

    return vector, restore


def _with(rank: int, axis: int, size: int, fill: int = 1) -> tuple[int, ...]:
    return tuple(size if i == axis else fill for i in range(rank))


def weight_output_axis(call: relax.Call, kind: str) -> int:
    """The output-channel axis of a conv2d/dense weight (dense: (K, N) -> 1)."""
    return weight_channel_axis(call, kind)


def weight_input_axis(call: relax.Call, kind: str) -> int:
    """The input-channel axis of a conv2d/dense weight (dense: (K, N) -> 0)."""
    if kind == "conv2d":
        return str(call.attrs.kernel_layout).index("I")
    return len(compat.tensor_type(call.args[1])[0]) - 2
