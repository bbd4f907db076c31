"""Graph pass: common subexpression elimination (in dataflow blocks, which are pure).

    a = op(x, y);  b = op(x, y)   =>   a = op(x, y);  b's readers read a            cse

Two bindings are the same computation when their op, attributes, output type and inputs
are the same, inputs compared after earlier merges (so whole duplicated chains merge) and
constants by value. Exporters duplicate more than one would think: PyTorch traces
`F.interpolate(x)` twice into two identical Resize nodes (torch_upsample_pad).

Why not TVM's `relax.transform.EliminateCommonSubexpr`: tried on TVM 0.27, it merges the
same bindings (constants by value too) but leaves each merged binding behind as an alias
(`b = a`) and says nothing of what it merged. The pipeline needs both things it does not
give: the fusion audit lists every merge with its ONNX nodes (passes/audit.py), and the
survivor must take over the merged binding's ONNX provenance so that the partition report
still names every node (passes/rebind.py does both for every pass of ours).
"""

from __future__ import annotations

import tvm
from tvm import relax

from vpuc.compiler import compat
from vpuc.compiler.passes.audit import Audit
from vpuc.compiler.passes.options import PassOptions
from vpuc.compiler.passes.rebind import Replacement, replace_bindings

PASS_NAME = "cse"


def _key(expr, canonical: dict):
    """A hashable identity of a value, with vars replaced by their canonical var."""
    if isinstance(expr, relax.Var):
        return ("var", canonical.get(expr, expr))
    if isinstance(expr, relax.Tuple):
        return ("tuple", tuple(_key(f, canonical) for f in expr.fields))
    if isinstance(expr, relax.TupleGetItem):
        return ("item", _key(expr.tuple_value, canonical), int(expr.index))
    if isinstance(expr, relax.Call):
        return (
            "call",
            compat.structural_hash(expr.op),
            compat.structural_hash(expr.attrs) if expr.attrs is not None else 0,
            str(expr.ty),
            tuple(_key(a, canonical) for a in expr.args),
        )
    return ("leaf", compat.structural_hash(expr), str(getattr(expr, "ty", "")))


def cse(mod: tvm.IRModule, options: PassOptions) -> tvm.IRModule:
    """Later duplicates of a dataflow binding read the first one instead."""
    audit = Audit.of(mod)
    canonical: dict[relax.Var, relax.Var] = {}
    replacements = []
    for block in mod["main"].body.blocks:
        if not isinstance(block, relax.DataflowBlock):
            continue
        seen: dict = {}
        for binding in block.bindings:
            if not isinstance(binding.value, relax.Call | relax.TupleGetItem | relax.Tuple):
                continue
            key = _key(binding.value, canonical)
            first = seen.setdefault(key, binding.var)
            if first.same_as(binding.var):
                continue
            canonical[binding.var] = first
            replacements.append(Replacement(binding.var, first, first, [binding.var.name]))
            op = getattr(getattr(binding.value, "op", None), "name", "value")
            audit.fused("cse", [first.name, binding.var.name], f"one {op} computes both")
    return replace_bindings(mod, "main", replacements, audit, PASS_NAME)
