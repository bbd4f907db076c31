"""QDQ pass: layout ops on dequantized constants move into the constants.

    b = dequantize(B, s, z, axis=0);  r = reshape(b, [1, C, 1, 1])
 -> r = dequantize(reshape(B), s, z, axis=1)

    w = dequantize(W, s, z, axis=0);  t = permute_dims(w, [1, 0])
 -> t = dequantize(transpose(W), s, z, axis=1)

The importer writes a Conv's bias as reshape(bias) and a Gemm's weight as permute_dims(W);
in a QDQ model those read a dequantize of an int constant, which no VPU pattern takes as a
weight (patterns.py wants dequantize(constant) right at the op). Moving the layout op into
the int constant (numpy) and the channel axis along with it gives that form; the values are
the same. A per-axis reshape that splits or merges the channel axis is left alone. The
new binding computes the DequantizeLinear node too: given a provenance map, it learns both.
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from vpuc.compiler import compat
from vpuc.compiler.quantize.bindings import DEQUANTIZE, BindingView, op_name, rebind

LAYOUT_OPS = ("relax.reshape", "relax.permute_dims")


def fold_constant_layout(mod: tvm.IRModule, provenance: dict[str, list[str]] | None = None) -> tvm.IRModule:
    """reshape/permute_dims of dequantize(constant) -> dequantize(constant reshaped/permuted).
    `provenance` ({var: [ONNX nodes]}), when given, is updated: the folded binding also
    computes the dequantize's nodes."""
    folder = _LayoutFolder(mod, BindingView.of(mod["main"]))
    func = relax.analysis.remove_all_unused(folder.visit_expr(mod["main"]))
    if provenance is not None:
        for name, source in folder.folded.items():
            merged = provenance.get(name, []) + provenance.get(source, [])
            provenance[name] = list(dict.fromkeys(merged))
    new_mod = mod.clone()
    new_mod.update_func(new_mod.get_global_var("main"), func)
    return new_mod


def _moved(layout: relax.Call, dequantize: relax.Call) -> relax.Call | None:
    """The dequantize of the re-laid-out constant, or None when the axis cannot follow."""
    data = compat.constant_array(dequantize.args[0])
    scale = compat.constant_array(dequantize.args[1])
    if data is None or scale is None:
        return None
    per_axis = scale.size > 1
    axis = int(dequantize.attrs.axis) % max(data.ndim, 1)
    if op_name(layout) == "relax.permute_dims":
        axes = (
            list(range(data.ndim))[::-1] if layout.attrs.axes is None else [int(a) for a in layout.attrs.axes]
        )
        new_data, new_axis = np.transpose(data, axes), axes.index(axis) if per_axis else -1
    else:
        shape = tuple(int(v) for v in layout.args[1].values)
        new_data, new_axis = data.reshape(shape), _reshaped_axis(data.shape, shape, axis) if per_axis else -1
        if new_axis is None:
            return None
    return relax.op.dequantize(
        relax.const(np.ascontiguousarray(new_data)),
        dequantize.args[1],
        dequantize.args[2],
        new_axis,
        "float32",
    )


def _reshaped_axis(old: tuple[int, ...], new: tuple[int, ...], axis: int) -> int | None:
    """Where the channel axis lands in a reshape that keeps it whole, else None."""
    before = math.prod(old[:axis])
    for index, size in enumerate(new):
        if size == old[axis] and math.prod(new[:index]) == before:
            return index
    return None


@mutator
class _LayoutFolder(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, view: BindingView) -> None:
        super().__init__(mod)
        self.view = view
        self.folded: dict[str, str] = {}  # new binding -> the dequantize it took in

    def visit_var_binding_(self, binding) -> None:
        value = binding.value
        source = value.args[0] if op_name(value) in LAYOUT_OPS else None
        # the layout pass's relabelling binds a var to a var (a Gemm's transB weight): see through
        while isinstance(source, relax.Var) and isinstance(self.view.values.get(source.name), relax.Var):
            source = self.view.values[source.name]
        if isinstance(source, relax.Var) and self.view.op(source.name) == DEQUANTIZE:
            moved = _moved(value, self.view.values[source.name])
            if moved is not None:
                self.folded[binding.var.name] = source.name
                self.set_var_remap(binding.var, rebind(self.builder_, binding.var, moved))
                return
        super().visit_var_binding_(binding)
