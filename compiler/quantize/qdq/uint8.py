"""QDQ pass: uint8 activations and constants become int8, exactly.

    y = quantize(x, s, z, uint8);  w = dequantize(y, s, z)     (every reader of y a dequantize)
 -> y = quantize(x, s, z - 128, int8);  w = dequantize(y, s, z - 128)

    c = dequantize(C_uint8, s, z)   ->   c = dequantize(C_uint8 - 128, s, z - 128)

Exact: clamp(rne(x/s) + z, 0, 255) - 128 = clamp(rne(x/s) + z - 128, -128, 127), and
(q - z) is unchanged when both q and z move by 128, so every dequantized value is the same
float. A uint8 tensor some other op reads (a model output, an integer op) is left as is.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from vpuc.compiler import compat
from vpuc.compiler.quantize.bindings import DEQUANTIZE, QUANTIZE, BindingView, op_name, rebind


def uint8_to_int8(mod: tvm.IRModule) -> tvm.IRModule:
    """uint8 quantize/dequantize pairs and uint8 constants -> int8 (see the module docstring)."""
    view = BindingView.of(mod["main"])
    convertible = {
        name
        for name, value in view.values.items()
        if view.op(name) == QUANTIZE
        and str(value.attrs.out_dtype) == "uint8"
        and view.readers[name]
        and all(view.op(r) == DEQUANTIZE for r in view.readers[name])
    }
    if not convertible and not any(_uint8_constant_dq(v) for v in view.values.values()):
        return mod
    func = _Shifter(mod, convertible).visit_expr(mod["main"])
    new_mod = mod.clone()
    new_mod.update_func(new_mod.get_global_var("main"), func)
    return new_mod


def _uint8_constant_dq(value: relax.Expr) -> bool:
    if op_name(value) != DEQUANTIZE:
        return False
    array = compat.constant_array(value.args[0])
    return array is not None and array.dtype == np.uint8


def _shifted(array: np.ndarray) -> np.ndarray:
    return (array.astype(np.int16) - 128).astype(np.int8)


def _shift(zero: relax.Expr) -> relax.Expr:
    array = compat.constant_array(zero)
    return relax.const(_shifted(array)) if array is not None and array.dtype == np.uint8 else zero


@mutator
class _Shifter(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, convertible: set[str]) -> None:
        super().__init__(mod)
        self.convertible = convertible

    def visit_var_binding_(self, binding) -> None:
        value = self.visit_expr(binding.value)
        name = binding.var.name
        if name in self.convertible:
            data, scale, zero = value.args
            value = relax.op.quantize(data, scale, _shift(zero), axis=value.attrs.axis, out_dtype="int8")
        elif op_name(value) == DEQUANTIZE and self._reads_uint8(value.args[0]):
            data, scale, zero = value.args
            if compat.is_constant(data):
                data = relax.const(_shifted(compat.constant_array(data)))
            value = relax.op.dequantize(data, scale, _shift(zero), axis=value.attrs.axis, out_dtype="float32")
        self.set_var_remap(binding.var, rebind(self.builder_, binding.var, value))

    def _reads_uint8(self, data: relax.Expr) -> bool:
        if isinstance(data, relax.Var):
            return data.name in self.convertible
        array = compat.constant_array(data)
        return array is not None and array.dtype == np.uint8
