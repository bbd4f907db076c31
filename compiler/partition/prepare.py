"""Before annotation: give every dequantize one reader.

    t = dequantize(q, s, z); a = f(t); b = g(t)
        ->  t = dequantize(q, s, z); a = f(t); t_2 = dequantize(q, s, z); b = g(t_2)

A QDQ model dequantizes a tensor once for all its readers (a residual input feeds a conv
and an add). A VPU composite takes its input's dequantize inside it (patterns.py), so a
dequantize shared by two composites would belong to both: FuseOpsByPattern then leaves a
var that MergeCompositeFunctions cannot place (a TVM InternalError). onnxruntime's QDQ
handling duplicates such DequantizeLinear nodes the same way; the values are unchanged.
A graph output counts as a reader: a dequantize that is an output (or an element of the
output tuple) and also feeds an op gets a copy for the op (a fuzzer finding: Abs's
dequantized output read by an Add and returned crashed the partitioner). A field of a
tuple argument is read by the call (`concat((t, u))`): a dequantize read by a Concat and a
Conv gets a copy for each (issue 20: without it neither composite could take it, and both
stayed on the CPU).
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from vpuc.compiler.partition.opview import op_name


def duplicate_shared_dequantize(mod: tvm.IRModule) -> tvm.IRModule:
    func = mod["main"]
    readers = _reader_counts(func)
    shared = {
        b.var: b.value
        for block in func.body.blocks
        for b in block.bindings
        if op_name(b.value) == "relax.dequantize" and readers.get(b.var, 0) > 1
    }
    if not shared:
        return mod
    new_func = _Duplicator(mod, shared).visit_expr(func)
    new_mod = mod.clone()
    new_mod.update_func(new_mod.get_global_var("main"), new_func)
    return new_mod


def _reader_counts(func: relax.Function) -> dict[relax.Var, int]:
    counts: dict[relax.Var, int] = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            for var in relax.analysis.free_vars(binding.value):
                counts[var] = counts.get(var, 0) + 1
    for var in relax.analysis.free_vars(func.body.body):
        counts[var] = counts.get(var, 0) + 1
    return counts


@mutator
class _Duplicator(PyExprMutator):
    """Re-emits a shared dequantize right before each of its readers after the first."""

    def __init__(self, mod: tvm.IRModule, shared: dict) -> None:
        super().__init__(mod)
        self.shared = shared
        # a dequantize bound to a function output is read by the return: its readers in
        # the dataflow block all get copies
        self.taken: set = {var for var in shared if not isinstance(var, relax.DataflowVar)}
        self.copies = 0

    def visit_var_binding_(self, binding) -> None:
        value = binding.value
        reads = _reads(value)
        if binding.var not in self.shared:
            for arg in {a for a in reads if isinstance(a, relax.Var) and a in self.shared}:
                if arg in self.taken:
                    self.copies += 1
                    copy = self.builder_.emit(
                        _fresh_call(self.visit_expr(self.shared[arg])), name_hint=f"{arg.name}_{self.copies}"
                    )
                    self.set_var_remap(arg, copy)
                    value = self.visit_expr(value)
                    self.set_var_remap(arg, arg)
                self.taken.add(arg)
        super().visit_var_binding_(relax.VarBinding(binding.var, value))


def _reads(value: relax.Expr) -> list[relax.Expr]:
    """What a binding reads: a call's arguments and the fields of a tuple among them (a
    concat reads its inputs as `concat((a, b))`), or a tuple's fields."""
    if isinstance(value, relax.Call):
        return [f for a in value.args for f in (a.fields if isinstance(a, relax.Tuple) else (a,))]
    if isinstance(value, relax.Tuple):
        return list(value.fields)
    return []


def _fresh_call(call: relax.Call) -> relax.Call:
    """A new Call object equal to `call`: FuseOpsByPattern maps each bound value back to its
    var, so two bindings of one object make it take the wrong copy into a composite (and
    leave the other var unbound: the MergeCompositeFunctions crash, found by the fuzzer)."""
    return relax.Call(call.op, call.args, call.attrs, call.ty_args)
