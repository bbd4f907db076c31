"""The layout conversion's rules (passes/layout_convert.py walks the graph; these convert one
call each): the permutations tensors carry, and per op whether it follows its input's layout,
converts, or keeps the layout it was written in (see layout_convert.py's docstring)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import tvm
from tvm import relax

from vpuc.compiler import compat

if TYPE_CHECKING:  # the converter imports these rules
    from vpuc.compiler.passes.layout_convert import _Converter

NHWC = (0, 2, 3, 1)  # physical NHWC of a logical NCHW tensor
OIHW_TO_OHWI = (0, 2, 3, 1)
Perm = tuple[int, ...] | None

UNARY = {
    "relax.nn.relu", "relax.clip", "relax.nn.leakyrelu", "relax.sigmoid", "relax.tanh",
    "relax.nn.silu", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.exp", "relax.negative",
    "relax.sqrt", "relax.rsqrt", "relax.abs", "relax.erf", "relax.astype", "relax.round",
    "relax.floor", "relax.ceil", "relax.log", "relax.square", "relax.nn.prelu",
}  # fmt: skip
BINARY = {
    "relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum",
    "relax.minimum", "relax.power",
}  # fmt: skip
REDUCE = {"relax.mean", "relax.sum", "relax.max", "relax.min"}
QDQ = {"relax.quantize", "relax.dequantize"}


def inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    out = [0] * len(perm)
    for index, axis in enumerate(perm):
        out[axis] = index
    return tuple(out)


def _norm(perm) -> Perm:
    perm = tuple(int(a) for a in perm)
    return None if perm == tuple(range(len(perm))) else perm


def typed_const(array: np.ndarray) -> relax.Expr:
    """A constant of the array's own dtype (relax.const alone makes float64 float32)."""
    return relax.const(np.ascontiguousarray(array), str(array.dtype))


def _op(expr) -> str:
    return expr.op.name if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) else ""


def _ndim(expr) -> int | None:
    ty = getattr(expr, "ty", None)
    return int(ty.ndim) if isinstance(ty, relax.TensorType) and ty.ndim >= 0 else None


# -- rules: call -> (expr, perm of the result) or None (keep as written) --------------------


def rule_for(call: relax.Call) -> Callable:
    op = _op(call)
    if op in UNARY:
        return _unary
    if op in BINARY:
        return _binary
    if op in REDUCE:
        return _reduce
    if op in QDQ:
        return _qdq
    return _RULES.get(op, lambda _c, _v: None)


def _call(call: relax.Call, args, **attrs) -> relax.Call:
    new_attrs = call.attrs
    if attrs:
        fields = {f: getattr(call.attrs, f) for f in _attr_fields(call.attrs)}
        fields.update(attrs)
        new_attrs = tvm.ir.make_node(call.attrs.__class__.__tvm_ffi_type_info__.type_key, **fields)
    return relax.Call(call.op, args, new_attrs, call.ty_args)


def _attr_fields(attrs) -> list[str]:
    names, info = [], type(attrs).__tvm_ffi_type_info__
    while info is not None:
        names += [f.name for f in info.fields]
        info = getattr(info, "parent_type_info", None)
    return names


def _unary(conv: _Converter, call: relax.Call):
    data, perm = call.args[0], conv.perm_of(call.args[0])
    if perm is None:
        return None
    rest = [conv.written(a) if isinstance(a, relax.Var) else a for a in call.args[1:]]
    if any(isinstance(a, relax.Var) for a in call.args[1:]):
        return None  # a run-time second operand (prelu's slope): keep
    return relax.Call(call.op, [data, *rest], call.attrs, call.ty_args), perm


def _qdq(conv: _Converter, call: relax.Call):
    data, perm = call.args[0], conv.perm_of(call.args[0])
    if perm is None:
        return None
    axis = int(call.attrs.axis) % len(perm)
    return _call(call, [data, *call.args[1:]], axis=perm.index(axis)), perm


def _binary(conv: _Converter, call: relax.Call):
    perms = [conv.perm_of(a) for a in call.args]
    target = next((p for p in perms if p is not None), None)
    if target is None:
        return None
    args = []
    for arg in call.args:
        ndim, array = _ndim(arg), compat.constant_array(arg)
        if array is not None and array.size == 1:
            args.append(arg)
        elif array is not None and array.ndim <= len(target):
            full = array.reshape((1,) * (len(target) - array.ndim) + array.shape)
            args.append(typed_const(np.transpose(full, target)))
        elif isinstance(arg, relax.Var) and ndim == len(target):
            args.append(conv.physical(arg, target))
        else:
            return None  # a run-time operand of another rank broadcasts: keep as written
    return relax.Call(call.op, args, call.attrs, call.ty_args), target


def _reduce(conv: _Converter, call: relax.Call):
    perm = conv.perm_of(call.args[0])
    if perm is None or call.attrs.axis is None:
        return None
    axes = sorted(perm.index(int(a) % len(perm)) for a in call.attrs.axis)
    new = _call(call, [call.args[0]], axis=axes)
    if call.attrs.keepdims:
        return new, perm
    kept = [logical for logical in perm if perm.index(logical) not in axes]
    return new, _rank_perm(kept)


