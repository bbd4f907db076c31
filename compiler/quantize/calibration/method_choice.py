"""`--calib-method auto`: per tensor, the calibration method whose range gives the least
error in the output of the layers that read it.

    TensorStats of every calibrated tensor + a second pass over the calibration samples
    ->  {tensor: (lo, hi)} from the best of minmax / percentile / entropy / mse

The error of a candidate range for tensor x, read by layers L:

    err = sum over samples and channels c of  w_c * (x_c - dq(q(x_c)))^2
    w_c = sum over the conv/dense layers in L of |W[:, c]|^2  (+ 1 for every other reader)

Only tensors whose readers are all VPU layers are chosen for; a tensor a CPU op or the
model's output reads keeps the percentile range (the error model says nothing about how a
GELU or a softmax weighs its input's error).

that is, E|W^T e|^2 with the errors e of different channels taken as independent: the
squared error the quantised tensor adds to each reading conv/dense output (a channel that a
layer multiplies by large weights counts for more), and the tensor's own squared error for
readers that do not mix channels (add, pooling, reshape, CPU ops). The second pass reads at
most CHOICE_SAMPLES calibration samples on the already built reference module.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import tvm

from vpuc.compiler.quantize.bindings import BindingView
from vpuc.compiler.quantize.calibration.calibrate import bounded
from vpuc.compiler.quantize.calibration.data import CalibrationData
from vpuc.compiler.quantize.calibration.ranges import RANGE_METHODS, tensor_range
from vpuc.compiler.quantize.layouts import input_channel_axis
from vpuc.compiler.quantize.params import activation_params
from vpuc.compiler.quantize.plan import MAC_KINDS, QuantPlan

CHOICE_SAMPLES = 8


class Chooser:
    def __init__(self, mod: tvm.IRModule, plan: QuantPlan, percentile: float) -> None:
        self.plan, self.percentile = plan, percentile
        self.view = BindingView.of(mod["main"])
        self.chosen: dict[str, str] = {}

    def choose(self, stats, reference, calib: CalibrationData, read) -> dict[str, tuple[float, float]]:
        names = [
            n
            for n in self.plan.tensors_to_calibrate()
            if stats[n].histogram is not None and self._modelled_readers(n)
        ]
        candidates = {
            name: [
                bounded(self.plan, name, *tensor_range(stats[name], m, self.percentile))
                for m in RANGE_METHODS
            ]
            for name in names
        }
        weights = {name: self._channel_weights(name) for name in names}
        errors = {name: np.zeros(len(RANGE_METHODS)) for name in names}
        subset = calib.subset(range(0, min(calib.count, CHOICE_SAMPLES)), calib.source)
        for _, values in reference.over(subset):
            for name in names:
                axis, channel_weight = weights[name]
                value = np.moveaxis(read(values, name), axis, -1).reshape(-1, channel_weight.size)
                for index, (lo, hi) in enumerate(candidates[name]):
                    errors[name][index] += float(np.dot(_channel_errors(value, lo, hi), channel_weight))
        ranges = {}
        for name in names:
            best = int(np.argmin(errors[name]))
            self.chosen[name] = RANGE_METHODS[best]
            ranges[name] = candidates[name][best]
        return ranges

    def _modelled_readers(self, name: str) -> bool:
        """Whether every reader of `name` is a VPU layer: the error model above holds for those
        (a conv/dense mixes channels by its weights, an add or pooling passes the error on);
        a CPU op (GELU, softmax, LayerNorm) or a model output may weigh it any way, and such
        a tensor keeps the percentile range."""
        members = self.plan.member_of
        readers = self.view.readers.get(name, [])
        return bool(readers) and all(r in members for r in readers)

    def _channel_weights(self, name: str) -> tuple[int, np.ndarray]:
        """(channel axis, w_c) for the tensor `name` (see the module docstring)."""
        shape = self.view.tensor_type(name)[0] if name in self.view.vars else None
        readers = [c for c in self.plan.composites if name in c.inputs]
        macs = [c for c in readers if c.kind in MAC_KINDS and c.inputs[0] == name]
        axis = input_channel_axis(self.view.values[macs[0].core], macs[0].kind) if macs else -1
        channels = shape[axis] if shape else 1
        weight = np.full(channels, float(len(self.view.readers.get(name, [])) - len(macs)), np.float64)
        for composite in macs:
            weight += _input_channel_energy(self.view, composite)
        return axis, np.maximum(weight, 1e-12)

    def summary(self) -> dict:
        return {"chosen": dict(Counter(self.chosen.values())), "per_tensor": dict(self.chosen)}


def _channel_errors(value: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Per column of `value` (rows x channels), the squared error of int8 quantisation over
    [lo, hi] with the parameters activation_params gives it."""
    params = activation_params(lo, hi)
    scale, zero = float(params.scale), float(params.zero_point)
    value = value.astype(np.float32)
    quantized = np.clip(np.round(value / np.float32(scale)) + zero, -128, 127)
    error = value.astype(np.float64) - (quantized - zero) * scale
    return np.sum(error * error, axis=0)


def _input_channel_energy(view: BindingView, composite) -> np.ndarray:
    """sum of W^2 over everything but the input channel, for a conv/dense core."""
    call = view.values[composite.core]
    weight = view.constant(call.args[1]).astype(np.float64) ** 2
    if composite.kind == "dense":  # (K, N)
        return weight.sum(axis=1)
    layout = str(call.attrs.kernel_layout)
    weight = np.transpose(weight, [layout.index(a) for a in "OHWI"])
    groups = max(int(call.attrs.groups), 1)
    if groups == 1:
        return weight.sum(axis=(0, 1, 2))
    out_channels, per_group = weight.shape[0], weight.shape[3]
    energy = weight.sum(axis=(1, 2))  # (O, I/g)
    grouped = energy.reshape(groups, out_channels // groups, per_group).sum(axis=1)
    return grouped.reshape(-1)
