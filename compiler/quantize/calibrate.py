"""Calibration: run the float module on the calibration samples and choose every planned
activation tensor's int8 parameters.

    float module + QuantPlan + samples   ->   {tensor name: QParams}

The float module runs on TVM's VM (observe.py) with every tensor to calibrate exposed as an
extra output; each value feeds that tensor's TensorStats (histogram.py); the method gives
its range (ranges.py), narrowed to what the composite's fused activation allows (a relu
output's range starts at 0, a relu6's ends at 6 at most), and params.py turns the range into
scale and zero point. Outputs of max pooling and reshape then take their input's
parameters (plan.py).

Bias correction needs one more figure: the mean of each conv/dense input per channel over the
calibration samples (channel_means), from the same run.
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from vpuc.compiler.quantize.bindings import BindingView
from vpuc.compiler.quantize.data import CalibrationData
from vpuc.compiler.quantize.histogram import TensorStats
from vpuc.compiler.quantize.layouts import input_channel_axis
from vpuc.compiler.quantize.observe import Observer
from vpuc.compiler.quantize.params import QParams, activation_params
from vpuc.compiler.quantize.plan import MAC_KINDS, QuantPlan
from vpuc.compiler.quantize.ranges import tensor_range


def collect_stats(
    observer: Observer, names: list[str], data: CalibrationData, channel_axes: dict[str, int] | None = None
) -> tuple[dict[str, TensorStats], dict[str, np.ndarray]]:
    """Statistics of the named tensors over every sample of `data`, and the per-channel
    means of the tensors in `channel_axes` ({name: channel axis})."""
    stats = {name: TensorStats() for name in names}
    sums = {name: 0.0 for name in channel_axes or {}}
    for _, values in observer.over(data):
        for name in names:
            stats[name].update(values[name])
        for name, axis in (channel_axes or {}).items():
            value = values[name].astype(np.float64)
            sums[name] = sums[name] + value.sum(
                axis=tuple(i for i in range(value.ndim) if i != axis % value.ndim)
            )
    counts = {
        name: data.count * values_per_channel(observer, name, axis)
        for name, axis in (channel_axes or {}).items()
    }
    return stats, {name: (sums[name] / counts[name]).astype(np.float32) for name in sums}


def values_per_channel(observer: Observer, name: str, axis: int) -> int:
    shape = observer.shapes[name]
    return int(np.prod(shape)) // shape[axis % len(shape)]


def channel_mean_axes(func: relax.Function, plan: QuantPlan) -> dict[str, int]:
    """{data input of every conv/dense composite with a bias: its channel axis}."""
    view = BindingView.of(func)
    return {
        c.inputs[0]: input_channel_axis(view.values[c.core], c.kind)
        for c in plan.composites
        if c.kind in MAC_KINDS and c.bias is not None and c.inputs
    }


def choose_params(
    plan: QuantPlan, stats: dict[str, TensorStats], method: str, percentile: float
) -> dict[str, QParams]:
    """Parameters of every tensor the plan quantises, from the statistics."""
    root_of = plan.root_of
    params: dict[str, QParams] = {}
    for name in plan.tensors_to_calibrate():
        lo, hi = tensor_range(stats[name], method, percentile)
        if name in root_of:
            low_bound, high_bound = root_of[name].output_bounds
            lo, hi = max(lo, low_bound), min(hi, high_bound)
        params[name] = activation_params(lo, hi)
    for composite in plan.composites:  # binding order: a pooled pool reads a pooled tensor
        if composite.keeps_input_params:
            params[composite.root] = params[composite.inputs[0]]
    return params