def _squeeze(conv: _Converter, call: relax.Call):
    """squeeze(x, axis=a) follows: the physical axes p.index(a) go, the rest keep their
    physical order (1x1x1xC NHWC squeezed to 1xC is as written: no transpose back)."""
    perm = conv.perm_of(call.args[0])
    if perm is None or call.attrs.axis is None:
        return None
    axes = sorted(perm.index(int(a) % len(perm)) for a in call.attrs.axis)
    kept = [logical for logical in perm if perm.index(logical) not in axes]
    return _call(call, [call.args[0]], axis=axes), _rank_perm(kept)


def _rank_perm(kept: list[int]) -> Perm:
    """Physical order of the kept logical axes, renumbered 0..k-1."""
    order = sorted(kept)
    return _norm([order.index(axis) for axis in kept])


def _softmax(conv: _Converter, call: relax.Call):
    perm = conv.perm_of(call.args[0])
    if perm is None:
        return None
    return _call(call, [call.args[0]], axis=perm.index(int(call.attrs.axis) % len(perm))), perm


def _permute(conv: _Converter, call: relax.Call):
    """permute_dims(x, q): no op; the result is x's physical tensor, relabelled."""
    data = call.args[0]
    ndim = _ndim(data)
    if ndim is None or compat.constant_array(data) is not None:
        return None
    have = conv.perm_of(data) or tuple(range(ndim))
    axes = list(range(ndim))[::-1] if call.attrs.axes is None else [int(a) for a in call.attrs.axes]
    # logical_out = logical_in.permute(axes) = physical_in.permute(inverse(have)[axes])
    composed = [inverse(have)[a] for a in axes]
    return data, _norm(inverse(tuple(composed)))


def _concat(conv: _Converter, call: relax.Call):
    fields = list(call.args[0].fields) if isinstance(call.args[0], relax.Tuple) else None
    if fields is None:
        return None
    target = next((conv.perm_of(f) for f in fields if conv.perm_of(f) is not None), None)
    if target is None or any(_ndim(f) != len(target) for f in fields):
        return None
    moved = [conv.physical(f, target) for f in fields]
    axis = target.index(int(call.attrs.axis) % len(target))
    return _call(call, [relax.Tuple(moved)], axis=axis), target


def _pool(conv: _Converter, call: relax.Call):
    if conv.perm_of(call.args[0]) != NHWC or str(call.attrs.layout) != "NCHW":
        return None
    out_layout = str(call.attrs.out_layout)
    if out_layout != "NCHW":
        return None
    return _call(call, [call.args[0]], layout="NHWC", out_layout="NHWC"), NHWC


def _resize(conv: _Converter, call: relax.Call):
    if conv.perm_of(call.args[0]) != NHWC or str(call.attrs.layout) != "NCHW":
        return None
    return _call(call, [call.args[0], *call.args[1:]], layout="NHWC"), NHWC


def _pad(conv: _Converter, call: relax.Call):
    perm = conv.perm_of(call.args[0])
    if perm is None:
        return None
    width = [int(w) for w in call.attrs.pad_width]
    pairs = [width[2 * i : 2 * i + 2] for i in range(len(perm))]
    moved = [v for logical in perm for v in pairs[logical]]
    return _call(call, [call.args[0]], pad_width=moved), perm


def _conv2d(conv: _Converter, call: relax.Call):
    attrs = call.attrs
    if str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "OIHW":
        return None
    if str(attrs.out_layout) not in ("NCHW", ""):
        return None
    data = conv.physical(call.args[0], NHWC)
    weight = call.args[1]
    array = compat.constant_array(weight)
    if array is not None:
        weight = typed_const(np.transpose(array, OIHW_TO_OHWI))
    else:  # a dequantize of a constant (QDQ models): the QDQ cleanup folds this transpose
        weight = conv.physical(conv.written(weight), OIHW_TO_OHWI)
    new = relax.op.nn.conv2d(
        data, weight, strides=attrs.strides, padding=attrs.padding, dilation=attrs.dilation,
        groups=int(attrs.groups), data_layout="NHWC", kernel_layout="OHWI", out_layout="NHWC",
        out_dtype=attrs.out_dtype if str(attrs.out_dtype) else None,
    )  # fmt: skip
    return new, NHWC


def _batch_norm(conv: _Converter, call: relax.Call):
    perm = conv.perm_of(call.args[0])
    if perm is None:
        return None
    axis = perm.index(int(call.attrs.axis) % len(perm))
    return _call(call, list(call.args), axis=axis), [perm, None, None]


_RULES: dict[str, Callable] = {
    "relax.nn.batch_norm": _batch_norm,
    "relax.nn.softmax": _softmax,
    "relax.nn.log_softmax": _softmax,
    "relax.permute_dims": _permute,
    "relax.concat": _concat,
    "relax.nn.max_pool2d": _pool,
    "relax.nn.avg_pool2d": _pool,
    "relax.nn.adaptive_avg_pool2d": _pool,
    "relax.image.resize2d": _resize,
    "relax.nn.pad": _pad,
    "relax.nn.conv2d": _conv2d,
    "relax.squeeze": _squeeze,
}
