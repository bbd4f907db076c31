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

from collections.abc import Callable

import numpy as np
from tvm import relax

from vpuc.compiler.quantize.bindings import BindingView
from vpuc.compiler.quantize.calibration.data import CalibrationData
from vpuc.compiler.quantize.calibration.histogram import TensorStats
from vpuc.compiler.quantize.calibration.observe import Observer
from vpuc.compiler.quantize.calibration.ranges import tensor_range
from vpuc.compiler.quantize.layouts import input_channel_axis
from vpuc.compiler.quantize.params import QParams, activation_params
from vpuc.compiler.quantize.plan import MAC_KINDS, QuantPlan


def collect_stats(
    observer: Observer,
    names: list[str],
    data: CalibrationData,
    channel_axes: dict[str, int] | None = None,
    read: Callable[[dict[str, np.ndarray], str], np.ndarray] | None = None,
    hooks: tuple[Callable[[Callable[[str], np.ndarray]], None], ...] = (),
) -> tuple[dict[str, TensorStats], dict[str, np.ndarray]]:
    """Statistics of the named tensors over every sample of `data`, and the per-channel
    means of the tensors in `channel_axes` ({name: channel axis}). `read(values, name)`
    reads a tensor (derived.py); each hook gets `get(name)` for every sample (what
    adaptive rounding and the per-layer method choice keep)."""
    read = read or (lambda values, name: values[name])
    stats = {name: TensorStats() for name in names}
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    for _, values in observer.over(data):
        cache: dict[str, np.ndarray] = {}

        def get(name: str, values=values, cache=cache) -> np.ndarray:
            if name not in cache:
                cache[name] = read(values, name)
            return cache[name]

        for name in names:
            stats[name].update(get(name))
        for name, axis in (channel_axes or {}).items():
            value = get(name).astype(np.float64)
            axis = axis % value.ndim
            others = tuple(i for i in range(value.ndim) if i != axis)
            sums[name] = sums.get(name, 0.0) + value.sum(axis=others)
            counts[name] = counts.get(name, 0) + value.size // value.shape[axis]
        for hook in hooks:
            hook(get)
    return stats, {name: (sums[name] / counts[name]).astype(np.float32) for name in sums}


def bounded(plan: QuantPlan, name: str, lo: float, hi: float) -> tuple[float, float]:
    """[lo, hi] narrowed to what the fused activation of the composite producing `name` allows."""
    composite = plan.root_of.get(name)
    if composite is None:
        return lo, hi
    low_bound, high_bound = composite.output_bounds
    return max(lo, low_bound), min(hi, high_bound)


def channel_mean_axes(func: relax.Function, plan: QuantPlan) -> dict[str, int]:
    """{data input of every conv/dense composite with a bias: its channel axis}."""
    view = BindingView.of(func)
    return {
        c.inputs[0]: input_channel_axis(view.values[c.core], c.kind)
        for c in plan.composites
        if c.kind in MAC_KINDS and c.bias is not None and c.inputs
    }


def choose_params(
    plan: QuantPlan,
    stats: dict[str, TensorStats],
    method: str,
    percentile: float,
    ranges: dict[str, tuple[float, float]] | None = None,
) -> dict[str, QParams]:
    """Parameters of every tensor the plan quantises, from the statistics; `ranges` gives
    chosen ranges for some tensors (the per-layer method choice, method_choice.py)."""
    params: dict[str, QParams] = {}
    for name in plan.tensors_to_calibrate():
        if ranges and name in ranges:
            lo, hi = ranges[name]
        else:
            lo, hi = tensor_range(stats[name], method, percentile)
        lo, hi = bounded(plan, name, lo, hi)
        params[name] = activation_params(lo, hi)
    for composite in plan.composites:  # binding order: a pooled pool reads a pooled tensor
        if composite.keeps_input_params:
            params[composite.root] = params[composite.inputs[0]]
    return params
