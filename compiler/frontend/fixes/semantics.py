"""Fixes of semantics: ONNX attributes or edge cases TVM's importer ignores or gets wrong,
rewritten into ONNX it converts right (frontend/fixes/__init__.py lists them)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from vpuc.compiler.frontend.fixes.rewrite import FLOATS, Rewrite, attributes, make, reduce_mean, remake


def layer_norm_stats(node, ctx: Rewrite, label: str):
    """Y stays a LayerNormalization; Mean and InvStdDev, when read, are computed here."""
    stats = [o for o in node.output[1:] if o and o in ctx.used]
    if not stats:
        return None
    attrs = attributes(node)
    x = node.input[0]
    rank = len(ctx.shapes[x])
    axis = attrs.get("axis", -1) % rank
    axes = list(range(axis, rank))
    eps = np.float32(attrs.get("epsilon", 1e-5))
    nodes = [remake(node, list(node.input), [node.output[0]])]
    if ctx.types[x] != TensorProto.FLOAT:  # statistics are in stash_type, float32
        nodes.append(make(ctx, label, "Cast", [x], to=TensorProto.FLOAT))
        x = nodes[-1].output[0]
    mean_name = node.output[1] if len(node.output) > 1 and node.output[1] else ctx.fresh(f"{label}/mean")
    nodes.append(reduce_mean(ctx, label, x, axes))
    nodes[-1].output[0] = mean_name
    if len(node.output) > 2 and node.output[2] in ctx.used:
        centred = make(ctx, label, "Sub", [x, mean_name])
        square = make(ctx, label, "Mul", [centred.output[0], centred.output[0]])
        var = reduce_mean(ctx, label, square.output[0], axes)
        shifted = make(ctx, label, "Add", [var.output[0], ctx.const(eps, f"{label}/eps")])
        root = make(ctx, label, "Sqrt", [shifted.output[0]])
        inv = make(ctx, label, "Reciprocal", [root.output[0]], [node.output[2]])
        nodes += [centred, square, var, shifted, root, inv]
    return nodes


def is_inf_flags(node, ctx: Rewrite, label: str):
    attrs = attributes(node)
    positive, negative = attrs.get("detect_positive", 1), attrs.get("detect_negative", 1)
    if positive and negative:
        return None
    x = node.input[0]
    both = make(ctx, label, "IsInf", [x])
    zero = ctx.const(np.zeros((), ctx.elem_np(x)), f"{label}/zero")
    if positive or negative:
        side = make(ctx, label, "Greater" if positive else "Less", [x, zero])
    else:  # neither: nothing is detected
        side = make(ctx, label, "Not", [both.output[0]])
    return [both, side, make(ctx, label, "And", [both.output[0], side.output[0]], [node.output[0]])]


def space_to_depth_crd(node, ctx: Rewrite, label: str):
    attrs = attributes(node)
    mode = attrs.get("mode", b"DCR")
    if (mode.decode() if isinstance(mode, bytes) else mode) != "CRD":
        return None
    n, c, h, w = ctx.shapes[node.input[0]]
    b = attrs["blocksize"]
    split = ctx.const(np.array([n, c, h // b, b, w // b, b], np.int64), f"{label}/split")
    merged = ctx.const(np.array([n, c * b * b, h // b, w // b], np.int64), f"{label}/merged")
    first = make(ctx, label, "Reshape", [node.input[0], split])
    moved = make(ctx, label, "Transpose", [first.output[0]], perm=[0, 1, 3, 5, 2, 4])
    return [first, moved, make(ctx, label, "Reshape", [moved.output[0], merged], [node.output[0]])]


def bit_shift_range(node, ctx: Rewrite, label: str):
    """z = 0 <= y < bits ? BitShift(x, y) : (RIGHT and x < 0 ? -1 : 0)."""
    x, y = node.input
    dtype = ctx.elem_np(x)
    right = attributes(node).get("direction", b"LEFT") in (b"RIGHT", "RIGHT")
    zero = ctx.const(np.zeros((), dtype), f"{label}/zero")
    shifted = remake(node, [x, y], [ctx.fresh(f"{label}/shifted")])
    bits = ctx.const(np.array(dtype.itemsize * 8, dtype), f"{label}/bits")
    in_range = make(ctx, label, "Less", [y, bits])
    nodes = [shifted, in_range]
    if dtype.kind == "i":  # a signed shift amount may be negative: out of range too
        y_negative = make(ctx, label, "Less", [y, zero])
        y_ok = make(ctx, label, "Not", [y_negative.output[0]])
        in_range = make(ctx, label, "And", [in_range.output[0], y_ok.output[0]])
        nodes += [y_negative, y_ok, in_range]
    fill = zero
    if right and dtype.kind == "i":  # the sign bit fills a right shift of a negative x
        x_negative = make(ctx, label, "Less", [x, zero])
        minus_one = ctx.const(np.array(-1, dtype), f"{label}/minus_one")
        sign_fill = make(ctx, label, "Where", [x_negative.output[0], minus_one, zero])
        nodes += [x_negative, sign_fill]
        fill = sign_fill.output[0]
    nodes.append(make(ctx, label, "Where", [in_range.output[0], shifted.output[0], fill], [node.output[0]]))
    return nodes


def float_mod_by_infinity(node, ctx: Rewrite, label: str):
    """numpy's mod(x, +-inf) for finite x: x when x is 0 or has y's sign, else y."""
    if attributes(node).get("fmod", 0) != 0 or ctx.types.get(node.input[0]) not in FLOATS:
        return None
    x, y = node.input
    zero = ctx.const(np.zeros((), ctx.elem_np(x)), f"{label}/zero")
    mod = remake(node, [x, y], [ctx.fresh(f"{label}/mod")])
    y_inf = make(ctx, label, "IsInf", [y])
    x_inf = make(ctx, label, "IsInf", [x])
    x_finite = make(ctx, label, "Not", [x_inf.output[0]])
    x_zero = make(ctx, label, "Equal", [x, zero])
    x_neg = make(ctx, label, "Less", [x, zero])
    y_neg = make(ctx, label, "Less", [y, zero])
    signs_differ = make(ctx, label, "Xor", [x_neg.output[0], y_neg.output[0]])  # (TVM: no bool Equal)
    same_sign = make(ctx, label, "Not", [signs_differ.output[0]])
    keep_x = make(ctx, label, "Or", [x_zero.output[0], same_sign.output[0]])
    by_inf = make(ctx, label, "And", [y_inf.output[0], x_finite.output[0]])
    edge = make(ctx, label, "Where", [keep_x.output[0], x, y])
    out = make(ctx, label, "Where", [by_inf.output[0], edge.output[0], mod.output[0]], [node.output[0]])
    return [
        mod, y_inf, x_inf, x_finite, x_zero, x_neg, y_neg, signs_differ, same_sign, keep_x, by_inf, edge, out
    ]  # fmt: skip


def dropout_inference(node, ctx: Rewrite, label: str):
    """Inference Dropout: y = x; the mask, if read, all true. Training mode is refused."""
    training = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if training is not None and (
        training not in ctx.constants or numpy_helper.to_array(ctx.constants[training]).any()
    ):
        return None  # frontend/support.py refuses it
    nodes = [helper.make_node("Identity", [node.input[0]], [node.output[0]], name=node.name)]
    if len(node.output) > 1 and node.output[1] in ctx.used:
        mask = np.ones(ctx.shapes[node.input[0]], dtype=bool)
        nodes.append(make(ctx, label, "Identity", [ctx.const(mask, f"{label}/mask")], [node.output[1]]))
    return nodes


def conv_transpose_output_shape(node, ctx: Rewrite, label: str):
    """output_shape larger than the natural output (pads 0) -> output_padding, as the ONNX
    reference computes it; a smaller one is refused by frontend/support.py."""
    attrs = attributes(node)
    if "output_shape" not in attrs:
        return None
    padding = conv_transpose_padding(node, ctx.shapes)
    if padding is None:
        return None
    attrs.pop("output_shape")
    attrs.pop("auto_pad", None)
    attrs["pads"] = [0] * (2 * len(padding))
    attrs["output_padding"] = padding
    return [remake(node, list(node.input), list(node.output), **attrs)]


def conv_transpose_padding(node, shapes) -> list[int] | None:
    """The output_padding that makes ConvTranspose's output `output_shape` (pads 0); None
    when it cannot: a smaller output, or padding of a stride or more (TVM's limit)."""
    attrs = attributes(node)
    x, w = shapes.get(node.input[0]), shapes.get(node.input[1])
    if x is None or w is None or any(attrs.get("pads", [])):
        return None
    spatial = len(x) - 2
    out_shape = list(attrs["output_shape"])[-spatial:]
    strides = attrs.get("strides", [1] * spatial)
    dilations = attrs.get("dilations", [1] * spatial)
    output_padding = attrs.get("output_padding", [0] * spatial)
    kernel = attrs.get("kernel_shape", w[2:])
    natural = [
        strides[i] * (x[2 + i] - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1
        for i in range(spatial)
    ]
    padding = [p + o - n for p, o, n in zip(output_padding, out_shape, natural, strict=True)]
    if any(p < 0 or p >= s for p, s in zip(padding, strides, strict=True)):
        return None
    return padding


def pow_mixed_types(node, ctx: Rewrite, label: str):
    x, y = node.input
    if ctx.types.get(x) not in FLOATS or ctx.types.get(y) in (None, ctx.types[x]):
        return None
    cast = make(ctx, label, "Cast", [y], to=ctx.types[x])
    return [cast, remake(node, [x, cast.output[0]], list(node.output))]


def clip_integer_bounds(node, ctx: Rewrite, label: str):
    x = node.input[0]
    dtype = ctx.elem_np(x) if x in ctx.types else None
    if dtype is None or dtype.kind not in "iu":
        return None
    given = list(node.input[1:]) + [""] * (3 - len(node.input))
    if all(given):
        return None
    info = np.iinfo(dtype)
    low = given[0] or ctx.const(np.array(info.min, dtype), f"{label}/min")
    high = given[1] or ctx.const(np.array(info.max, dtype), f"{label}/max")
    return [remake(node, [x, low, high], list(node.output))]
