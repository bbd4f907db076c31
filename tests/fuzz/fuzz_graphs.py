"""Hypothesis strategies for valid random ONNX graphs (float32, opset 17).

A graph starts from one input of random rank and shape (batch 1-3) and grows a few ops, each
drawn among those valid for the tensor at hand: Conv (kernel, stride, pads, dilation,
groups, auto_pad), MaxPool/AveragePool (ceil_mode, count_include_pad, dilation), global
pooling, BatchNormalization, MobileNetV3's hard-swish (HardSigmoid and Mul, HardSwish, or
PyTorch's x * Clip(x + 3, 0, 6) / 6) and squeeze-excite block (GlobalAveragePool, two 1x1
Convs, HardSigmoid, a per-channel Mul), elementwise binaries with broadcasting (a constant, a second
graph input or an earlier tensor), activations, Softmax, Gemm/MatMul, the views (Flatten,
Reshape, Squeeze, Unsqueeze), Transpose, Concat, Slice, Pad, Reduce*; and, one graph in four,
a classifier's head at the end (Flatten, Gemm, Softmax over the classes). Output shapes come from ONNX's own shape inference
(onnx.shape_inference.infer_node_outputs), so the generator never second-guesses the spec.
Weights come from a seeded numpy generator: hypothesis shrinks the structure and the seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from fuzz_views import concat, flatten, pad, reduce, reshape, slice_, squeeze, transpose, unsqueeze
from hypothesis import strategies as st
from onnx import TensorProto, defs, helper, numpy_helper, shape_inference

OPSET = 17
MAX_ELEMENTS = 4096  # per tensor: keeps every example fast
UNARY = {
    "Relu": {}, "Sigmoid": {}, "Tanh": {}, "Abs": {}, "Neg": {}, "Softsign": {}, "Softplus": {},
    "LeakyRelu": {"alpha": (0.01, 0.3)}, "Elu": {"alpha": (0.5, 1.5)}, "Selu": {},
    "HardSigmoid": {"alpha": (0.1, 0.3), "beta": (0.3, 0.6)}, "HardSwish": {}, "Erf": {},
}  # fmt: skip
BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min")


@dataclass
class Graph:
    """A graph being grown: nodes, initializers, inputs, and every tensor's shape."""

    rng: np.random.Generator
    quantizable: bool = False  # only what onnxruntime's quantize_static handles
    nodes: list = field(default_factory=list)
    initializers: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    shapes: dict = field(default_factory=dict)
    order: list = field(default_factory=list)  # activations, in creation order

    def name(self, prefix: str) -> str:
        return f"{prefix}{len(self.shapes)}"

    def const(self, array: np.ndarray, prefix: str = "w") -> str:
        name = self.name(prefix)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        self.shapes[name] = tuple(np.shape(array))
        return name

    def input(self, shape: tuple[int, ...]) -> str:
        name = f"in{len(self.inputs)}"
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        self.shapes[name] = tuple(shape)
        self.order.append(name)
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str | None:
        """Add `op`; its output's shape by ONNX shape inference. None if the node is invalid
        or its output is empty or too large (the strategy then draws another op)."""
        out = self.name(op.lower()[:4])
        node = helper.make_node(op, inputs, [out], name=f"{op}_{len(self.nodes)}", **attrs)
        types = {
            i: helper.make_tensor_type_proto(TensorProto.FLOAT, list(self.shapes[i])) for i in inputs if i
        }
        data = {t.name: t for t in self.initializers if t.name in inputs and t.data_type == TensorProto.INT64}
        for t in self.initializers:
            if t.name in inputs:
                types[t.name] = helper.make_tensor_type_proto(t.data_type, list(t.dims))
        try:
            inferred = shape_inference.infer_node_outputs(defs.get_schema(op, OPSET), node, types, data)
            dims = inferred[out].tensor_type.shape.dim
            shape = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in dims)
        except Exception:  # the spec rejects this combination
            return None
        if len(dims) == 0:  # 0-d tensors: the node tests cover them, the fuzzer keeps rank >= 1
            return None
        if any(d <= 0 for d in shape) or int(np.prod(shape)) > MAX_ELEMENTS:
            return None
        self.nodes.append(node)
        self.shapes[out] = shape
        self.order.append(out)
        return out

    def model(self, outputs: list[str]) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            "fuzz",
            self.inputs,
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, list(self.shapes[o])) for o in outputs],
            self.initializers,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        return model


def weights(g: Graph, shape, fan_in: int) -> np.ndarray:
    return (g.rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))).astype(np.float32)


# --- ops: each takes (draw, graph, x) and returns the new tensor or None -----------------------


