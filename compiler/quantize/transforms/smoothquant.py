"""SmoothQuant: migrate activation outliers of dense inputs into the dense weights.

    x -> dense(x, W) + b          =>   x_smooth = x * (1 / s);  dense(x_smooth, W * s[:, None]) + b
    x -> reshape -> dense(., W)   =>   x * (1 / s).reshape(trailing dims of x) -> reshape -> dense(., W * s)

    (x / s) (s W) = x W  for every input channel j, so the float module is unchanged.

Xiao et al. (2023): with activations per tensor and weights per output channel, a few input
channels of a dense with values tens of times larger than the rest (the outlier dimensions
of transformer residual streams) set the activation scale, and every other channel is
quantised with a handful of levels. Dividing channel j by

    s_j = max|x_j|^alpha / max|W_j,:|^(1 - alpha)

and multiplying row j of W by it balances the two ranges. One s per tensor: every planned
dense reading x takes it (the max over their rows), so Q, K and V share one multiply.
alpha is --smoothquant-alpha, or by default chosen per tensor (`choose_alphas`): among
SEARCH_ALPHAS and no migration at all, the one with the least output error of the dense
layers reading x, |x W - q(x / s) q(s W)|^2 summed over input rows sampled in the pre-pass
(ROWS_PER_SAMPLE per sample), x quantised per tensor over its range and W per output
channel as the VPU quantises them. A tensor no alpha helps is left alone.

Where it applies: a planned dense (vpu.dense*) whose input is computed on the CPU (or is a
model input), directly or through one VPU reshape whose input is; the multiply is inserted
on the CPU right after x (`<x>_smooth`), where the quantize of the VPU's input runs anyway,
and the partitioner keeps it there (`blocked`). Dense inputs produced by another VPU layer
are left alone (a multiply there would split the VPU subgraph).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from vpuc.compiler import compat
from vpuc.compiler.quantize.bindings import BindingView, rebind
from vpuc.compiler.quantize.measurement.derived import Derived
from vpuc.compiler.quantize.plan import CompositePlan, QuantPlan

SCALE_LIMITS = (1e-4, 1e4)
SEARCH_ALPHAS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
ROWS_PER_SAMPLE = 256
SMOOTH_REASON = "SmoothQuant's per-channel scaling of a VPU input runs on the CPU"


@dataclass(frozen=True)
class Candidate:
    """One tensor to smooth: `tensor` (the one multiplied) and the dense cores that read it,
    directly or through the reshape composite `reshape` (its root)."""

    tensor: str
    cores: tuple[str, ...]
    channels: int  # the dense input's channel count
    reshape: str | None = None


@dataclass
class Smoothed:
    mod: tvm.IRModule
    plan: QuantPlan
    derived: dict[str, Derived] = field(default_factory=dict)
    blocked: dict[str, str] = field(default_factory=dict)  # inserted multiplies -> reason
    scales: dict[str, np.ndarray] = field(default_factory=dict)  # tensor -> s


def candidates(func: relax.Function, plan: QuantPlan) -> list[Candidate]:
    """The dense inputs SmoothQuant can migrate (see the module docstring)."""
    view, roots = BindingView.of(func), plan.root_of
    found: dict[tuple[str, str | None], list[str]] = {}
    channels: dict[tuple[str, str | None], int] = {}
    for composite in plan.composites:
        if composite.kind != "dense" or not composite.inputs:
            continue
        source, reshape = composite.inputs[0], None
        producer = roots.get(source)
        if producer is not None:
            if producer.kind != "reshape" or producer.inputs[0] in roots:
                continue
            source, reshape = producer.inputs[0], producer.root
        key = (source, reshape)
        found.setdefault(key, []).append(composite.core)
        channels[key] = compat.tensor_type(view.values[composite.core].args[0])[0][-1]
    return [
        Candidate(t, tuple(cores), channels[t, r], r)
        for (t, r), cores in found.items()
        if _trailing_dims(view.tensor_type(t)[0], channels[t, r]) is not None
    ]


def _trailing_dims(shape: tuple[int, ...], channels: int) -> tuple[int, ...] | None:
    """The trailing dims of `shape` whose product is `channels` (the dense's input axis)."""
    product = 1
    for k in range(len(shape) - 1, -1, -1):
        product *= shape[k]
        if product == channels:
            return tuple(shape[k:])
        if product > channels:
            return None
    return None


def channel_absmax(value: np.ndarray, channels: int) -> np.ndarray:
    """max |x_j| over everything but the trailing dims that make the `channels` axis."""
    flat = np.abs(value.reshape(-1, channels))
    return flat.max(axis=0)


def choose_alphas(
    mod: tvm.IRModule, found: list[Candidate], absmax: dict[str, np.ndarray], rows: dict[str, np.ndarray]
) -> dict[str, float | None]:
    """Per tensor, the alpha in SEARCH_ALPHAS whose migration gives the dense layers reading it
    the least output error on the sampled input rows, or None when no migration beats
    leaving the tensor alone (see the module docstring)."""
    view = BindingView.of(mod["main"])
    chosen: dict[str, float | None] = {}
    for candidate in found:
        x = rows[candidate.tensor].astype(np.float64)
        weights = [view.constant(view.values[core].args[1]).astype(np.float64) for core in candidate.cores]
        errors = {None: _layer_error(x, weights, np.ones(candidate.channels))}
        for alpha in SEARCH_ALPHAS:
            errors[alpha] = _layer_error(x, weights, _scale(candidate, view, absmax[candidate.tensor], alpha))
        chosen[candidate.tensor] = min(errors, key=errors.get)
    return chosen


def _layer_error(x: np.ndarray, weights: list[np.ndarray], scale: np.ndarray) -> float:
    """sum |x W - q(x / s) q(s W)|^2 over the dense layers: x per tensor over its range,
    W per output channel, as the VPU quantises them."""
    smoothed = x / scale
    lo, hi = min(smoothed.min(), 0.0), max(smoothed.max(), 0.0)
    step = (hi - lo) / 255.0 or 1.0
    zero = np.round(-128.0 - lo / step)
    x_q = (np.clip(np.round(smoothed / step) + zero, -128, 127) - zero) * step
    total = 0.0
    for weight in weights:
        scaled = weight * scale[:, None]
        w_step = np.abs(scaled).max(axis=0) / 127.0
        w_step = np.where(w_step > 0, w_step, 1.0)
        w_q = np.clip(np.round(scaled / w_step), -127, 127) * w_step
        total += float(np.sum((x @ weight - x_q @ w_q) ** 2))
    return total


def smooth(
    mod: tvm.IRModule,
    plan: QuantPlan,
    found: list[Candidate],
    absmax: dict[str, np.ndarray],
    alpha: float | dict[str, float],
) -> Smoothed:
    """Insert the multiplies and scale the weights; `absmax[c.tensor]` from the calibration
    samples; `alpha` one for all tensors or one per tensor."""
    view = BindingView.of(mod["main"])
    alphas = alpha if isinstance(alpha, dict) else {c.tensor: alpha for c in found}
    scales = {c.tensor: _scale(c, view, absmax[c.tensor], alphas[c.tensor]) for c in found}
    mutated = _Smoother(mod, {c.tensor: c for c in found}, scales, view).visit_expr(mod["main"])
    new_mod = mod.clone()
    new_mod.update_func(new_mod.get_global_var("main"), mutated)
    result = Smoothed(new_mod, _replanned(plan, found), scales=scales)
    for c in found:
        shape = view.tensor_type(c.tensor)[0]
        inverse = (1.0 / scales[c.tensor]).astype(np.float32).reshape(_trailing_dims(shape, c.channels))
        result.derived[f"{c.tensor}_smooth"] = Derived(c.tensor, scale=inverse)
        if c.reshape is not None:
            result.derived[c.reshape] = Derived(c.reshape, scale=inverse.reshape(-1))
        result.blocked[f"{c.tensor}_smooth"] = SMOOTH_REASON
    return result


def _scale(candidate: Candidate, view: BindingView, absmax: np.ndarray, alpha: float) -> np.ndarray:
    weight_max = np.zeros(candidate.channels)
    for core in candidate.cores:
        weight = view.constant(view.values[core].args[1])
        weight_max = np.maximum(weight_max, np.abs(weight).max(axis=1))
    absmax = absmax.astype(np.float64)
    scale = np.power(np.maximum(absmax, 1e-12), alpha) / np.power(np.maximum(weight_max, 1e-12), 1.0 - alpha)
    scale = np.where((absmax > 0) & (weight_max > 0), scale, 1.0)
    return np.clip(scale, *SCALE_LIMITS).astype(np.float32)


def _replanned(plan: QuantPlan, found: list[Candidate]) -> QuantPlan:
    """The plan with each smoothed composite (dense, or the reshape before it) reading x_smooth."""
    reads = {}
    for c in found:
        for consumer in [c.reshape] if c.reshape else c.cores:
            reads[consumer] = c.tensor
    composites = []
    for composite in plan.composites:
        key = composite.root if composite.root in reads else composite.core
        if key in reads and composite.inputs and composite.inputs[0] == reads[key]:
            composite = _with_input(composite, f"{reads[key]}_smooth")
        composites.append(composite)
    return QuantPlan(tuple(composites))


def _with_input(composite: CompositePlan, tensor: str) -> CompositePlan:
    return CompositePlan(**{**composite.__dict__, "inputs": (tensor, *composite.inputs[1:])})


@mutator
class _Smoother(PyExprMutator):
    def __init__(self, mod, found: dict[str, Candidate], scales, view: BindingView) -> None:
        super().__init__(mod)
        self.found, self.scales, self.view = found, scales, view
        self.readers = {r: t for t, c in found.items() for r in ([c.reshape] if c.reshape else c.cores)}
        self.cores = {core: t for t, c in found.items() for core in c.cores}
        self.smoothed: dict[str, relax.Var] = {}
        self.params = {p.name: p for p in mod["main"].params}

    def visit_var_binding_(self, binding) -> None:
        name = binding.var.name
        value = self.visit_expr(binding.value)
        if name in self.readers:
            value = self._reading_smoothed(value, self.readers[name])
        if name in self.cores:
            weight = self.view.constant(binding.value.args[1])
            value = self._scaled_weight(value, weight, self.cores[name])
        new = rebind(self.builder_, binding.var, value)
        self.set_var_remap(binding.var, new)
        if name in self.found:
            self._smooth(name, new)

    def _smooth(self, tensor: str, var: relax.Var) -> None:
        candidate = self.found[tensor]
        shape = compat.tensor_type(var)[0]
        inverse = (
            (1.0 / self.scales[tensor]).astype(np.float32).reshape(_trailing_dims(shape, candidate.channels))
        )
        value = self.builder_.normalize(relax.op.multiply(var, relax.const(inverse)))
        smoothed = relax.DataflowVar(f"{tensor}_smooth", value.ty)
        self.builder_.emit_normalized(relax.VarBinding(smoothed, value))
        self.smoothed[tensor] = smoothed

    def _reading_smoothed(self, value: relax.Call, tensor: str) -> relax.Call:
        if tensor not in self.smoothed:  # a model input: smooth it before its first reader
            self._smooth(tensor, self.params[tensor])
        args = [self.smoothed[tensor] if i == 0 else a for i, a in enumerate(value.args)]
        return relax.Call(value.op, args, value.attrs, value.ty_args)

    def _scaled_weight(self, value: relax.Call, weight: np.ndarray, tensor: str) -> relax.Call:
        scaled = (weight * self.scales[tensor][:, None]).astype(np.float32)
        return relax.Call(value.op, [value.args[0], relax.const(scaled)], value.attrs, value.ty_args)
