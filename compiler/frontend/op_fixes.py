"""Frontend step 3b: rewrite the ONNX nodes TVM's importer converts wrongly into equivalent
ONNX that it converts right. Found by ONNX's own backend node tests (tests/onnx_node):
each of these gave a wrong answer without an error.

    LayerNormalization -> Mean, InvStdDev  the importer returns 0-d placeholders: computed
                                           here with ReduceMean (in float32, stash_type 1)
    IsInf(detect_positive/negative = 0)    the importer ignores the flags: And with x > 0 / x < 0
    SpaceToDepth(mode="CRD")               the importer ignores the mode: Reshape/Transpose
    BitShift by < 0 or >= the bit width    LLVM's shift is undefined there; ONNX says 0 (or -1
                                           for a negative x shifted right): a Where around it
    Mod(fmod=0) of floats by +-inf         TVM gives NaN; ONNX (numpy) gives x or y
    Dropout (inference)                    the mask comes back float32: Identity + all-true mask
    ConvTranspose(output_shape)            the importer ignores it: output_padding instead
    Pow(float x, int y)                    the importer refuses mixed types: Cast y to x's type

Each rewrite keeps the node's outputs' names, names new nodes after the node, and runs once
shapes are static and attribute-like inputs constant (after frontend/fold.py). Configurations
that cannot be rewritten are refused by frontend/support.py with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from vpuc.compiler.frontend.shapes import static_shapes

FLOATS = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16}


@dataclass
class Rewrite:
    """What a fixer sees of the model, and what it adds to it."""

    model: onnx.ModelProto
    shapes: dict[str, tuple[int, ...] | None]
    types: dict[str, int]
    constants: dict[str, onnx.TensorProto]
    used: set[str]
    opset: int
    new_initializers: list[onnx.TensorProto] = field(default_factory=list)
    _names: set[str] = field(default_factory=set)

    def fresh(self, base: str) -> str:
        name, n = base, 1
        while name in self._names:
            n += 1
            name = f"{base}_{n}"
        self._names.add(name)
        return name

    def const(self, array, base: str) -> str:
        name = self.fresh(base)
        self.new_initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def elem_np(self, tensor: str) -> np.dtype:
        return np.dtype(helper.tensor_dtype_to_np_dtype(self.types[tensor]))


Fixer = Callable[[onnx.NodeProto, Rewrite, str], list[onnx.NodeProto] | None]


def fix_ops(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[tuple[str, str]]]:
    """The model with every known-wrong conversion rewritten; and (node, op) rewritten."""
    ctx = _context(model)
    nodes, fixed = [], []
    for index, node in enumerate(model.graph.node):
        fixer = FIXERS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        label = node.name or f"#{index}:{node.output[0]}"
        replacement = fixer(node, ctx, label) if fixer else None
        if replacement is None:
            nodes.append(node)
        else:
            nodes.extend(replacement)
            fixed.append((label, node.op_type))
    if not fixed:
        return model, []
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(ctx.new_initializers)
    return out, fixed


def _context(model: onnx.ModelProto) -> Rewrite:
    graph = model.graph
    types = {t.name: t.data_type for t in graph.initializer}
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        if vi.type.HasField("tensor_type"):
            types[vi.name] = vi.type.tensor_type.elem_type
    used = {o.name for o in graph.output} | {i for n in graph.node for i in n.input}
    names = {t.name for t in graph.initializer} | {vi.name for vi in graph.input}
    names |= {o for n in graph.node for o in n.output} | {n.name for n in graph.node}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    constants = {t.name: t for t in graph.initializer}
    return Rewrite(model, static_shapes(model), types, constants, used, opset, _names=names)


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _node(ctx: Rewrite, label: str, op: str, inputs: list[str], outputs: list[str] | None = None, **attrs):
    outputs = outputs or [ctx.fresh(f"{label}/{op.lower()}")]
    return helper.make_node(op, inputs, outputs, name=ctx.fresh(f"{label}/{op}"), **attrs)


def _reduce_mean(ctx: Rewrite, label: str, x: str, axes: list[int]) -> onnx.NodeProto:
    if ctx.opset >= 18:
        return _node(ctx, label, "ReduceMean", [x, ctx.const(np.array(axes, np.int64), f"{label}/axes")])
    return _node(ctx, label, "ReduceMean", [x], axes=axes, keepdims=1)


# --- the fixers: (node, context, label) -> replacement nodes, or None to keep the node -------


def layer_norm_stats(node, ctx: Rewrite, label: str):
    """Y stays a LayerNormalization; Mean and InvStdDev, when read, are computed here."""
    stats = [o for o in node.output[1:] if o and o in ctx.used]
    if not stats:
        return None
    attrs = _attrs(node)
    x = node.input[0]
    rank = len(ctx.shapes[x])
    axis = attrs.get("axis", -1) % rank
    axes = list(range(axis, rank))
    eps = np.float32(attrs.get("epsilon", 1e-5))
    kept = helper.make_node(
        "LayerNormalization", list(node.input), [node.output[0]], name=node.name, **attrs
    )  # fmt: skip
    nodes = [kept]
    if ctx.types[x] != TensorProto.FLOAT:  # statistics are in stash_type, float32
        nodes.append(_node(ctx, label, "Cast", [x], to=TensorProto.FLOAT))
        x = nodes[-1].output[0]
    mean_name = node.output[1] if len(node.output) > 1 and node.output[1] else ctx.fresh(f"{label}/mean")
    nodes.append(_reduce_mean(ctx, label, x, axes))
    nodes[-1].output[0] = mean_name
    if len(node.output) > 2 and node.output[2] in ctx.used:
        centred = _node(ctx, label, "Sub", [x, mean_name])
        square = _node(ctx, label, "Mul", [centred.output[0], centred.output[0]])
        var = _reduce_mean(ctx, label, square.output[0], axes)
        shifted = _node(ctx, label, "Add", [var.output[0], ctx.const(eps, f"{label}/eps")])
        root = _node(ctx, label, "Sqrt", [shifted.output[0]])
        inv = _node(ctx, label, "Reciprocal", [root.output[0]], [node.output[2]])
        nodes += [centred, square, var, shifted, root, inv]
    return nodes


def is_inf_flags(node, ctx: Rewrite, label: str):
    attrs = _attrs(node)
    positive, negative = attrs.get("detect_positive", 1), attrs.get("detect_negative", 1)
    if positive and negative:
        return None
    x = node.input[0]
    both = _node(ctx, label, "IsInf", [x])
    zero = ctx.const(np.zeros((), ctx.elem_np(x)), f"{label}/zero")
    if positive or negative:
        side = _node(ctx, label, "Greater" if positive else "Less", [x, zero])
    else:  # neither: nothing is detected
        side = _node(ctx, label, "Not", [both.output[0]])
    return [both, side, _node(ctx, label, "And", [both.output[0], side.output[0]], [node.output[0]])]


def space_to_depth_crd(node, ctx: Rewrite, label: str):
    attrs = _attrs(node)
    mode = attrs.get("mode", b"DCR")
    if (mode.decode() if isinstance(mode, bytes) else mode) != "CRD":
        return None
    n, c, h, w = ctx.shapes[node.input[0]]
    b = attrs["blocksize"]
    split = ctx.const(np.array([n, c, h // b, b, w // b, b], np.int64), f"{label}/split")
    merged = ctx.const(np.array([n, c * b * b, h // b, w // b], np.int64), f"{label}/merged")
    first = _node(ctx, label, "Reshape", [node.input[0], split])
    moved = _node(ctx, label, "Transpose", [first.output[0]], perm=[0, 1, 3, 5, 2, 4])
    return [first, moved, _node(ctx, label, "Reshape", [moved.output[0], merged], [node.output[0]])]


def bit_shift_range(node, ctx: Rewrite, label: str):
    """z = 0 <= y < bits ? BitShift(x, y) : (RIGHT and x < 0 ? -1 : 0)."""
    x, y = node.input
    dtype = ctx.elem_np(x)
    right = _attrs(node).get("direction", b"LEFT") in (b"RIGHT", "RIGHT")
    zero = ctx.const(np.zeros((), dtype), f"{label}/zero")
    shifted = helper.make_node(
        "BitShift", [x, y], [ctx.fresh(f"{label}/shifted")], name=node.name, **_attrs(node)
    )  # fmt: skip
    bits = ctx.const(np.array(dtype.itemsize * 8, dtype), f"{label}/bits")
    in_range = _node(ctx, label, "Less", [y, bits])
    nodes = [shifted, in_range]
    if dtype.kind == "i":  # a signed shift amount may be negative: out of range too
        y_negative = _node(ctx, label, "Less", [y, zero])
        y_ok = _node(ctx, label, "Not", [y_negative.output[0]])
        in_range = _node(ctx, label, "And", [in_range.output[0], y_ok.output[0]])
        nodes += [y_negative, y_ok, in_range]
    fill = zero
    if right and dtype.kind == "i":  # the sign bit fills a right shift of a negative x
        x_negative = _node(ctx, label, "Less", [x, zero])
        minus_one = ctx.const(np.array(-1, dtype), f"{label}/minus_one")
        sign_fill = _node(ctx, label, "Where", [x_negative.output[0], minus_one, zero])
        nodes += [x_negative, sign_fill]
        fill = sign_fill.output[0]
    nodes.append(_node(ctx, label, "Where", [in_range.output[0], shifted.output[0], fill], [node.output[0]]))
    return nodes


def float_mod_by_infinity(node, ctx: Rewrite, label: str):
    """numpy's mod(x, +-inf) for finite x: x when x is 0 or has y's sign, else y."""
    if _attrs(node).get("fmod", 0) != 0 or ctx.types.get(node.input[0]) not in FLOATS:
        return None
    x, y = node.input
    zero = ctx.const(np.zeros((), ctx.elem_np(x)), f"{label}/zero")
    mod = helper.make_node("Mod", [x, y], [ctx.fresh(f"{label}/mod")], name=node.name, fmod=0)
    y_inf = _node(ctx, label, "IsInf", [y])
    x_inf = _node(ctx, label, "IsInf", [x])
    x_finite = _node(ctx, label, "Not", [x_inf.output[0]])
    x_zero = _node(ctx, label, "Equal", [x, zero])
    x_neg = _node(ctx, label, "Less", [x, zero])
    y_neg = _node(ctx, label, "Less", [y, zero])
    signs_differ = _node(ctx, label, "Xor", [x_neg.output[0], y_neg.output[0]])  # (TVM: no bool Equal)
    same_sign = _node(ctx, label, "Not", [signs_differ.output[0]])
    keep_x = _node(ctx, label, "Or", [x_zero.output[0], same_sign.output[0]])
    by_inf = _node(ctx, label, "And", [y_inf.output[0], x_finite.output[0]])
    edge = _node(ctx, label, "Where", [keep_x.output[0], x, y])
    out = _node(ctx, label, "Where", [by_inf.output[0], edge.output[0], mod.output[0]], [node.output[0]])
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
        nodes.append(_node(ctx, label, "Identity", [ctx.const(mask, f"{label}/mask")], [node.output[1]]))
    return nodes


def conv_transpose_output_shape(node, ctx: Rewrite, label: str):
    """output_shape larger than the natural output (pads 0) -> output_padding, as the ONNX
    reference computes it; a smaller one is refused by frontend/support.py."""
    attrs = _attrs(node)
    if "output_shape" not in attrs:
        return None
    padding = conv_transpose_padding(node, ctx.shapes)
    if padding is None:
        return None
    attrs.pop("output_shape")
    attrs.pop("auto_pad", None)
    attrs["pads"] = [0] * (2 * len(padding))
    attrs["output_padding"] = padding
    return [helper.make_node("ConvTranspose", list(node.input), list(node.output), name=node.name, **attrs)]


def conv_transpose_padding(node, shapes) -> list[int] | None:
    """The output_padding that makes ConvTranspose's output `output_shape` (pads 0); None
    when it cannot: a smaller output, or padding of a stride or more (TVM's limit)."""
    attrs = _attrs(node)
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
    cast = _node(ctx, label, "Cast", [y], to=ctx.types[x])
    return [cast, helper.make_node("Pow", [x, cast.output[0]], list(node.output), name=node.name)]


FIXERS: dict[str, Fixer] = {
    "LayerNormalization": layer_norm_stats,
    "IsInf": is_inf_flags,
    "SpaceToDepth": space_to_depth_crd,
    "BitShift": bit_shift_range,
    "Mod": float_mod_by_infinity,
    "Dropout": dropout_inference,
    "ConvTranspose": conv_transpose_output_shape,
    "Pow": pow_mixed_types,
}
