"""Graph pass: transpose and reshape cleanup, to a fixpoint.

    permute(permute(x, p), q)         =>  x                  when p[q] is the identity   transpose_cancel
                                      =>  permute(x, p[q])   otherwise                    transpose_merge
    permute(x, identity)              =>  x                                               transpose_cancel
    permute(x, p), p moving only unit axes  =>  reshape(x, shape)                         transpose_to_reshape
    reshape(reshape(x)) (squeeze, expand_dims, flatten alike)  =>  reshape(x)             reshape_cleanup
    reshape(x) to x's own shape       =>  x                                               reshape_cleanup
    a op broadcast_to(b, shape(a))    =>  a op b    (elementwise op, either side)          broadcast_elide
    f(permute(x, p)), f elementwise on one tensor (relu, clip, x * scalar, ...)
                                      =>  permute(f(x), p)                                 transpose_sink
    permute(dequantize(q, s, z, axis=a), p)  =>  dequantize(permute(q, p), s, z, p.index(a))  transpose_hoist

permute(permute(x, p), q)[i] = x[p[q[i]]], so the pair is one permute by p[q]; a permute
that only moves axes of extent 1 keeps the order of the elements, which is what a reshape
does; a reshape only reads the element order, so a chain of them is the last one; an
elementwise op broadcasts its operands itself, so an explicit broadcast to the other
operand's shape (an Expand the size guard kept from folding) adds nothing; an op applied
to each element alike commutes with any permutation, so a transpose moves past it towards
its inverse (ConvertLayout leaves one around each op it has no layout rule for, such as
clip and silu). A dequantize is elementwise too (its scale and zero point follow their
axis), so a transpose after it moves before it, onto the int8 tensor: an NCHW int8 model
input then reaches the first conv as int8 (the VPU subgraph takes it whole, and its DMA does
the layout change: lower/reader/edges.py) instead of as a float32 NHWC copy on the host.
The inner op may have other readers: it stays for them and nothing is computed twice
(transpose_sink only moves a transpose nothing else reads).

The transposes this cancels come from exporters (NHWC models converted to NCHW and back),
from attention fusion (its BSNH glue against the exporter's head split) and from the
layout pass (ConvertLayout's NHWC <-> NCHW at layout-sensitive ops).
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.dpl import is_op, wildcard

from vpuc.compiler.passes.audit import Audit
from vpuc.compiler.passes.options import PassOptions
from vpuc.compiler.passes.rewrite import Match, Rule, attrs_of, run_rules

PASS_NAME = "transpose_cleanup"
MAX_ROUNDS = 8
PERMUTE = "relax.permute_dims"
RESHAPE_LIKE = ("relax.reshape", "relax.squeeze", "relax.expand_dims", "relax.flatten")


def _axes(match: Match, expr) -> list[int]:
    value = match.view.value(expr)
    axes = attrs_of(value)["axes"]
    ndim = len(match.view.shape(value.args[0]))
    return list(range(ndim))[::-1] if axes is None else [int(a) % ndim for a in axes]


def _no_check(match: Match) -> str | None:
    return None


# -- permute(permute(x)) -----------------------------------------------------------------------

_px = wildcard()
_inner = is_op("relax.permute_dims")(_px)
_pair = is_op("relax.permute_dims")(_inner)


def _composed(match: Match) -> list[int]:
    first, second = _axes(match, match[_inner]), _axes(match, match.root)
    return [first[i] for i in second]


def _is_identity(axes: list[int]) -> bool:
    return axes == list(range(len(axes)))


def _build_pair(match: Match):
    axes = _composed(match)
    if _is_identity(axes):
        return match[_px], None, "nothing (inverse permutations cancel)"
    return relax.op.permute_dims(match[_px], axes), None, f"permute_dims {axes}"


def _pair_cancels(match: Match) -> bool:
    return _is_identity(_composed(match))


# -- single permutes ---------------------------------------------------------------------------

_sx = wildcard()
_single = is_op("relax.permute_dims")(_sx)


def _unit_moves_only(match: Match) -> bool:
    shape, axes = match.view.shape(match[_sx]), _axes(match, match.root)
    moved = [a for a in axes if shape[a] != 1]
    return not _is_identity(axes) and moved == sorted(moved)


def _build_identity(match: Match):
    return match[_sx], None, "nothing (identity permutation)"


def _build_unit_moves(match: Match):
    return relax.op.reshape(match[_sx], match.view.shape(match.root)), None, "reshape (only unit axes move)"


# -- reshapes ----------------------------------------------------------------------------------

_rx, _reshape_one = "x", "input"


def _op(value) -> str:
    return getattr(getattr(value, "op", None), "name", "") if isinstance(value, relax.Call) else ""


def _any_reshape(value, view, var2val):
    """A reshape-like op (matched by hand: dpl's call patterns fix the argument count)."""
    return {_reshape_one: value.args[0]} if _op(value) in RESHAPE_LIKE else None


def _reshape_chain(value, view, var2val):
    """reshape(reshape-like(x)): the inner op's input."""
    if _op(value) != "relax.reshape" or not isinstance(value.args[0], relax.Var):
        return None
    inner = var2val.get(value.args[0])
    return {_rx: inner.args[0]} if _op(inner) in RESHAPE_LIKE else None


def _same_shape(match: Match) -> bool:
    return match.view.shape(match[_reshape_one]) == match.view.shape(match.root)


def _build_drop(match: Match):
    return match[_reshape_one], None, "nothing (reshape to the same shape)"


def _build_reshape_chain(match: Match):
    return relax.op.reshape(match[_rx], match.view.shape(match.root)), None, "one reshape"


# -- broadcasts into elementwise ops ---------------------------------------------------------

ELEMENTWISE = (
    "relax.add",
    "relax.subtract",
    "relax.multiply",
    "relax.divide",
    "relax.maximum",
    "relax.minimum",
)


def _broadcast_operand(value, view, var2val):
    """op(a, broadcast_to(b)) or op(broadcast_to(b), a) with a already of the full shape."""
    if _op(value) not in ELEMENTWISE:
        return None
    out_shape = view.shape(value)
    for side in (0, 1):
        arg, other = value.args[side], value.args[1 - side]
        inner = var2val.get(arg) if isinstance(arg, relax.Var) else None
        if _op(inner) == "relax.broadcast_to" and view.shape(other) == out_shape:
            return {"a": other, "b": inner.args[0], "side": side, "op": value.op}
    return None


def _build_elide(match: Match):
    found = match.found
    args = [found["a"], found["b"]] if found["side"] == 1 else [found["b"], found["a"]]
    return relax.Call(found["op"], args), None, f"{found['op'].name} without the broadcast_to"


# -- transposes past elementwise ops ---------------------------------------------------------

UNARY = {
    "relax.nn.relu", "relax.clip", "relax.nn.leakyrelu", "relax.sigmoid", "relax.tanh",
    "relax.nn.silu", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.exp", "relax.negative",
    "relax.sqrt", "relax.abs", "relax.erf",
}  # fmt: skip


def _sinkable(value, view, var2val):
    """f(permute(x, p)) with f elementwise on that one tensor (other args scalars)."""
    op = _op(value)
    if op not in UNARY and op not in ELEMENTWISE:
        return None
    tensors = [a for a in value.args if isinstance(getattr(a, "ty", None), relax.TensorType)]
    moving = [a for a in tensors if view.scalar(a) is None]
    if len(moving) != 1 or not isinstance(moving[0], relax.Var):
        return None
    inner = var2val.get(moving[0])
    if _op(inner) != "relax.permute_dims" or len(view.consumers.get(moving[0], [])) != 1:
        return None
    if _op(var2val.get(inner.args[0])) == "relax.permute_dims":
        return None  # the permute pair cancels or merges first
    return {"x": inner.args[0], "permute": moving[0], "axes": inner.attrs.axes}


def _build_sink(match: Match):
    call, moved = match.view.value(match.root), match.found["permute"]
    args = [match.found["x"] if a.same_as(moved) else a for a in call.args]
    inner = relax.Call(call.op, args, call.attrs, call.ty_args)
    return relax.op.permute_dims(inner, match.found["axes"]), inner, f"{call.op.name} before the transpose"


def _hoistable(value, view, var2val):
    """permute(dequantize(q, ...), p) with the dequantize read by this permute alone."""
    if _op(value) != "relax.permute_dims" or not isinstance(value.args[0], relax.Var):
        return None
    inner = var2val.get(value.args[0])
    if _op(inner) != "relax.dequantize" or len(view.consumers.get(value.args[0], [])) != 1:
        return None
    if not isinstance(inner.args[0], relax.Var):
        return None  # a constant's dequantize: the constant folding moves it
    return {
        "q": inner.args[0],
        "scale": inner.args[1],
        "zero_point": inner.args[2],
        "axis": int(inner.attrs.axis),
        "dtype": str(inner.attrs.out_dtype),
    }


def _build_hoist(match: Match):
    found, axes = match.found, _axes(match, match.root)
    axis = axes.index(found["axis"] % len(axes))
    moved = relax.op.permute_dims(found["q"], axes)
    new = relax.op.dequantize(moved, found["scale"], found["zero_point"], axis, found["dtype"])
    return new, None, "the transpose before the dequantize (on the int8 tensor)"


def _rule(name, pattern, inputs, build, applies=None, needs=()) -> Rule:
    needs = frozenset(needs)  # what a function pattern needs (the prefilter, rewrite.py)
    return Rule(name, pattern, inputs, _no_check, build, applies=applies, shared_ok=True, needs=needs)


RULES = (
    _rule("transpose_cancel", _pair, (_px,), _build_pair, applies=_pair_cancels),
    _rule("transpose_merge", _pair, (_px,), _build_pair),
    _rule(
        "transpose_cancel", _single, (_sx,), _build_identity, applies=lambda m: _is_identity(_axes(m, m.root))
    ),
    # before transpose_to_reshape: a unit-axis permute of a dequantize (a 1-channel NCHW
    # input's layout change) moves onto the int8 tensor first, and becomes its reshape there
    _rule("transpose_hoist", _hoistable, ("q",), _build_hoist, needs=(PERMUTE, "relax.dequantize")),
    _rule("transpose_to_reshape", _single, (_sx,), _build_unit_moves, applies=_unit_moves_only),
    _rule("reshape_cleanup", _any_reshape, (_reshape_one,), _build_drop, applies=_same_shape),
    _rule("reshape_cleanup", _reshape_chain, (_rx,), _build_reshape_chain, needs=("relax.reshape",)),
    _rule("broadcast_elide", _broadcast_operand, ("a", "b"), _build_elide, needs=("relax.broadcast_to",)),
    _rule("transpose_sink", _sinkable, ("x",), _build_sink, needs=(PERMUTE,)),
)


def transpose_cleanup(mod: tvm.IRModule, options: PassOptions) -> tvm.IRModule:
    """Cancel inverse permutations, merge permute and reshape chains, drop identities."""
    for _ in range(MAX_ROUNDS):
        before = len(Audit.of(mod).entries)
        mod = run_rules(mod, RULES, PASS_NAME)
        if len(Audit.of(mod).entries) == before:
            break
    return mod
