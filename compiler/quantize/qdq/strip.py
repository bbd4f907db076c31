"""The float reference of a QDQ model, for its accuracy report: activations unquantised,
weights as the model gives them.

    y = quantize(x, s, z);  w = dequantize(y, s, z);  ... op(w)    ->   ... op(clamp(x, lo, hi))
    y2 = requantize(y, ...);  w2 = dequantize(y2, ...);  op(w2)     ->   the same, y's range
    c = dequantize(C_int, s, z)                                     ->   c = const(f32(C - z) * s)

with [lo, hi] = [(-128 - z) * s, (127 - z) * s], the range the quantize can represent.

A QDQ model carries no float original; the reference is the same graph with the rounding
taken out: every activation's quantize/dequantize pair becomes the clamp to its range, and
every weight is dequantized once. The clamps must stay, because exporters fold activations
into them (onnxruntime's quantiser deletes a Relu or a Clip(0, 6) that feeds a quantize
whose range starts at 0), so the figures measure the rounding noise of the chosen scales.
`renamed` says, for every dequantize that disappeared, which float tensor now stands in its
place; `reference_of` gives, for every quantised float tensor, its clamped twin.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from vpuc.compiler import compat
from vpuc.compiler.quantize.bindings import DEQUANTIZE, QUANTIZE, BindingView, forward, rebind
from vpuc.compiler.quantize.params import QParams
from vpuc.compiler.quantize.qdq.pairs import REQUANTIZE
from vpuc.compiler.quantize.qdq.params import call_params


@dataclass
class Stripped:
    mod: tvm.IRModule
    renamed: dict[str, str]  # removed dequantize binding -> the float tensor in its place
    reference_of: dict[str, str]  # quantised float tensor -> what to compare it with


def strip_fake_quant(mod: tvm.IRModule) -> Stripped:
    """The float reference of a QDQ module (see the module docstring)."""
    view = BindingView.of(mod["main"])
    origins = float_origins(view)
    stripper = _Stripper(mod, view, origins)
    func = relax.analysis.remove_all_unused(stripper.visit_expr(mod["main"]))
    new_mod = mod.clone()
    new_mod.update_func(new_mod.get_global_var("main"), func)
    return Stripped(new_mod, stripper.renamed, stripper.reference_of)


def float_origins(view: BindingView) -> dict[str, tuple[str, QParams]]:
    """int tensor -> (the float tensor it quantises, the parameters it was quantised with),
    through requantise calls."""
    origins: dict[str, tuple[str, QParams]] = {}
    for name, value in view.values.items():
        source = value.args[0] if isinstance(value, relax.Call) and value.args else None
        if view.op(name) == QUANTIZE and isinstance(source, relax.Var) and call_params(value) is not None:
            origins[name] = (source.name, call_params(value))
        elif is_requantize(value):
            inner, _, _, scale, zero = value.args[1].fields
            if isinstance(inner, relax.Var) and inner.name in origins:
                params = QParams(
                    compat.constant_array(scale), compat.constant_array(zero), -1, str(value.ty.dtype)
                )
                origins[name] = (origins[inner.name][0], params)
    return origins


def _bounds(params: QParams, ndim: int) -> tuple[relax.Expr, relax.Expr]:
    """float32 constants lo, hi of the range `params` represent, shaped to broadcast."""
    info = np.iinfo(params.dtype)
    zero = params.zero_point.astype(np.float32)
    lo = (np.float32(info.min) - zero) * params.scale
    hi = (np.float32(info.max) - zero) * params.scale
    if params.per_axis:
        shape = [1] * ndim
        shape[params.axis] = -1
        lo, hi = lo.reshape(shape), hi.reshape(shape)
    return relax.const(lo.astype(np.float32)), relax.const(hi.astype(np.float32))


def is_requantize(value: relax.Expr) -> bool:
    """A call_tir of the requantize PrimFunc (qdq_pairs.py)."""
    if not isinstance(value, relax.Call) or getattr(value.op, "name", None) != "relax.call_tir":
        return False
    return value.args[0].name_hint.startswith(REQUANTIZE)


@mutator
class _Stripper(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, view: BindingView, origins: dict[str, str]) -> None:
        super().__init__(mod)
        self.view, self.origins = view, origins
        self.renamed: dict[str, str] = {}
        self.reference_of: dict[str, str] = {}
        self.clamped: dict[str, relax.Var] = {}

    def visit_var_binding_(self, binding) -> None:
        value, name = binding.value, binding.var.name
        if self.view.op(name) != DEQUANTIZE:
            super().visit_var_binding_(binding)
            return
        source = value.args[0]
        if isinstance(source, relax.Var) and source.name in self.origins:
            origin, params = self.origins[source.name]
            replacement = self._clamped(origin, params)
            self.renamed[name] = replacement.name
            forward(self, binding.var, replacement)
        elif compat.is_constant(source) and call_params(value) is not None:
            folded = call_params(value).dequantize(compat.constant_array(source))
            self.set_var_remap(binding.var, rebind(self.builder_, binding.var, relax.const(folded)))
        else:
            super().visit_var_binding_(binding)

    def _clamped(self, origin: str, params: QParams) -> relax.Var:
        """minimum(maximum(origin, lo), hi), bound once per tensor."""
        if origin not in self.clamped:
            value = self.visit_expr(self.view.vars[origin])
            lo, hi = _bounds(params, len(value.ty.shape.values))
            raised = self.builder_.emit(relax.op.maximum(value, lo), f"{origin}_floor")
            self.clamped[origin] = self.builder_.emit(relax.op.minimum(raised, hi), f"{origin}_clamped")
            self.reference_of[origin] = self.clamped[origin].name
        return self.clamped[origin]
