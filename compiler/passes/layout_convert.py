"""The layout pass's conversion (passes/layout.py chooses; this converts): conv2d NCHW/OIHW ->
NHWC/OHWI, and every op with a known channels-last form follows; everything else keeps the
layout it was written in, with transposes only at its edges.

Each tensor carries a permutation `p` with physical = permute_dims(logical, p) (None: as
written). An op reads its inputs' physical tensors and either

    follows    computes the same values on the permuted tensors, its attributes moved along
               (relu(x): p;  mean(x, axis=a): axis p.index(a);  max_pool2d NCHW -> NHWC;
               quantize(x, axis=a): axis p.index(a);  x + const: the const permuted too;
               squeeze(x, axis=a): axes p.index(a), the kept axes in their physical order)
    absorbs    permute_dims(x, q) is no op at all: its output is x's physical tensor with
               the permutation composed (an exporter's NHWC <-> NCHW transposes vanish)
    converts   conv2d: input to NHWC (one transpose when it is not), weight OIHW -> OHWI
    keeps      every other op (reshape, matmul, conv2d_transpose, conv1d, call_tir, ...):
               its inputs are transposed back to their written layout first

A transposed copy is made once per tensor and shared by its readers; graph outputs leave in
their written layout. Only ops whose NHWC form TVM builds for llvm are converted (an op
without a channels-last form stays as it is: ConvTranspose, 1-D convs), so the conversion
cannot break a build. TVM's ConvertLayout is not used: it has no rule for
quantize/dequantize (a QDQ model's Q/DQ would keep every transpose), converts ops it cannot
build, and fails on some 3-D layouts ("Invalid SLayout").
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from vpuc.compiler import compat
from vpuc.compiler.passes.audit import Audit, fresh_name
from vpuc.compiler.passes.layout_rules import NHWC, Perm, inverse, rule_for, typed_const


def convert_to_nhwc(mod: tvm.IRModule, pass_name: str) -> tvm.IRModule:
    """Convert main (see the module docstring); provenance kept, inserted transposes marked."""
    audit = Audit.of(mod)
    func = mod["main"]
    converter = _Converter(mod, audit, pass_name, {p.name for p in func.params} | set(audit.provenance))
    converter.shared_params = _shared_params(func)
    new_func = relax.analysis.remove_all_unused(converter.visit_expr(func))
    new_mod = mod.clone()
    new_mod.update_func(new_mod.get_global_var("main"), new_func)
    return audit.attach(new_mod)


def _shared_params(func: relax.Function) -> set[relax.Var]:
    """The parameters more than one binding (or the function's result) reads."""
    readers: dict[relax.Var, int] = {}
    values = [b.value for block in func.body.blocks for b in block.bindings] + [func.body.body]
    for value in values:
        for var in relax.analysis.free_vars(value):
            readers[var] = readers.get(var, 0) + 1
    return {p for p in func.params if readers.get(p, 0) > 1}


@mutator
class _Converter(PyExprMutator):
    def __init__(self, mod, audit: Audit, pass_name: str, names: set[str]) -> None:
        super().__init__(mod)
        self.audit, self.pass_name, self.names = audit, pass_name, names
        self.perm: dict[relax.Var, Perm | list[Perm]] = {}  # a tuple's: one per field
        self.copies: dict[tuple[relax.Var, Perm], relax.Var] = {}
        self.shared_params: set[relax.Var] = set()  # convert_to_nhwc sets it (_shared_params)

    # -- bookkeeping -----------------------------------------------------------------------

    def perm_of(self, expr) -> Perm:
        found = self.perm.get(expr) if isinstance(expr, relax.Var) else None
        return found if not isinstance(found, list) else None

    def physical(self, expr, want: Perm) -> relax.Expr:
        """`expr` (a new var or constant) laid out as `want` (relative to its logical form)."""
        have = self.perm_of(expr)
        if have == want:
            return expr
        array = compat.constant_array(expr)
        if array is not None:
            logical = array if have is None else np.transpose(array, inverse(have))
            return typed_const(logical if want is None else np.transpose(logical, want))
        key = (expr, want)
        if key not in self.copies:
            # physical_have -> logical -> physical_want in one permute
            axes = list(range(len(want or have))) if have is None else list(inverse(have))
            axes = [axes[a] for a in want] if want is not None else axes
            name = fresh_name(self.names, f"{expr.name}_{'nhwc' if want == NHWC else 'as_written'}")
            copy = self.builder_.emit(relax.op.permute_dims(expr, axes), name_hint=name)
            self.audit.insert(name, self.pass_name)
            self.perm[copy] = want
            self.copies[key] = copy
        return self.copies[key]

    def written(self, expr) -> relax.Expr:
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self.written(f) for f in expr.fields])
        return self.physical(expr, None) if isinstance(expr, relax.Var) else expr

    # -- bindings --------------------------------------------------------------------------

    def visit_var_binding_(self, binding) -> None:
        old, value = binding.var, self._remapped(binding.value)
        result = rule_for(value)(self, value) if isinstance(value, relax.Call) else None
        if isinstance(value, relax.TupleGetItem):
            result = self._item(value)
        if result is None:
            result = self._kept(value), None
        expr, perm = result
        if not isinstance(old, relax.DataflowVar) and isinstance(perm, list) and any(perm):
            inner = self.builder_.emit(expr, name_hint=fresh_name(self.names, f"{old.name}_nhwc"))
            self.perm[inner] = perm
            fields = [self.builder_.emit(relax.TupleGetItem(inner, i)) for i in range(len(perm))]
            for field, field_perm in zip(fields, perm, strict=True):
                self.perm[field] = field_perm
            expr, perm = relax.Tuple([self.written(f) for f in fields]), None
        if not isinstance(old, relax.DataflowVar) and isinstance(perm, tuple):  # a graph output
            inner = self.builder_.emit(expr, name_hint=fresh_name(self.names, f"{old.name}_nhwc"))
            self.audit.provenance[inner.name] = list(self.audit.provenance.get(old.name, []))
            self.perm[inner] = perm
            expr, perm = relax.op.permute_dims(inner, list(inverse(perm))), None
            self.audit.insert(old.name, self.pass_name)
        new = self._rebind(old, expr, perm)
        self.perm[new] = perm

    def _item(self, value: relax.TupleGetItem):
        """A field of a tuple whose fields have their own layouts (batch_norm's)."""
        perms = self.perm.get(value.tuple_value) if isinstance(value.tuple_value, relax.Var) else None
        return (value, perms[value.index]) if isinstance(perms, list) else None

    def _remapped(self, value: relax.Expr) -> relax.Expr:
        """`value` reading the new vars, not yet normalised (shapes may have changed)."""
        if isinstance(value, relax.Call):
            return relax.Call(value.op, [self._remapped(a) for a in value.args], value.attrs, value.ty_args)
        if isinstance(value, relax.Tuple):
            return relax.Tuple([self._remapped(f) for f in value.fields])
        if isinstance(value, relax.TupleGetItem):
            return relax.TupleGetItem(self._remapped(value.tuple_value), value.index)
        return self.visit_expr(value) if isinstance(value, relax.Var) else value

    def _rebind(self, old: relax.Var, expr: relax.Expr, perm=None) -> relax.Var:
        expr = self.builder_.normalize(expr)
        # A relabelling (permute_dims absorbed) returns its input var under another layout:
        # aliasing the two would give the input the output's layout (x @ x^T read x twice
        # transposed: found by tests/fuzz, regression case cpu-0cf063e9af), so it gets a
        # binding of its own. A graph input has no layout yet (as written): when another
        # binding reads it too, its relabelling is one as well (x @ permute(x) on the graph
        # input, cpu-fd88f7e7a6); read once (an NHWC export's input transpose), it is aliased
        # and takes the layout, so an all-VPU graph keeps no host binding.
        if isinstance(expr, relax.Var) and expr not in self.perm and expr in self.shared_params:
            relabelled = perm is not None
        else:
            relabelled = isinstance(expr, relax.Var) and expr in self.perm and self.perm[expr] != perm
        if isinstance(expr, relax.Var) and isinstance(old, relax.DataflowVar) and not relabelled:
            self.set_var_remap(old, expr)
            return expr
        cls = relax.DataflowVar if isinstance(old, relax.DataflowVar) else relax.Var
        var = cls(old.name, expr.ty)
        self.builder_.emit_normalized(relax.VarBinding(var, expr))
        self.set_var_remap(old, var)
        return var

    def _kept(self, value: relax.Expr) -> relax.Expr:
        """The op as written: every input back in its written layout."""
        if isinstance(value, relax.Call):
            args = [self.written(a) for a in value.args]
            return relax.Call(value.op, args, value.attrs, value.ty_args)
        if isinstance(value, relax.Tuple):
            return self.written(value)
        if isinstance(value, relax.TupleGetItem):
            return value
        return self.written(value) if isinstance(value, relax.Var) else value
