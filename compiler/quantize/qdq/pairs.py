"""QDQ pass: a dequantize read straight by a quantize is a no-op or one requantise.

    y = dequantize(x, s, z);  w = quantize(y, s, z)        ->  w's readers read x
    y = dequantize(x, s1, z1);  w = quantize(y, s2, z2)    ->  w = requantize(x, s1, z1, s2, z2)

The first is exact: (x - z) * s / s rounds back to x - z for every int8 x. The second
keeps ONNX's float semantics bit for bit: `requantize` is one call_tir whose arguments are
x and the four parameters (Relax has no requantize op), computing

    clamp(rne(f32(x - z1) * s1 / s2) + z2)

in the order TVM's own dequantize and quantize legalisations do. Only per-tensor pairs
become a requantise; a dequantize other ops also read stays for them (dead ones go).
"""

from __future__ import annotations

import tvm
from tvm import relax, te, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator

from vpuc.compiler.quantize.bindings import DEQUANTIZE, QUANTIZE, BindingView, forward, rebind
from vpuc.compiler.quantize.qdq.params import call_params

REQUANTIZE = "requantize"  # the name of the PrimFunc a requantise calls


def fold_qdq_pairs(mod: tvm.IRModule) -> tvm.IRModule:
    """q(dq(x)) pairs removed or turned into requantise calls (see the module docstring)."""
    view = BindingView.of(mod["main"])
    pairs = {name: view.values[name].args[0] for name in view.values if _is_pair(view, name)}
    if not pairs:
        return mod
    mutator_ = _PairFolder(mod, view, pairs)
    func = relax.analysis.remove_all_unused(mutator_.visit_expr(mod["main"]))
    new_mod = mutator_.builder_.get()
    new_mod.update_func(new_mod.get_global_var("main"), func)
    return new_mod


def _is_pair(view: BindingView, name: str) -> bool:
    if view.op(name) != QUANTIZE:
        return False
    source = view.values[name].args[0]
    return isinstance(source, relax.Var) and view.op(source.name) == DEQUANTIZE


def requantize_te(
    data: te.Tensor, s_in: te.Tensor, z_in: te.Tensor, s_out: te.Tensor, z_out: te.Tensor, out_dtype: str
):
    """clamp(rne(f32(data - z_in) * s_in / s_out) + z_out) with 0-d parameter tensors."""

    def compute(*index):
        dequantized = (data[index].astype("int32") - z_in[()].astype("int32")) * s_in[()].astype("float32")
        rounded = te.round(dequantized / s_out[()]) + z_out[()].astype("float32")
        low, high = tirx.min_value(out_dtype), tirx.max_value(out_dtype)
        return te.max(te.min(rounded, high.astype("float32")), low.astype("float32")).astype(out_dtype)

    return te.compute(data.shape, compute, name="requantized")


@mutator
class _PairFolder(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, view: BindingView, pairs: dict[str, relax.Var]) -> None:
        super().__init__(mod)
        self.view, self.pairs = view, pairs

    def visit_var_binding_(self, binding) -> None:
        name = binding.var.name
        if name not in self.pairs:
            super().visit_var_binding_(binding)
            return
        dequantize = self.view.values[self.pairs[name].name]
        quantize = binding.value
        before, after = call_params(dequantize), call_params(quantize)
        source = self.visit_expr(dequantize.args[0])
        if before is None or after is None:
            super().visit_var_binding_(binding)
        elif before.same_as(after) and after.dtype == str(source.ty.dtype):
            forward(self, binding.var, source)
        elif before.per_axis or after.per_axis:
            super().visit_var_binding_(binding)
        else:
            args = [source, dequantize.args[1], dequantize.args[2], quantize.args[1], quantize.args[2]]
            call = self.builder_.call_te(
                requantize_te, *args, out_dtype=after.dtype, primfunc_name_hint=REQUANTIZE
            )
            self.set_var_remap(binding.var, rebind(self.builder_, binding.var, call))
