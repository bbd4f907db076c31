"""Frontend step: the integer ops of dynamically quantised models, as standard ONNX ops.

onnxruntime's `quantize_dynamic` writes DynamicQuantizeLinear -> ConvInteger / MatMulInteger
-> Cast -> Mul (scales) [-> Add (bias)], and its optimiser fuses the MatMul chain into the
com.microsoft ops DynamicQuantizeMatMul and MatMulIntegerToFloat (and a float Conv with its
activation into FusedConv). TVM's importer converts none of them correctly, so each
becomes the standard ops that compute it exactly (these run on the CPU; the VPU runs
static int8):

    MatMulInteger(A, B, za, zb)   ->  MatMul(int32(A) - za, int32(B) - zb)         int32, exact
    ConvInteger(X, W, zx, zw)     ->  int32(Conv(float64(X) - zx, float64(W) - zw))
                                      exact: every partial sum is an integer below 2^53
    MatMulIntegerToFloat(A, B, sa, sb, za, zb, bias)
                                  ->  float(MatMulInteger(A, B, za, zb)) * (sa * sb) [+ bias]
    DynamicQuantizeMatMul(A, B, sb, zb, bias)
                                  ->  DynamicQuantizeLinear(A) -> MatMulIntegerToFloat
    FusedConv(X, W, B, activation=act)  ->  act(Conv(X, W, B))

A per-row zero point of A (one per row, 1-D) is reshaped to a column so it broadcasts along
rows; a per-column zero point of B broadcasts along columns as it is. The new nodes are
named `<node>/<part>`, so reports still name the node they came from.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS_DOMAIN = "com.microsoft"
FUSED_ACTIVATIONS = {"Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "HardSigmoid"}


def decompose_integer_ops(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[tuple[str, str]]]:
    """(the model with every op above decomposed, [(node name, op type)] decomposed)."""
    targets = [n for n in model.graph.node if _rule(n) is not None]
    if not targets:
        return model, []
    writer = _Writer(model)
    done = rewrite_nodes(model, writer, lambda node: (rule := _rule(node)) and rule(writer, node))
    _import_opset(model)
    return model, done


def _rule(node: onnx.NodeProto):
    if node.domain in ("", "ai.onnx"):
        return {"MatMulInteger": _matmul_integer, "ConvInteger": _conv_integer}.get(node.op_type)
    if node.domain == MS_DOMAIN:
        return {
            "MatMulIntegerToFloat": _matmul_integer_to_float,
            "DynamicQuantizeMatMul": _dynamic_quantize_matmul,
            "FusedConv": _fused_conv,
        }.get(node.op_type)
    return None


def rewrite_nodes(model: onnx.ModelProto, writer: _Writer, rewrite) -> list[tuple[str, str]]:
    """Each node in its place or, where `rewrite(node)` gives nodes, those; the writer's
    constants added. [(node name, op type)] of the nodes rewritten."""
    nodes, done = [], []
    for node in model.graph.node:
        written = rewrite(node)
        if not written:
            nodes.append(node)
            continue
        nodes.extend(written)
        done.append((node.name, node.op_type))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.graph.initializer.extend(writer.initializers)
    return done


class _Writer:
    """Fresh tensor names and constants for the nodes a rule writes."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.taken = {t for n in model.graph.node for t in [*n.input, *n.output]}
        self.taken |= {t.name for t in model.graph.initializer} | {i.name for i in model.graph.input}
        self.constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        self.initializers: list[onnx.TensorProto] = []

    def name(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name

    def node(
        self, op: str, inputs: list[str], owner: onnx.NodeProto, part: str, out: str | None = None, **attrs
    ):
        label = owner.name or owner.output[0]
        output = out or self.name(f"{label}/{part}")
        return helper.make_node(op, inputs, [output], name=f"{label}/{part}", **attrs), output

    def constant(self, base: str, value: np.ndarray) -> str:
        name = self.name(base)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name


def _arg(node: onnx.NodeProto, index: int) -> str:
    return node.input[index] if len(node.input) > index else ""


def _centered(w: _Writer, node, data: str, zero: str, dtype: int, part: str, per_row: bool) -> list:
    """Cast(data) - Cast(zero) in `dtype` (the zero point as a column when per row)."""
    cast, value = w.node("Cast", [data], node, f"{part}_cast", to=dtype)
    if not zero:
        return [(cast, value)]
    zero_value = w.constants.get(zero)
    steps = [(cast, value)]
    zero_cast, zero_name = w.node("Cast", [zero], node, f"{part}_zero_cast", to=dtype)
    steps.append((zero_cast, zero_name))
    if per_row and (zero_value is None or zero_value.ndim == 1 and zero_value.size > 1):
        shape = w.constant(f"{part}_zero_column", np.array([-1, 1], np.int64))
        column, zero_name = w.node("Reshape", [zero_name, shape], node, f"{part}_zero_column")
        steps.append((column, zero_name))
    sub, out = w.node("Sub", [value, zero_name], node, f"{part}_centered")
    steps.append((sub, out))
    return steps


def _matmul_int32(w: _Writer, node, a, b, za, zb, out: str | None = None):
    a_steps = _centered(w, node, a, za, TensorProto.INT32, "a", per_row=True)
    b_steps = _centered(w, node, b, zb, TensorProto.INT32, "b", per_row=False)
    matmul, result = w.node("MatMul", [a_steps[-1][1], b_steps[-1][1]], node, "matmul", out=out)
    return [n for n, _ in a_steps + b_steps] + [matmul], result


def _matmul_integer(w: _Writer, node: onnx.NodeProto) -> list:
    nodes, _ = _matmul_int32(
        w, node, node.input[0], node.input[1], _arg(node, 2), _arg(node, 3), node.output[0]
    )
    return nodes


def _conv_integer(w: _Writer, node: onnx.NodeProto) -> list:
    x_steps = _centered(w, node, node.input[0], _arg(node, 2), TensorProto.DOUBLE, "x", per_row=False)
    w_steps = _centered(w, node, node.input[1], _arg(node, 3), TensorProto.DOUBLE, "w", per_row=False)
    if len(w_steps) > 1:
        # the weight zero point as a column over O of OIHW: per output channel when it has
        # one value per channel (known only at run time when it is a graph input; a scalar
        # or a single value broadcasts the same way). Not reshaped, a [O] zero point would
        # broadcast along W (ONNX's node test convinteger_with_padding).
        shape = w.constant("w_zero_shape", np.array([-1] + [1] * (_rank(w, node.input[1]) - 1), np.int64))
        reshape, zero_name = w.node("Reshape", [w_steps[1][1], shape], node, "w_zero_per_channel")
        sub, centered = w.node("Sub", [w_steps[0][1], zero_name], node, "w_centered")
        w_steps = [w_steps[0], w_steps[1], (reshape, zero_name), (sub, centered)]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    conv, result = w.node("Conv", [x_steps[-1][1], w_steps[-1][1]], node, "conv", **attrs)
    cast, _ = w.node("Cast", [result], node, "to_int32", out=node.output[0], to=TensorProto.INT32)
    return [n for n, _ in x_steps + w_steps] + [conv, cast]


def _rank(w: _Writer, name: str) -> int:
    value = w.constants.get(name)
    return value.ndim if value is not None else 4


def _to_float(w: _Writer, node, product: str, scales: list[str], bias: str, out: str) -> list:
    cast, value = w.node("Cast", [product], node, "to_float", to=TensorProto.FLOAT)
    nodes = [cast]
    scale_mul, scale = w.node("Mul", scales, node, "scales")
    scaled, value = w.node("Mul", [value, scale], node, "scaled", out=None if bias else out)
    nodes += [scale_mul, scaled]
    if bias:
        add, _ = w.node("Add", [value, bias], node, "bias", out=out)
        nodes.append(add)
    return nodes


def _matmul_integer_to_float(w: _Writer, node: onnx.NodeProto) -> list:
    a, b, sa, sb = node.input[0], node.input[1], node.input[2], node.input[3]
    nodes, product = _matmul_int32(w, node, a, b, _arg(node, 4), _arg(node, 5))
    return nodes + _to_float(w, node, product, [sa, sb], _arg(node, 6), node.output[0])


def _dynamic_quantize_matmul(w: _Writer, node: onnx.NodeProto) -> list:
    label = node.name or node.output[0]
    quantized, scale, zero = (w.name(f"{label}/a_{part}") for part in ("quantized", "scale", "zero"))
    dql = helper.make_node(
        "DynamicQuantizeLinear", [node.input[0]], [quantized, scale, zero], name=f"{label}/quantize_a"
    )
    nodes, product = _matmul_int32(w, node, quantized, node.input[1], zero, _arg(node, 3))
    return [dql, *nodes, *_to_float(w, node, product, [scale, node.input[2]], _arg(node, 4), node.output[0])]


def _fused_conv(w: _Writer, node: onnx.NodeProto) -> list:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    activation = attrs.pop("activation", b"")
    activation = activation.decode() if isinstance(activation, bytes) else str(activation)
    params = attrs.pop("activation_params", [])
    if activation and activation not in FUSED_ACTIVATIONS:
        return [node]  # the support check names it
    conv, value = w.node(
        "Conv", list(node.input[:3]), node, "conv", out=None if activation else node.output[0], **attrs
    )
    if not activation:
        return [conv]
    return [conv, *_activation(w, node, activation, list(params), value)]


def _activation(w: _Writer, node, activation: str, params: list[float], value: str) -> list:
    out = node.output[0]
    if activation == "Clip":
        low = w.constant("clip_min", np.array(params[0] if params else -np.inf, np.float32))
        high = w.constant("clip_max", np.array(params[1] if len(params) > 1 else np.inf, np.float32))
        return [w.node("Clip", [value, low, high], node, "clip", out=out)[0]]
    attrs = {}
    if activation == "LeakyRelu" and params:
        attrs["alpha"] = params[0]
    if activation == "HardSigmoid" and params:
        attrs["alpha"], attrs["beta"] = params[0], params[1]
    return [w.node(activation, [value], node, activation.lower(), out=out, **attrs)[0]]


def _import_opset(model: onnx.ModelProto) -> None:
    """The decompositions use only default-domain ops; drop com.microsoft when unused."""
    if not any(n.domain == MS_DOMAIN for n in model.graph.node):
        kept = [o for o in model.opset_import if o.domain != MS_DOMAIN]
        del model.opset_import[:]
        model.opset_import.extend(kept)
