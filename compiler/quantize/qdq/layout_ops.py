"""QDQ pass: a layout op on an int8 tensor, in the form every VPU op has.

    y = reshape(x_int8);  a = dequantize(y, s, z);  b = dequantize(y, s, z)
 -> x_dq = dequantize(x_int8, s, z);  r = reshape(x_dq);  y = quantize(r, s, z);  readers as before

tf2onnx writes the flatten of an int8 TFLite model as Reshape (or Transpose) on the int8
tensor, between a QuantizeLinear and a DequantizeLinear. The VPU patterns (and the code
generator) take a layout op in QDQ form, dequantize -> op -> quantize; this is that form.
Exact: the op only moves values, and quantize(dequantize(q)) = q with the same parameters.
Applies when every reader of the op's result dequantizes it with the same per-tensor
parameters (which are then the tensor's).
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from vpuc.compiler.quantize.bindings import DEQUANTIZE, BindingView, rebind
from vpuc.compiler.quantize.qdq.params import call_params

LAYOUT_OPS = ("relax.reshape", "relax.permute_dims", "relax.flatten", "relax.squeeze", "relax.expand_dims")


def requantize_layout_ops(mod: tvm.IRModule, provenance: dict[str, list[str]] | None = None) -> tvm.IRModule:
    """int8 layout ops -> dequantize -> op -> quantize (see the module docstring); the new
    bindings compute the op's ONNX nodes (`provenance`, when given, learns them)."""
    view = BindingView.of(mod["main"])
    found = {name: params for name in view.values if (params := _params(view, name)) is not None}
    if not found:
        return mod
    for name in found if provenance is not None else ():
        for suffix in ("_in", "_float"):
            provenance[f"{name}{suffix}"] = list(provenance.get(name, []))
    func = _Rewriter(mod, found).visit_expr(mod["main"])
    new_mod = mod.clone()
    new_mod.update_func(new_mod.get_global_var("main"), func)
    return new_mod


def _params(view: BindingView, name: str):
    """The readers' (scale, zero point) call when `name` is an int8 layout op they all
    dequantize alike, else None."""
    if view.op(name) not in LAYOUT_OPS or (view.tensor_type(name) or ((), ""))[1] != "int8":
        return None
    readers = view.readers.get(name, [])
    if not readers or any(view.op(r) != DEQUANTIZE for r in readers):
        return None
    params = [call_params(view.values[r]) for r in readers]
    if any(p is None or p.per_axis for p in params) or any(not p.same_as(params[0]) for p in params):
        return None
    return view.values[readers[0]]


@mutator
class _Rewriter(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, found: dict) -> None:
        super().__init__(mod)
        self.found = found

    def visit_var_binding_(self, binding) -> None:
        name = binding.var.name
        if name not in self.found:
            super().visit_var_binding_(binding)
            return
        reader = self.found[name]
        scale, zero = reader.args[1], reader.args[2]
        value = binding.value
        source = self.visit_expr(value.args[0])
        dequantized = self.builder_.emit(
            relax.op.dequantize(source, scale, zero, -1, "float32"), name_hint=f"{name}_in"
        )
        moved = self.builder_.emit(
            relax.Call(value.op, [dequantized, *value.args[1:]], value.attrs, value.ty_args), f"{name}_float"
        )
        requantized = relax.op.quantize(moved, scale, zero, -1, "int8")
        self.set_var_remap(binding.var, rebind(self.builder_, binding.var, requantized))
