"""Fixes of numerics: where TVM's code for an op loses precision or a limit that ONNX keeps
(frontend/fixes/__init__.py lists them)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto

from vpuc.compiler.frontend.fixes.rewrite import FLOATS, Rewrite, attributes, make, remake


def extreme_reduction(node, ctx: Rewrite, label: str):
    """ReduceMax/ReduceMin: bools through uint8; floats: where the result is the finite limit
    TVM starts from and no element equals it, the infinity (the answer for all -inf/+inf)."""
    x = node.input[0]
    if ctx.types.get(x) == TensorProto.BOOL:
        return _through_uint8(node, ctx, label)
    if ctx.types.get(x) not in FLOATS or 0 in (ctx.shapes.get(x) or (0,)):
        return None  # empty: refused by frontend/support.py
    dtype = ctx.elem_np(x)
    is_max = node.op_type == "ReduceMax"
    info = ml_dtypes.finfo(dtype)  # numpy's finfo has no bfloat16
    limit = ctx.const(np.array(info.min if is_max else info.max, dtype), f"{label}/limit")
    raw = remake(node, list(node.input), [ctx.fresh(f"{label}/raw")])
    at_limit = make(ctx, label, "Equal", [raw.output[0], limit])
    hits = make(ctx, label, "Equal", [x, limit])
    hits_f = make(ctx, label, "Cast", [hits.output[0]], to=ctx.types[x])
    any_hit = make(ctx, label, "ReduceMax", [hits_f.output[0], *node.input[1:]], **attributes(node))
    real = make(ctx, label, "Greater", [any_hit.output[0], ctx.const(np.zeros((), dtype), f"{label}/zero")])
    not_real = make(ctx, label, "Not", [real.output[0]])
    infinite = make(ctx, label, "And", [at_limit.output[0], not_real.output[0]])
    inf = ctx.const(np.array(-np.inf if is_max else np.inf, dtype), f"{label}/inf")
    out = make(ctx, label, "Where", [infinite.output[0], inf, raw.output[0]], [node.output[0]])
    return [raw, at_limit, hits, hits_f, any_hit, real, not_real, infinite, out]


def _through_uint8(node, ctx: Rewrite, label: str):
    as_int = make(ctx, label, "Cast", [node.input[0]], to=TensorProto.UINT8)
    reduced = make(ctx, label, node.op_type, [as_int.output[0], *node.input[1:]], **attributes(node))
    back = make(ctx, label, "Cast", [reduced.output[0]], [node.output[0]], to=TensorProto.BOOL)
    return [as_int, reduced, back]


def softplus_precise(node, ctx: Rewrite, label: str, output: str | None = None):
    """softplus(x) = x < -4 ? u (1 - u (1/2 - u/3)), u = e^x : Softplus(x) (error < u^4/4)."""
    x = node.input[0]
    if ctx.types.get(x) not in FLOATS:
        return None
    dtype = ctx.elem_np(x)

    def c(value, name):
        return ctx.const(np.array(value, dtype), f"{label}/{name}")

    u = make(ctx, label, "Exp", [x])
    third = make(ctx, label, "Mul", [u.output[0], c(1 / 3, "third")])
    half_less = make(ctx, label, "Sub", [c(0.5, "half"), third.output[0]])
    times_u = make(ctx, label, "Mul", [u.output[0], half_less.output[0]])
    one_less = make(ctx, label, "Sub", [c(1.0, "one"), times_u.output[0]])
    series = make(ctx, label, "Mul", [u.output[0], one_less.output[0]])
    direct = make(ctx, label, "Softplus", [x])
    small = make(ctx, label, "Less", [x, c(-4.0, "minus4")])
    out = [output or node.output[0]]
    chosen = make(ctx, label, "Where", [small.output[0], series.output[0], direct.output[0]], out)
    return [u, third, half_less, times_u, one_less, series, direct, small, chosen]


def mish_precise(node, ctx: Rewrite, label: str):
    """mish(x) = x tanh(softplus(x)), with the precise softplus."""
    softplus = softplus_precise(node, ctx, label, output=ctx.fresh(f"{label}/softplus"))
    if softplus is None:
        return None
    tanh = make(ctx, label, "Tanh", [softplus[-1].output[0]])
    return [*softplus, tanh, make(ctx, label, "Mul", [node.input[0], tanh.output[0]], [node.output[0]])]


def float16_in_float32(node, ctx: Rewrite, label: str):
    """Cast the float16 inputs to float32, compute, cast the outputs back."""
    if not any(ctx.types.get(i) == TensorProto.FLOAT16 for i in node.input if i):
        return None
    nodes, inputs = [], []
    for tensor in node.input:
        if tensor and ctx.types.get(tensor) == TensorProto.FLOAT16:
            nodes.append(make(ctx, label, "Cast", [tensor], to=TensorProto.FLOAT))
            tensor = nodes[-1].output[0]
        inputs.append(tensor)
    wide = [ctx.fresh(f"{label}/float32") for _ in node.output]
    nodes.append(remake(node, inputs, wide))
    for output, value in zip(node.output, wide, strict=True):
        nodes.append(make(ctx, label, "Cast", [value], [output], to=TensorProto.FLOAT16))
    return nodes
