"""Relax op -> OpView: what the target's support checks (targets/constraints.py) see.

The partitioner's pattern checks and its cost model both describe an op this way, so a
decision and its price always agree. Shapes are given in logical NCHW whatever the
tensor's layout; dtypes are the VPU's view: a float tensor that the quantiser will turn
into int8 counts as quantizable (float32), and a quantize/dequantize around an op is seen
through.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax

from vpuc.compiler import compat
from vpuc.targets.ops import OpView

# Relax op name -> VPU op kind (for matmul the second input decides: dense or matmul).
RELAX_KINDS: dict[str, str] = {
    "relax.nn.conv2d": "conv2d",
    "relax.matmul": "dense",
    "relax.nn.relu": "relu",
    "relax.clip": "clip",
    "relax.nn.max_pool2d": "max_pool2d",
    "relax.nn.avg_pool2d": "avg_pool2d",
    "relax.mean": "global_avg_pool",
    "relax.nn.adaptive_avg_pool2d": "global_avg_pool",
    "relax.add": "add",
    "relax.multiply": "mul",
    "relax.reshape": "reshape",
    "relax.flatten": "reshape",
    "relax.squeeze": "reshape",
    "relax.expand_dims": "reshape",
    "relax.concat": "concat",
    "relax.sigmoid": "sigmoid",
    "relax.tanh": "tanh",
    "relax.nn.leakyrelu": "leaky_relu",
    "relax.nn.gelu": "gelu",
    "relax.nn.gelu_tanh": "gelu",
    "relax.nn.silu": "silu",
    "relax.nn.softmax": "softmax",
}
QDQ_OPS = ("relax.quantize", "relax.dequantize")


def op_name(expr: relax.Expr) -> str | None:
    """`relax.nn.conv2d` for a call of that op; None for anything else."""
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
        return expr.op.name
    return None


def strip_qdq(expr: relax.Expr) -> relax.Expr:
    """The value behind any dequantize/quantize wrapping."""
    while op_name(expr) in QDQ_OPS:
        expr = expr.args[0]
    return expr


def inline_qdq(call: relax.Call, bound) -> relax.Call:
    """`call` with every var argument bound to a quantize/dequantize replaced by that call,
    recursively. Relax binds every call to a var, so in a QDQ module a conv's weight is a
    var bound to `dequantize(constant)`; the checks must see the constant behind it.
    `bound` maps vars to their values (relax.analysis.get_var2val)."""
    if not isinstance(call, relax.Call):
        return call
    args, changed = [], False
    for arg in call.args:
        value = bound.get(arg) if isinstance(arg, relax.Var) else None
        if op_name(value) in QDQ_OPS:
            arg, changed = inline_qdq(value, bound), True
        args.append(arg)
    if not changed:
        return call
    return relax.Call(call.op, args, call.attrs, call.ty_args, ret_ty=call.ty)


def is_constant_input(expr: relax.Expr) -> bool:
    return compat.is_constant(strip_qdq(expr))


def kind_of(call: relax.Call) -> str | None:
    """The VPU op kind that would run `call`, or None when no kind covers it."""
    name = op_name(call)
    kind = RELAX_KINDS.get(name or "")
    if kind == "dense" and not is_constant_input(call.args[1]):
        return "matmul"
    return kind


def op_view(
    call: relax.Call,
    name: str,
    activation: relax.Call | None = None,
    layout: str | None = None,
    bound=None,
) -> OpView:
    """Describe `call` (with the activation fused after it, if any) for the support checks.
    `layout` is the layout of its 4-D activations when the op has no layout attribute of its
    own (an add, a mean after the layout pass made the model NHWC); NCHW when None.
    `bound` ({var: value}) lets the view see through Q/DQ bindings of the arguments."""
    if bound is not None:
        call = inline_qdq(call, bound)
    kind = kind_of(call) or "unknown"
    layout = _layout(call, layout)
    tensor_args = [a for a in call.args if _tensor(a) is not None]
    inputs = tuple(_logical(_tensor(a), layout) for a in tensor_args)
    output = _logical(_tensor(call), layout)
    constants = tuple(is_constant_input(a) for a in tensor_args)
    attrs = _ATTRS.get(kind, _no_attrs)(call, layout)
    static = all(t is not None for t in (*[_tensor(a) for a in tensor_args], _tensor(call)))
    return OpView(
        kind=kind,
        name=name,
        inputs=inputs,
        output=output,
        constant_inputs=constants,
        attrs=attrs,
        activation=_activation_name(activation),
        static=static,
    )


def _tensor(expr: relax.Expr) -> tuple[tuple[int, ...], str] | None:
    info = compat.tensor_type(strip_qdq(expr))
    if info is None:
        return None
    shape, dtype = info
    return shape, "int8" if dtype in ("int8", "uint8") else dtype


# An NHWC axis as a logical NCHW axis.
NHWC_TO_NCHW_AXIS = {0: 0, 1: 2, 2: 3, 3: 1}


def _logical(info, layout: str) -> tuple[tuple[int, ...], str]:
    if info is None:
        return ((), "unknown")
    shape, dtype = info
    if len(shape) == 4 and layout == "NHWC":
        shape = (shape[0], shape[3], shape[1], shape[2])
    return shape, dtype


def _logical_axis(axis: int, rank: int, layout: str) -> int:
    axis %= max(rank, 1)
    return NHWC_TO_NCHW_AXIS[axis] if rank == 4 and layout == "NHWC" else axis


def _layout(call: relax.Call, default: str | None) -> str:
    attrs = call.attrs
    for field in ("data_layout", "layout"):
        value = getattr(attrs, field, None) if attrs is not None else None
        if value is not None:
            return str(value)
    return default or "NCHW"


def _ints(values) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _conv_attrs(call: relax.Call, layout: str) -> dict[str, Any]:
    attrs = call.attrs
    weight = _tensor(call.args[1])
    shape = weight[0] if weight else (1, 1, 1, 1)
    kernel_layout = str(attrs.kernel_layout)
    kh, kw = shape[kernel_layout.index("H")], shape[kernel_layout.index("W")]
    data = _logical(_tensor(call.args[0]), layout)[0]
    out = _logical(_tensor(call), layout)[0]
    return {
        "kernel": (kh, kw),
        "strides": _ints(attrs.strides),
        "padding": _ints(attrs.padding),
        "dilation": _ints(attrs.dilation),
        "groups": int(attrs.groups),
        "in_channels": data[1] if len(data) == 4 else 0,
        "out_channels": out[1] if len(out) == 4 else 0,
    }


def _dense_attrs(call: relax.Call, _layout: str) -> dict[str, Any]:
    data, weight = _tensor(call.args[0]), _tensor(call.args[1])
    k = data[0][-1] if data and data[0] else 0
    n = weight[0][-1] if weight and weight[0] else 0
    return {"in_channels": k, "out_channels": n}


def _pool_attrs(call: relax.Call, _layout: str) -> dict[str, Any]:
    attrs = call.attrs
    return {
        "pool": _ints(attrs.pool_size),
        "strides": _ints(attrs.strides),
        "padding": _ints(attrs.padding),
        "dilation": _ints(attrs.dilation),
    }


def _mean_attrs(call: relax.Call, layout: str) -> dict[str, Any]:
    if op_name(call) == "relax.nn.adaptive_avg_pool2d":
        return {"axes": (2, 3)}
    axes = call.attrs.axis
    rank = len(_tensor(call.args[0])[0]) if _tensor(call.args[0]) else 4
    axes = range(rank) if axes is None else axes
    return {"axes": tuple(sorted(_logical_axis(int(a), rank, layout) for a in axes))}


def _clip_attrs(call: relax.Call, _layout: str) -> dict[str, Any]:
    return {"min": compat.scalar_value(call.args[1]), "max": compat.scalar_value(call.args[2])}


def _concat_attrs(call: relax.Call, layout: str) -> dict[str, Any]:
    axis = call.attrs.axis
    rank = len(_tensor(call)[0]) if _tensor(call) else 1
    return {"axis": _logical_axis(int(axis) if axis is not None else 0, rank, layout)}


def _softmax_attrs(call: relax.Call, layout: str) -> dict[str, Any]:
    """`innermost`: whether the softmax axis is the innermost axis of the stored tensor."""
    rank = len(_tensor(call)[0]) if _tensor(call) else 1
    axis = int(call.attrs.axis) % max(rank, 1)
    return {"axis": _logical_axis(axis, rank, layout), "innermost": axis == rank - 1}


def _no_attrs(_call: relax.Call, _layout: str) -> dict[str, Any]:
    return {}


_ATTRS = {
    "conv2d": _conv_attrs,
    "dense": _dense_attrs,
    "matmul": _dense_attrs,
    "max_pool2d": _pool_attrs,
    "avg_pool2d": _pool_attrs,
    "global_avg_pool": _mean_attrs,
    "clip": _clip_attrs,
    "concat": _concat_attrs,
    "softmax": _softmax_attrs,
}


def _activation_name(activation: relax.Call | None) -> str | None:
    if activation is None:
        return None
    if op_name(activation) == "relax.nn.relu":
        return "relu"
    low, high = compat.scalar_value(activation.args[1]), compat.scalar_value(activation.args[2])
    return "relu6" if (low, high) == (0.0, 6.0) else f"clip({low:g}, {high:g})"
