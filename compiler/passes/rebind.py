"""Rewriting a function's bindings in place, names kept: what every pass that changes the
graph ends with (passes/rewrite.py's rules, fold_constants, cse).

    Replacement(root, expr, primary, fused_names)   root binding -> expr (nested calls ok)

The outermost new binding keeps the root's name, so readers of the module still see the
name they knew; nested calls get `<root>_<op>` names, unique in the function (never the
BlockBuilder's `lv`, which a later pass would generate again). The audit's provenance
learns which ONNX nodes each new binding computes: the fused nodes for the primary call,
"(inserted by <pass>)" for glue such as the transposes around an attention. A root replaced
by a var is remapped away (or, for an output, canonicalised into the output); by a constant,
inlined into its readers. Bindings left unread are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from vpuc.compiler import compat
from vpuc.compiler.passes.audit import Audit, fresh_name


@dataclass
class Replacement:
    """New value for a root binding; `primary` is the call that computes the fused nodes
    (the others are glue such as transposes), or every new call when `all_primary`."""

    root: relax.Var
    expr: relax.Expr
    primary: relax.Expr
    fused_names: list[str]
    all_primary: bool = True


def replace_bindings(
    mod: tvm.IRModule,
    func_name: str,
    replacements: list[Replacement],
    audit: Audit,
    pass_name: str,
    func: relax.Function | None = None,
) -> tvm.IRModule:
    """Emit each replacement in place of its root binding; drop what is left unused."""
    func = func if func is not None else mod[func_name]
    if replacements:
        rebinder = _Rebinder(mod, {r.root: r for r in replacements}, _names(func), audit, pass_name)
        func = relax.analysis.remove_all_unused(rebinder.visit_expr(func))
    new_mod = mod.clone()
    new_mod.update_func(new_mod.get_global_var(func_name), func)
    if replacements and rebinder.made_alias:  # an output replaced by a var: bind it directly
        new_mod = relax.transform.CanonicalizeBindings()(new_mod)
    return audit.attach(new_mod)


def _names(func: relax.Function) -> set[str]:
    names = {p.name for p in func.params}
    names.update(b.var.name for block in func.body.blocks for b in block.bindings)
    return names


@mutator
class _Rebinder(PyExprMutator):
    """Re-emits a function, replacing root bindings by their (possibly nested) new value."""

    def __init__(self, mod, plan: dict, names: set[str], audit: Audit, pass_name: str) -> None:
        super().__init__(mod)
        self.plan, self.names, self.audit, self.pass_name = plan, names, audit, pass_name
        self.leaf_remap: dict = {}  # dataflow var -> the constant it became
        self.made_alias = False

    def visit_dataflow_var_(self, var):
        return self.leaf_remap.get(var) or super().visit_dataflow_var_(var)

    def visit_var_binding_(self, binding) -> None:
        replacement = self.plan.get(binding.var)
        if replacement is None:
            super().visit_var_binding_(binding)
            return
        root = binding.var
        if _is_leaf(replacement.expr) and isinstance(root, relax.DataflowVar):
            self.leaf_remap[root] = replacement.expr
            return
        if isinstance(replacement.expr, relax.Var):
            new = self.visit_expr(replacement.expr)
            if isinstance(root, relax.DataflowVar):
                self.set_var_remap(root, new)
                return
            self._bind(root.name, new, dataflow=False, remap=root)  # out = x: canonicalized below
            self.made_alias = True
            self.audit.derive(root.name, [getattr(new, "name", root.name)])
            return
        value = self._emit_args(replacement.expr, replacement)
        self._bind(root.name, value, isinstance(root, relax.DataflowVar), root)
        self._record(root.name, replacement, replacement.expr)

    def _emit_args(self, expr, replacement: Replacement):
        """The call with its nested calls bound to fresh vars, and its leaves remapped."""
        if not isinstance(expr, relax.Call):
            return self.visit_expr(expr)
        args = [self._emit_nested(arg, replacement) for arg in expr.args]
        return relax.Call(expr.op, args, expr.attrs, expr.ty_args)

    def _emit_nested(self, expr, replacement: Replacement):
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self._emit_nested(f, replacement) for f in expr.fields])
        if not isinstance(expr, relax.Call):
            return self.visit_expr(expr)
        value = self._emit_args(expr, replacement)
        name = fresh_name(self.names, f"{replacement.root.name}_{_short(expr)}")
        self._record(name, replacement, expr)
        return self._bind(name, value, self.builder_.current_block_is_dataflow(), None)

    def _bind(self, name: str, value, dataflow: bool, remap):
        value = self.builder_.normalize(value)
        var = (relax.DataflowVar if dataflow else relax.Var)(name, value.ty)
        self.builder_.emit_normalized(relax.VarBinding(var, value))
        if remap is not None:
            self.set_var_remap(remap, var)
        return var

    def _record(self, name: str, replacement: Replacement, expr) -> None:
        if replacement.all_primary or expr.same_as(replacement.primary):
            self.audit.derive(name, replacement.fused_names)
        else:
            self.audit.insert(name, self.pass_name)


def _is_leaf(expr) -> bool:
    return compat.constant_array(expr) is not None


def _short(call: relax.Call) -> str:
    return call.op.name.split(".")[-1]