def conv(draw, g: Graph, x: str):
    n, c, h, w = g.shapes[x]
    groups = draw(st.sampled_from(sorted({1, c, *[d for d in range(2, c) if c % d == 0]})))
    out_c = groups * draw(st.integers(1, max(1, 8 // groups)))
    # kernels and pads past the conv limits too (KWS: 10x4, pads [4, 1, 5, 1]): sub-kernels
    kh, kw = draw(st.one_of(st.integers(1, 5), st.integers(6, 12))), draw(st.integers(1, 5))
    attrs = {
        "kernel_shape": [kh, kw],
        "strides": [draw(st.integers(1, 3)), draw(st.integers(1, 3))],
        "dilations": [draw(st.integers(1, 3)), draw(st.integers(1, 3))],
        "group": groups,
    }
    auto_pad = draw(st.sampled_from(["NOTSET"] * 6 + ["SAME_UPPER", "SAME_LOWER", "VALID"]))
    if auto_pad == "NOTSET":
        attrs["pads"] = [draw(st.integers(0, limit)) for limit in (6, 3, 6, 3)]
        if not _window_fits((h, w), attrs["kernel_shape"], attrs["dilations"], attrs["pads"]):
            return None
    else:
        attrs["auto_pad"] = auto_pad
        if auto_pad != "VALID":  # onnxruntime: "Dilation not supported for SAME_UPPER/LOWER"
            attrs["dilations"] = [1, 1]
        elif not _window_fits((h, w), attrs["kernel_shape"], attrs["dilations"], [0, 0, 0, 0]):
            return None  # onnxruntime rejects what shape inference accepts (found by the fuzzer)
    inputs = [x, g.const(weights(g, (out_c, c // groups, kh, kw), c // groups * kh * kw))]
    if draw(st.booleans()):
        inputs.append(g.const(weights(g, (out_c,), 1), "b"))
    return g.node("Conv", inputs, **attrs)


def pool(draw, g: Graph, x: str):
    op = draw(st.sampled_from(["MaxPool", "AveragePool"]))
    # windows past the pool limits too (KWS: a 25x5 average pool over the whole map)
    kh, kw = draw(st.one_of(st.integers(1, 4), st.integers(9, 25))), draw(st.integers(1, 4))
    attrs = {
        "kernel_shape": [kh, kw],
        "strides": [draw(st.integers(1, 3)), draw(st.integers(1, 3))],
        "pads": [draw(st.integers(0, k - 1)) for k in (kh, kw, kh, kw)],
        "ceil_mode": draw(st.integers(0, 1)),
    }
    if op == "AveragePool":
        attrs["count_include_pad"] = draw(st.integers(0, 1))
    elif draw(st.booleans()):
        attrs["dilations"] = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    dilations = attrs.get("dilations", [1, 1])
    if not _window_fits(g.shapes[x][2:], [kh, kw], dilations, attrs["pads"]):
        return None
    if attrs["ceil_mode"] and _ceil_window_in_padding(g.shapes[x][2:], [kh, kw], dilations, attrs):
        return None
    return g.node(op, [x], **attrs)


def _ceil_window_in_padding(spatial, kernel, dilations, attrs) -> bool:
    """ceil_mode's extra window starting past the input and its begin padding: onnxruntime
    drops it (as PyTorch does), ONNX's shape inference for opset 17 keeps it, so the
    model's own output shape is in dispute. The fuzzer leaves such models out."""
    pads, strides = attrs["pads"], attrs["strides"]
    for i, (s, k, d) in enumerate(zip(spatial, kernel, dilations, strict=True)):
        span = s + pads[i] + pads[i + 2] - ((k - 1) * d + 1)
        out = -(-span // strides[i]) + 1
        if (out - 1) * strides[i] >= s + pads[i]:
            return True
    return False


def _window_fits(spatial, kernel, dilations, pads) -> bool:
    """The dilated window fits in the padded input (ONNX's shape inference rounds a negative
    quotient towards zero and accepts what onnxruntime rejects)."""
    n = len(spatial)
    return all(
        (k - 1) * d + 1 <= s + pads[i] + pads[i + n]
        for i, (s, k, d) in enumerate(zip(spatial, kernel, dilations, strict=True))
    )


def global_pool(draw, g: Graph, x: str):
    return g.node(draw(st.sampled_from(["GlobalAveragePool", "GlobalMaxPool"])), [x])


def batch_norm(draw, g: Graph, x: str):
    c = g.shapes[x][1]
    params = [
        g.const((1 + 0.2 * g.rng.standard_normal(c)).astype(np.float32), "gamma"),
        g.const((0.2 * g.rng.standard_normal(c)).astype(np.float32), "beta"),
        g.const((0.2 * g.rng.standard_normal(c)).astype(np.float32), "mean"),
        g.const(g.rng.uniform(0.5, 2.0, c).astype(np.float32), "var"),
    ]
    return g.node("BatchNormalization", [x, *params], epsilon=draw(st.sampled_from([1e-5, 1e-3])))


def unary(draw, g: Graph, x: str):
    op = draw(st.sampled_from(sorted(UNARY)))
    attrs = {k: draw(st.floats(lo, hi)) for k, (lo, hi) in UNARY[op].items()}
    return g.node(op, [x], **attrs)


def hard_swish(draw, g: Graph, x: str):
    """x * HardSigmoid(x) in the three forms exporters write (MobileNetV3, PP-OCR)."""
    form = draw(st.sampled_from(["hardsigmoid_mul", "hardswish", "clip_div"]))
    if form == "hardswish":
        return g.node("HardSwish", [x])
    if form == "hardsigmoid_mul":
        gate = g.node("HardSigmoid", [x], alpha=1 / 6, beta=0.5)
    else:
        shifted = g.node("Add", [x, g.const(np.float32(3.0), "c")])
        clipped = shifted and g.node(
            "Clip", [shifted, g.const(np.float32(0.0), "lo"), g.const(np.float32(6.0), "hi")]
        )
        gate = clipped and g.node("Div", [clipped, g.const(np.float32(6.0), "c")])
    return gate and g.node("Mul", [x, gate])


def squeeze_excite(draw, g: Graph, x: str):
    """GlobalAveragePool -> 1x1 Conv -> Relu -> 1x1 Conv -> HardSigmoid -> Mul with x, the
    gate broadcast over H and W (MobileNetV3's SE block; Paddle's slope 0.2)."""
    c = g.shapes[x][1]
    squeezed = max(1, c // draw(st.sampled_from([1, 2, 4])))
    pooled = g.node("GlobalAveragePool", [x])
    w1, b1 = g.const(weights(g, (squeezed, c, 1, 1), c)), g.const(weights(g, (squeezed,), 1), "b")
    hidden = pooled and g.node("Conv", [pooled, w1, b1])
    hidden = hidden and g.node("Relu", [hidden])
    w2, b2 = g.const(weights(g, (c, squeezed, 1, 1), squeezed)), g.const(weights(g, (c,), 1), "b")
    scale = hidden and g.node("Conv", [hidden, w2, b2])
    alpha = draw(st.sampled_from([0.2, 1 / 6]))
    gate = scale and g.node("HardSigmoid", [scale], alpha=alpha, beta=0.5)
    return gate and g.node("Mul", [x, gate])


def clip(draw, g: Graph, x: str):
    lo = draw(st.floats(-2.0, 0.5))
    hi = lo + draw(st.floats(0.1, 3.0))
    inputs = [x, g.const(np.float32(lo), "lo"), g.const(np.float32(hi), "hi")]
    return g.node("Clip", inputs[: draw(st.integers(2, 3))])


def softmax(draw, g: Graph, x: str):
    rank = len(g.shapes[x])
    op = draw(st.sampled_from(["Softmax", "LogSoftmax"]))
    return g.node(op, [x], axis=draw(st.integers(-rank, rank - 1)))


def softmax_head(draw, g: Graph, x: str) -> str:
    """A classifier's head, as tf2onnx exports and onnxruntime quantises it: [Flatten] ->
    Gemm to 2-12 classes -> Softmax over them (the last axis); x itself when it does not fit."""
    if len(g.shapes[x]) != 2:
        flat = g.node("Flatten", [x], axis=1)
        if flat is None:
            return x
        x = flat
    k = g.shapes[x][1]
    classes = draw(st.integers(2, 12))
    inputs = [x, g.const(weights(g, (k, classes), k)), g.const(weights(g, (classes,), 1), "bias")]
    logits = g.node("Gemm", inputs)
    if logits is None:
        return x
    return g.node("Softmax", [logits], axis=-1) or logits


def broadcast_shape(draw, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts to `shape`: trailing dims each kept or set to 1."""
    keep = draw(st.integers(0, len(shape)))
    tail = shape[len(shape) - keep :]
    return tuple(d if draw(st.booleans()) else 1 for d in tail)


def binary(draw, g: Graph, x: str):
    op = draw(st.sampled_from(BINARY))
    shape = g.shapes[x]
    source = draw(st.sampled_from(["const", "input", "tensor"]))
    if source == "tensor":
        same = [t for t in g.order if g.shapes[t] == shape and t != x]
        if not same:
            return None
        other = draw(st.sampled_from(same))
        if op == "Div":  # keep the divisor away from zero
            other = _away_from_zero(g, other)
    else:
        other_shape = broadcast_shape(draw, shape)
        if source == "input":
            other = g.input(other_shape)
            if op == "Div":
                other = _away_from_zero(g, other)
        else:
            values = g.rng.uniform(0.5, 2.0, other_shape) * g.rng.choice([-1, 1], other_shape)
            other = g.const(values.astype(np.float32), "c")
    if other is None:
        return None
    swap = op != "Div" and draw(st.booleans())
    return g.node(op, [other, x] if swap else [x, other])


def _away_from_zero(g: Graph, t: str) -> str | None:
    """|t| + 0.5 (None if the shape is rejected)."""
    magnitude = g.node("Abs", [t])
    return None if magnitude is None else g.node("Add", [magnitude, g.const(np.float32(0.5), "c")])


def gemm(draw, g: Graph, x: str):
    n, k = g.shapes[x]
    m = draw(st.integers(1, 16))
    # onnxruntime's quantiser takes only a 1-D bias [M] (it fails on the others)
    bias_shapes = [(m,)] if g.quantizable else [(m,), (1, m), (n, m), (n, 1), ()]
    trans_b = draw(st.integers(0, 1))
    b = g.const(weights(g, (m, k) if trans_b else (k, m), k))
    inputs = [x, b]
    if draw(st.booleans()):
        c_shape = draw(st.sampled_from(bias_shapes))
        inputs.append(g.const(weights(g, c_shape, 1), "bias"))
    alpha = draw(st.sampled_from([1.0, 0.5, 2.0]))
    beta = draw(st.sampled_from([1.0, 0.5]))
    return g.node("Gemm", inputs, transB=trans_b, alpha=alpha, beta=beta)


def matmul(draw, g: Graph, x: str):
    shape = g.shapes[x]
    k = shape[-1]
    kind = draw(st.sampled_from(["weight", "weight", "vector", "self"]))
    if kind == "self" and len(shape) >= 2:  # x @ x^T (batched): two activations
        perm = list(range(len(shape)))
        perm[-1], perm[-2] = perm[-2], perm[-1]
        transposed = g.node("Transpose", [x], perm=perm)
        return None if transposed is None else g.node("MatMul", [x, transposed])
    if kind == "vector":
        return g.node("MatMul", [x, g.const(weights(g, (k,), k))])
    return g.node("MatMul", [x, g.const(weights(g, (k, draw(st.integers(1, 16))), k))])


OPS_BY_RANK = {
    4: [conv, conv, pool, global_pool, batch_norm, flatten, squeeze_excite],
    2: [gemm, gemm],
}
ANY_RANK = [
    hard_swish,
    unary,
    unary,
    clip,
    binary,
    binary,
    softmax,
    matmul,
    reshape,
    squeeze,
    unsqueeze,
    transpose,
    concat,
    slice_,
    pad,
    reduce,
]


@st.composite
def float_graphs(draw, max_ops: int = 6, quantizable: bool = False) -> tuple[onnx.ModelProto, int]:
    """(model, seed): a valid float32 graph and the seed of its weights and inputs."""
    seed = draw(st.integers(0, 2**16))
    g = Graph(np.random.default_rng(seed), quantizable)
    rank = draw(st.sampled_from([4, 4, 4, 2, 3]))
    batch = draw(st.integers(1, 3))
    if rank == 4:
        shape = (batch, draw(st.integers(1, 8)), draw(st.integers(1, 12)), draw(st.integers(1, 12)))
    else:
        shape = (batch, *[draw(st.integers(1, 16)) for _ in range(rank - 1)])
    x = g.input(shape)
    for _ in range(draw(st.integers(1, max_ops))):
        choices = OPS_BY_RANK.get(len(g.shapes[x]), []) + ANY_RANK
        y = draw(st.sampled_from(choices))(draw, g, x)
        if y is not None:
            x = y
    if draw(st.integers(0, 3)) == 0:
        x = softmax_head(draw, g, x)
    outputs = [x]
    if len(g.order) > 2 and draw(st.integers(0, 3)) == 0:  # a second output from inside
        extra = draw(st.sampled_from(g.order[1:-1]))
        if extra not in [i.name for i in g.inputs]:
            outputs.append(extra)
    if not g.nodes:
        g.node("Relu", [x])
        outputs = [g.order[-1]]
    return g.model(outputs), seed


def random_inputs(model: onnx.ModelProto, seed: int, scale: float = 1.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed + 1)
    arrays = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        arrays[vi.name] = np.asarray(scale * rng.standard_normal(shape), dtype=np.float32)
    return arrays
