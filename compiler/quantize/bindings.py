"""Use-def facts about a Relax `main`, by binding name: what the quantiser's passes read.

The partitioner, the calibration observer and the QDQ passes all speak binding names (the
graph passes name every binding after its ONNX node), so this view maps names to values,
to the names they read and to the names that read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from vpuc.compiler import compat

QUANTIZE = "relax.quantize"
DEQUANTIZE = "relax.dequantize"
OUTPUT = "<output>"  # the consumer standing for the function's return value


def op_name(expr) -> str | None:
    """`relax.nn.conv2d` for a call of that op; None for anything else."""
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
        return expr.op.name
    return None


def var_names(expr) -> list[str]:
    """Names of the vars an expression reads, in argument order, without repeats."""
    return list(dict.fromkeys(v.name for v in relax.analysis.free_vars(expr)))


def leaf_vars(expr) -> list[relax.Var]:
    """The vars of a (possibly nested) tuple of vars, e.g. the function's return value."""
    if isinstance(expr, relax.Tuple):
        return [v for field_ in expr.fields for v in leaf_vars(field_)]
    return [expr] if isinstance(expr, relax.Var) else []


@dataclass
class BindingView:
    """main's bindings by name, with readers; params count as producers of their name."""

    func: relax.Function
    values: dict[str, relax.Expr] = field(default_factory=dict)
    vars: dict[str, relax.Var] = field(default_factory=dict)
    order: dict[str, int] = field(default_factory=dict)
    readers: dict[str, list[str]] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, func: relax.Function) -> BindingView:
        view = cls(func)
        for param in func.params:
            view.vars[param.name] = param
            view.readers[param.name] = []
        for block in func.body.blocks:
            for binding in block.bindings:
                name = binding.var.name
                view.values[name], view.vars[name] = binding.value, binding.var
                view.order[name] = len(view.order)
                view.readers[name] = []
                for used in var_names(binding.value):
                    view.readers.setdefault(used, []).append(name)
        view.outputs = [v.name for v in leaf_vars(func.body.body)]
        for name in view.outputs:
            view.readers.setdefault(name, []).append(OUTPUT)
        return view

    @property
    def params(self) -> list[str]:
        return [p.name for p in self.func.params]

    def op(self, name: str) -> str | None:
        return op_name(self.values.get(name))

    def constant(self, expr) -> np.ndarray | None:
        """The value of a constant, or of a var bound to one."""
        if isinstance(expr, relax.Var) and expr.name in self.values:
            expr = self.values[expr.name]
        return compat.constant_array(expr)

    def tensor_type(self, name: str) -> tuple[tuple[int, ...], str] | None:
        return compat.tensor_type(self.vars[name])


def rebind(
    builder: relax.BlockBuilder, old: relax.Var, value: relax.Expr, name: str | None = None
) -> relax.Var:
    """Emit `value` under `old`'s name (or `name`) and kind (dataflow var or output var)."""
    value = builder.normalize(value)
    var = (relax.DataflowVar if isinstance(old, relax.DataflowVar) else relax.Var)(name or old.name, value.ty)
    builder.emit_normalized(relax.VarBinding(var, value))
    return var


def forward(mutator, old: relax.Var, replacement: relax.Var) -> None:
    """Make readers of `old` read `replacement` instead; an output var stays bound (to an
    alias), since a function cannot return a dataflow var."""
    if isinstance(old, relax.DataflowVar) or not isinstance(replacement, relax.DataflowVar):
        mutator.set_var_remap(old, replacement)
    else:
        mutator.set_var_remap(old, rebind(mutator.builder_, old, replacement))


def replace_constants(mod: tvm.IRModule, new: dict[str, dict[int, np.ndarray]]) -> tvm.IRModule:
    """`mod` with constant arguments of main's bindings replaced: {binding: {arg index: array}}."""
    func = mod["main"]
    mutated = _ConstantReplacer(mod, new).visit_expr(func)
    new_mod = mod.clone()
    new_mod.update_func(new_mod.get_global_var("main"), mutated)
    return new_mod


@mutator
class _ConstantReplacer(PyExprMutator):
    def __init__(self, mod, new: dict[str, dict[int, np.ndarray]]) -> None:
        super().__init__(mod)
        self.new = new

    def visit_var_binding_(self, binding) -> None:
        value = self.visit_expr(binding.value)
        if binding.var.name in self.new:
            args = list(value.args)
            for index, array in self.new[binding.var.name].items():
                args[index] = relax.const(np.ascontiguousarray(array, dtype=np.float32))
            value = relax.Call(value.op, args, value.attrs, value.ty_args)
        self.set_var_remap(binding.var, rebind(self.builder_, binding.var, value))
