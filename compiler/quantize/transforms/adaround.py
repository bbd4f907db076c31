"""Adaptive rounding of conv/dense weights (AdaRound, Nagel et al., 2020), layer by layer,
in numpy, within a compile-time budget.

    float weights W (per output channel scale s) + the layer's inputs on the calibration
    samples  ->  int8 weights floor(W / s) + r, r in {0, 1} learned per weight

Round-to-nearest minimises each weight's own error; what matters is the layer's output.
For output channel o with input rows x (im2col patches for a conv), the output error of
rounding offsets h is

    E[((W~_o - W_o) x)^2] = (W~_o - W_o) H (W~_o - W_o)^T,   H = E[x x^T]  (per group)

so H (K x K, accumulated over the calibration samples, at most ROWS_PER_SAMPLE rows per
sample) is all the optimisation needs. AdaRound relaxes r to h(V) = clip(sigmoid(V)
(zeta - gamma) + gamma, 0, 1) and minimises

    sum_o (W~_o - W_o) H (W~_o - W_o)^T / rec_0  +  LAMBDA * mean(1 - |2 h - 1|^beta)

with Adam: no regulariser for the first WARMUP of the iterations, then beta annealed from
20 to 2 so that every h ends at 0 or 1. rec_0 is the error of round-to-nearest. A layer
keeps the learned rounding only when its output error is below round-to-nearest's.

Budget: `budget_s` seconds for all layers, shared in proportion to each layer's cost per
iteration (O K^2), counted as work at NOMINAL_FLOPS_PER_SECOND rather than measured, so
that a compile gives the same weights on a busy machine as on an idle one; each layer runs
as many iterations as its share buys (at most MAX_ITERATIONS); a layer whose share buys
fewer than MIN_ITERATIONS keeps round-to-nearest (reported as skipped). The measured
seconds are reported beside the budget. A progress bar on stderr shows the layers.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np
import tvm

from vpuc.compiler.quantize.bindings import BindingView
from vpuc.compiler.quantize.params import WEIGHT_MAX, QParams, quantize_weight
from vpuc.compiler.quantize.plan import MAC_KINDS, QuantPlan

ROWS_PER_SAMPLE = 256
ZETA, GAMMA = 1.1, -0.1
LAMBDA = 10.0  # tuned on a correlated-input dense layer: 0.62x round-to-nearest's error
WARMUP = 0.2
BETA = (20.0, 2.0)
LEARNING_RATE = 0.2
MAX_ITERATIONS = 500
MIN_ITERATIONS = 50
NOMINAL_FLOPS_PER_SECOND = 1e9  # the budget counts work, not wall time: same result on any load


@dataclass
class LayerInput:
    """H = sum x x^T over the sampled input rows of one conv/dense core, per group."""

    core: str
    tensor: str
    kind: str
    call: object
    hessian: np.ndarray | None = None  # (groups, K, K)
    rows: int = 0


class LayerInputs:
    """A calibration hook (calibrate.collect_stats): accumulates every MAC core's H."""

    def __init__(self, mod: tvm.IRModule, plan: QuantPlan, seed: int = 0) -> None:
        view = BindingView.of(mod["main"])
        self.layers = {
            c.core: LayerInput(c.core, c.inputs[0], c.kind, view.values[c.core])
            for c in plan.composites
            if c.kind in MAC_KINDS and c.inputs
        }
        self.rng = np.random.default_rng(seed)

    def observe(self, get) -> None:
        for layer in self.layers.values():
            rows = _rows(get(layer.tensor), layer.call, layer.kind)  # (groups, P, K)
            if rows.shape[1] > ROWS_PER_SAMPLE:
                rows = rows[:, self.rng.choice(rows.shape[1], ROWS_PER_SAMPLE, replace=False)]
            rows = rows.astype(np.float64)
            product = np.matmul(rows.transpose(0, 2, 1), rows)  # (g, K, K), BLAS
            layer.hessian = product if layer.hessian is None else layer.hessian + product
            layer.rows += rows.shape[1]


