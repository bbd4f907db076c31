"""Graph pass: Clip as the importer writes it -> one R.clip (or R.nn.relu).

    call_tir(maximum, x, lo) -> call_tir(minimum, ., hi)   =>  clip(x, lo, hi)        clip
    call_tir(maximum, x, 0)                                =>  nn.relu(x)             clip
    call_tir(maximum, x, lo) / call_tir(minimum, x, hi)    =>  clip(x, lo, +inf) / clip(x, -inf, hi)

ONNX Clip (opset >= 11, so PyTorch's ReLU6 and Paddle's clip) takes its bounds as inputs,
and TVM's importer lowers it to two TIR functions, maximum then minimum, through emit_te:
two kernels instead of one, and a partitioner looking for an activation after a conv sees
no op it knows. With the bounds scalar constants (fold_constants has folded the importer's
NaN guard on them), min(max(x, lo), hi) is clip(x, lo, hi) by definition.

The TIR functions are recognised by what they compute, not by their name: three buffers,
the output shaped as the input, and a body whose only arithmetic is one T.max (T.min).
"""

from __future__ import annotations

import math

import tvm
from tvm import relax

from vpuc.compiler import compat
from vpuc.compiler.passes.options import PassOptions
from vpuc.compiler.passes.rewrite import DataflowView, Match, Rule, run_rules

PASS_NAME = "clip"
_ARITHMETIC = {"Add", "Sub", "Mul", "Div", "Max", "Min", "FloorDiv", "FloorMod", "Select", "Call", "Cast"}


def _tir_node_types(obj, out: list, depth: int = 0) -> None:
    """The type names of every node under a TIR object (a reflective walk: no visitor API)."""
    if depth > 64:
        return
    if isinstance(obj, list | tuple) or type(obj).__name__ in ("Array", "List"):
        for item in obj:
            _tir_node_types(item, out, depth + 1)
        return
    if not isinstance(obj, tvm.runtime.Object):
        return
    out.append(type(obj).__name__)
    info = getattr(type(obj), "__tvm_ffi_type_info__", None)
    while info is not None:
        for field in info.fields:
            _tir_node_types(getattr(obj, field.name, None), out, depth + 1)
        info = getattr(info, "parent_type_info", None)


def _elementwise_kind(view: DataflowView, value) -> str | None:
    """ "max" / "min" when `value` is call_tir of a TIR max(x, scalar) / min(x, scalar)."""
    if getattr(getattr(value, "op", None), "name", "") != "relax.call_tir" or view.mod is None:
        return None
    func = view.mod.functions.get(value.args[0])
    args = value.args[1].fields if isinstance(value.args[1], relax.Tuple) else []
    if not isinstance(func, tvm.tirx.PrimFunc) or len(func.params) != 3 or len(args) != 2:
        return None
    if view.scalar(args[1]) is None or str(value.ty) != str(args[0].ty):
        return None
    return _body_kind(func)


_KINDS: dict[int, str | None] = {}  # PrimFunc (by structural hash) -> what its body computes


def _body_kind(func) -> str | None:
    """ "max" / "min" when the PrimFunc's only arithmetic is one T.max / T.min (memoised: a
    QDQ model calls the same PrimFunc at every Clip, and the reflective walk is slow)."""
    key = compat.structural_hash(func)
    if key not in _KINDS:
        types: list[str] = []
        _tir_node_types(func.body, types)
        arithmetic = [t for t in types if t in _ARITHMETIC]
        _KINDS[key] = {("Max",): "max", ("Min",): "min"}.get(tuple(arithmetic))
    return _KINDS[key]


def _find_clip(value, view: DataflowView, var2val: dict):
    kind = _elementwise_kind(view, value)
    if kind is None:
        return None
    x, bound = value.args[1].fields
    found = {"x": x, kind: view.scalar(bound)}
    inner = var2val.get(x) if isinstance(x, relax.Var) else None
    inner_kind = _elementwise_kind(view, inner) if inner is not None else None
    if inner_kind is not None and inner_kind != kind:
        x, bound = inner.args[1].fields
        found.update({"x": x, inner_kind: view.scalar(bound)})
    return found


def _check(match: Match) -> str | None:
    lo, hi = match.found.get("max", -math.inf), match.found.get("min", math.inf)
    return f"attribute out of range: lower bound {lo} above upper bound {hi}" if lo > hi else None


def _build(match: Match):
    x, lo, hi = match.found["x"], match.found.get("max"), match.found.get("min")
    if hi is None and lo == 0.0:
        return relax.op.nn.relu(x), None, "nn.relu"
    lo, hi = -math.inf if lo is None else lo, math.inf if hi is None else hi
    return relax.op.clip(x, lo, hi), None, f"clip({lo:g}, {hi:g})"


RULES = (Rule("clip", _find_clip, ("x",), _check, _build, needs=frozenset({"relax.call_tir"})),)


def clip(mod: tvm.IRModule, options: PassOptions) -> tvm.IRModule:
    """call_tir(maximum) -> call_tir(minimum) with constant bounds => clip / relu."""
    return run_rules(mod, RULES, PASS_NAME)
