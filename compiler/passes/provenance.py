"""Before the first pass: give every binding of the imported module its ONNX node(s) and a
name that says so, and attach that as the audit's provenance.

    imported.mod, imported.var_to_node   ->   main with every binding named
                                               + vpuc.provenance {var name: [ONNX node]}

The frontend (compat.relax_from_onnx) binds each ONNX node's result to a var named after
the node and returns {var name: node}. The bindings a converter creates on the way (a
Conv's conv2d and bias reshape, a Gemm's weight transpose, a BatchNorm's tuple) stay
unnamed (lv, lv1, ...). Each of those belongs to the node of its first named reader (it was
created while converting that node: the importer converts nodes in order and binds each
node's result last), or, when nothing named reads it (a BatchNorm's unused mean output),
to the node of the var it reads. They are renamed `<node>_<op>`, so no `lv` name is left
for a later pass's fresh names to collide with (a node result a converter bound itself as
`lvN` is renamed `<node>` too); output aliases (`gv`) keep their name.
"""

from __future__ import annotations

import re

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from vpuc.compiler.frontend import ImportedModel
from vpuc.compiler.passes.audit import Audit, fresh_name


def import_with_provenance(imported: ImportedModel) -> tvm.IRModule:
    """The frontend's module, every binding named after its ONNX node, provenance attached."""
    return name_bindings(imported.mod, imported.var_to_node)


def name_bindings(mod: tvm.IRModule, var_to_node: dict[str, str]) -> tvm.IRModule:
    """Attribute and rename main's bindings; attach {var name: [ONNX node]}."""
    owners = _owners(mod["main"], var_to_node)
    audit = Audit.of(mod)
    func = _Renamer(mod, owners, set(var_to_node), audit).visit_expr(mod["main"])
    new_mod = mod.clone()
    new_mod.update_func(new_mod.get_global_var("main"), func)
    return audit.attach(new_mod)


def _owners(func: relax.Function, var_to_node: dict[str, str]) -> dict[str, str]:
    bindings = [b for block in func.body.blocks for b in block.bindings]
    owners = {b.var.name: var_to_node[b.var.name] for b in bindings if b.var.name in var_to_node}
    readers: dict[str, list[str]] = {}
    for binding in bindings:
        for used in relax.analysis.free_vars(binding.value):
            readers.setdefault(used.name, []).append(binding.var.name)
    for binding in reversed(bindings):  # readers come later: walk back from the outputs
        name = binding.var.name
        if name not in owners:
            owner = next((owners[r] for r in readers.get(name, []) if r in owners), None)
            if owner is not None:
                owners[name] = owner
    for binding in bindings:  # what no named binding reads: the owner of what it reads
        if binding.var.name not in owners:
            read = [owners[v.name] for v in relax.analysis.free_vars(binding.value) if v.name in owners]
            if read:
                owners[binding.var.name] = read[0]
    return owners


def identifier(label: str) -> str:
    """A readable Relax var name from an ONNX node name: `/conv1/Conv` -> `conv1_Conv`."""
    text = re.sub(r"_+", "_", re.sub(r"\W", "_", label)).strip("_")
    return text if text and not text[0].isdigit() else f"n_{text}"


_GENERATED = re.compile(r"^lv\d*$")  # BlockBuilder's names: a later pass may generate them again


@mutator
class _Renamer(PyExprMutator):
    def __init__(self, mod, owners: dict[str, str], named: set[str], audit: Audit) -> None:
        super().__init__(mod)
        self.owners, self.named, self.audit = owners, named, audit
        func = mod["main"]
        self.names = {p.name for p in func.params} | named

    def visit_var_binding_(self, binding) -> None:
        old, value = binding.var, self.visit_expr(binding.value)
        owner = self.owners.get(old.name)
        name = old.name
        generated = _GENERATED.match(old.name) is not None
        if (
            owner is not None
            and isinstance(old, relax.DataflowVar)
            and (generated or old.name not in self.named)
        ):
            op = getattr(getattr(binding.value, "op", None), "name", "item").split(".")[-1]
            name = fresh_name(
                self.names, identifier(owner) if old.name in self.named else f"{identifier(owner)}_{op}"
            )
        var = (relax.DataflowVar if isinstance(old, relax.DataflowVar) else relax.Var)(name, value.ty)
        self.builder_.emit_normalized(relax.VarBinding(var, value))
        self.set_var_remap(old, var)
        if owner is not None:
            self.audit.provenance[name] = [owner]