def _rows(value: np.ndarray, call, kind: str) -> np.ndarray:
    """The layer's input as rows of what one output element reads: (groups, rows, K)."""
    if kind == "dense":
        return value.reshape(1, -1, value.shape[-1])
    layout = str(call.attrs.data_layout)
    nhwc = np.transpose(value, [layout.index(a) for a in "NHWC"])
    kernel = str(call.attrs.kernel_layout)
    weight_shape = [int(d) for d in call.args[1].ty.shape.values]
    kh, kw = weight_shape[kernel.index("H")], weight_shape[kernel.index("W")]
    top, left, bottom, right = (int(p) for p in call.attrs.padding)
    stride_h, stride_w = (int(s) for s in call.attrs.strides)
    dil_h, dil_w = (int(d) for d in call.attrs.dilation)
    padded = np.pad(nhwc, ((0, 0), (top, bottom), (left, right), (0, 0)))
    out_h = (padded.shape[1] - dil_h * (kh - 1) - 1) // stride_h + 1
    out_w = (padded.shape[2] - dil_w * (kw - 1) - 1) // stride_w + 1
    patches = [
        padded[
            :,
            i * dil_h : i * dil_h + stride_h * out_h : stride_h,
            j * dil_w : j * dil_w + stride_w * out_w : stride_w,
        ]
        for i in range(kh)
        for j in range(kw)
    ]
    stacked = np.stack(patches, axis=3)  # (N, out_h, out_w, kh*kw, C)
    groups = max(int(call.attrs.groups), 1)
    channels = stacked.shape[-1]
    grouped = stacked.reshape(-1, kh * kw, groups, channels // groups)
    return np.transpose(grouped, (2, 0, 1, 3)).reshape(groups, -1, kh * kw * (channels // groups))


@dataclass
class Rounding:
    weights: dict[str, tuple[np.ndarray, QParams]] = field(default_factory=dict)
    layers: list[dict] = field(default_factory=list)

    def summary(self) -> dict:
        return {
            "layers": len(self.layers),
            "learned": sum(row["kept"] for row in self.layers),
            "iterations": sum(row["iterations"] for row in self.layers),
            "per_layer": self.layers,
        }


def adaround(
    mod: tvm.IRModule, plan: QuantPlan, inputs: LayerInputs, params, budget_s: float, progress: bool = True
) -> Rounding:
    """Learned int8 weights for every MAC core with observed inputs (see the docstring)."""
    del params  # the weights' own scales do not depend on the activation parameters
    view = BindingView.of(mod["main"])
    layers = [layer for layer in inputs.layers.values() if layer.rows > 0]
    costs = [_cost(view, layer) for layer in layers]
    total_cost = float(sum(costs)) or 1.0
    result = Rounding()
    # imported here: a compile without --adaround does not load rich's progress bars
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(
        TextColumn("adaround"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
        TimeElapsedColumn(), console=console, transient=True,
        disable=not (progress and console.is_terminal and sys.stderr.isatty()),
    ) as bar:  # fmt: skip
        task = bar.add_task("", total=len(layers))
        for layer, cost in zip(layers, costs, strict=True):
            bar.update(task, description=layer.core)
            rounded = _round_layer(view, layer, budget_s * cost / total_cost)
            if rounded is not None:
                quantized, qparams, row = rounded
                result.weights[layer.core] = (quantized, qparams)
            else:
                row = {"layer": layer.core, "iterations": 0, "kept": False, "error_ratio": None}
                row["skipped"] = f"its share of the budget allows fewer than {MIN_ITERATIONS} iterations"
            result.layers.append(row)
            bar.advance(task)
    return result


def _cost(view: BindingView, layer: LayerInput) -> float:
    weight = view.constant(layer.call.args[1])
    k = layer.hessian.shape[-1]
    return float(weight.size) * k


def _round_layer(view: BindingView, layer: LayerInput, seconds: float):
    weight = view.constant(layer.call.args[1])
    axis = _out_axis(layer.call, layer.kind)
    nearest, qparams = quantize_weight(weight, axis)
    grouped, restore = _grouped(weight, layer.call, layer.kind)  # (G, Og, K)
    scale = _grouped_scale(qparams.scale, grouped.shape)
    hessian = layer.hessian / max(layer.rows, 1)
    learned, iterations = _optimise(grouped.astype(np.float64), scale, hessian, seconds)
    if learned is None:
        return None
    nearest_error = _error(
        np.clip(np.round(grouped / scale), -WEIGHT_MAX, WEIGHT_MAX) * scale - grouped, hessian
    )
    learned_error = _error(learned * scale - grouped, hessian)
    kept = learned_error < nearest_error
    quantized = restore(learned).astype(np.int8) if kept else nearest
    row = {
        "layer": layer.core,
        "iterations": iterations,
        "kept": bool(kept),
        "error_ratio": round(float(learned_error / nearest_error), 4) if nearest_error > 0 else 1.0,
    }
    return quantized, qparams, row


def _optimise(weight: np.ndarray, scale: np.ndarray, hessian: np.ndarray, seconds: float):
    """Integer weights (G, Og, K) learned as in the module docstring, and the iterations run."""
    ratio = weight / scale
    floor = np.floor(ratio)
    rest = np.clip(ratio - floor, 1e-3, 1 - 1e-3)
    v = -np.log((ZETA - GAMMA) / (rest - GAMMA) - 1.0)
    nearest = np.clip(np.round(ratio), -WEIGHT_MAX, WEIGHT_MAX) * scale - weight
    rec0 = max(_error(nearest, hessian), 1e-30)
    m, s2 = np.zeros_like(v), np.zeros_like(v)
    flops = 2.0 * weight.size * hessian.shape[-1]  # one (G, Og, K) x (G, K, K) product per iteration
    planned = int(min(seconds * NOMINAL_FLOPS_PER_SECOND / flops, MAX_ITERATIONS))
    if planned < MIN_ITERATIONS:
        return None, 0
    iterations = 0
    while iterations < planned:
        t = iterations / planned
        sig = 1.0 / (1.0 + np.exp(-v))
        stretched = sig * (ZETA - GAMMA) + GAMMA
        h = np.clip(stretched, 0.0, 1.0)
        integer = floor + h
        inside = np.abs(integer) <= WEIGHT_MAX
        delta = np.clip(integer, -WEIGHT_MAX, WEIGHT_MAX) * scale - weight
        grad = 2.0 * np.matmul(delta, hessian) / rec0 * scale * inside
        if t >= WARMUP:
            beta = BETA[0] + (BETA[1] - BETA[0]) * (t - WARMUP) / (1.0 - WARMUP)
            centred = 2.0 * h - 1.0
            grad = grad - LAMBDA / h.size * beta * np.abs(centred) ** (beta - 1.0) * np.sign(centred) * 2.0
        grad = grad * (ZETA - GAMMA) * sig * (1.0 - sig) * ((stretched > 0) & (stretched < 1))
        iterations += 1
        m = 0.9 * m + 0.1 * grad
        s2 = 0.999 * s2 + 0.001 * grad * grad
        v -= LEARNING_RATE * (m / (1 - 0.9**iterations)) / (np.sqrt(s2 / (1 - 0.999**iterations)) + 1e-8)
    h = np.clip(1.0 / (1.0 + np.exp(-v)) * (ZETA - GAMMA) + GAMMA, 0.0, 1.0)
    return np.clip(floor + (h >= 0.5), -WEIGHT_MAX, WEIGHT_MAX), iterations


def _error(delta: np.ndarray, hessian: np.ndarray) -> float:
    return float(np.sum(np.matmul(delta, hessian) * delta))


def _out_axis(call, kind: str) -> int:
    return 1 if kind == "dense" else str(call.attrs.kernel_layout).index("O")


def _grouped(weight: np.ndarray, call, kind: str):
    """(weights as (groups, out channels per group, K) in the row order of _rows, restore)."""
    if kind == "dense":
        return weight.T[None], lambda grouped: grouped[0].T
    layout = str(call.attrs.kernel_layout)
    order = [layout.index(a) for a in "OHWI"]
    ohwi = np.transpose(weight, order)
    groups = max(int(call.attrs.groups), 1)
    out_channels = ohwi.shape[0]
    grouped = ohwi.reshape(groups, out_channels // groups, -1)

    def restore(values: np.ndarray) -> np.ndarray:
        return np.transpose(values.reshape(ohwi.shape), np.argsort(order))

    return grouped, restore


def _grouped_scale(scale: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    return scale.astype(np.float64).reshape(shape[0], shape[1], 1)
