"""Frontend step: LSTMs unrolled over their static sequence, as standard ONNX ops.

TVM's Relax importer converts no LSTM, and onnxruntime's `quantize_dynamic` turns every LSTM
into com.microsoft.DynamicQuantizeLSTM (int8 weights with their scales and zero points).
Once the input shapes are fixed the sequence length is a number, so each such node becomes
the ops of its time steps (these run on the CPU, in float):

    DynamicQuantizeLSTM(X, W, R, B, seq_lens, h0, c0, P, sw, zw, sr, zr)
        W' = (W - zw) * sw   [D, input, 4H]      R' = (R - zr) * sr   [D, H, 4H]
        -> the LSTM below on W', R' (the weights as onnxruntime's kernel dequantises them;
           the kernel also quantises X and h to uint8 for each product, which adds at most
           half an activation step per input: that part is not reproduced)
    LSTM(X, W, R, B, seq_lens, h0, c0)      (float, W [D, 4H, input]: W' = W^T)
        per direction d, step t (reversed for the backward direction):
            g = X[t] @ W'[d] + h @ R'[d] + Wb[d] + Rb[d];  i, o, f, c~ = the four quarters of g
            c = sigmoid(f) * c + sigmoid(i) * tanh(c~);  h = sigmoid(o) * tanh(c)
        Y = [seq, D, batch, H] of every h, Y_h, Y_c = the last h and c of each direction

Supported: constant weights (a float LSTM's may also be graph inputs: Gather + Transpose
nodes; ONNX's node tests test_lstm_defaults, _reverse, _bidirectional, _with_initial_bias
pass), the default activations (sigmoid, tanh, tanh), no clip, no
coupled input-forget gate, no peepholes, layout 0, no sequence_lens (or one equal to the
sequence for every batch row). Any other LSTM is left as it is, so the support check names
it. New nodes are named `<node>/<direction>/t<step>/<part>`.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from vpuc.compiler.frontend.integer_ops import MS_DOMAIN, _Writer

LSTM_OPS = {("", "LSTM"), ("ai.onnx", "LSTM"), (MS_DOMAIN, "DynamicQuantizeLSTM")}
DEFAULT_ACTIVATIONS = [b"Sigmoid", b"Tanh", b"Tanh"]


def unroll_lstms(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[tuple[str, str]]]:
    """(the model with every supported LSTM unrolled, [(node name, op type)] unrolled). One
    node at a time: a stacked LSTM's input shape is known once the one before is unrolled."""
    unrolled: list[tuple[str, str]] = []
    while True:
        lstms = [n for n in model.graph.node if (n.domain, n.op_type) in LSTM_OPS]
        shapes = _shapes(model) if lstms else {}
        writer = _Writer(model)
        for index, node in enumerate(model.graph.node):  # noqa: B007 (used after the break)
            if (node.domain, node.op_type) not in LSTM_OPS:
                continue
            nodes = _unroll(writer, node, shapes)  # None: left as it is, the support check names it
            if nodes is not None:
                break
        else:
            return model, unrolled
        kept = [*model.graph.node[:index], *nodes, *model.graph.node[index + 1 :]]
        del model.graph.node[:]
        model.graph.node.extend(kept)
        model.graph.initializer.extend(writer.initializers)
        unrolled.append((node.name, node.op_type))


def _shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # inference is best effort here: an unknown shape leaves the node alone
        inferred = model
    shapes = {}
    for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        dims = vi.type.tensor_type.shape.dim
        if vi.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = [d.dim_value for d in dims]
    return shapes


def _unroll(w: _Writer, node: onnx.NodeProto, shapes: dict[str, list[int]]) -> list | None:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    weights = _weights(w, node)
    x_shape = shapes.get(node.input[0])
    if x_shape is None or len(x_shape) != 3 or not _plain(w, node, attrs, x_shape):
        return None
    in_graph = weights is None  # a float LSTM whose weights are inputs: Gather/Transpose nodes
    if in_graph and (node.op_type != "LSTM" or "hidden_size" not in attrs):
        return None
    hidden = int(attrs["hidden_size"]) if in_graph else weights[1].shape[1]
    directions = 2 if _direction(attrs) == "bidirectional" else 1
    seq, batch = x_shape[0], x_shape[1]
    bias = w.constants.get(_arg(node, 3)) if _arg(node, 3) else np.zeros((directions, 8 * hidden), np.float32)
    in_graph = in_graph or bias is None
    if in_graph and node.op_type != "LSTM":
        return None
    reverse = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[_direction(attrs)]
    nodes: list = []
    ys, last_h, last_c = [], [], []
    for d, backward in enumerate(reverse):
        step = _Direction(w, node, f"d{d}", hidden, batch)
        if in_graph:
            w_name, r_name, b_name = step.graph_weights(d)
        else:
            w_name = w.constant(f"{node.name}/d{d}/W", weights[0][d].astype(np.float32))
            r_name = w.constant(f"{node.name}/d{d}/R", weights[1][d].astype(np.float32))
            b_name = w.constant(
                f"{node.name}/d{d}/B", (bias[d, : 4 * hidden] + bias[d, 4 * hidden :]).astype(np.float32)
            )
        xw = step.op("MatMul", [node.input[0], w_name], "xw")
        xwb = step.op("Add", [xw, b_name], "xw_bias")
        h = step.initial(_arg(node, 5), d, "h0")
        c = step.initial(_arg(node, 6), d, "c0")
        outputs: dict[int, str] = {}
        for t in reversed(range(seq)) if backward else range(seq):
            h, c = step.cell(xwb, r_name, h, c, t)
            outputs[t] = step.op("Unsqueeze", [h, step.axes([0, 1])], f"t{t}/y")
        ys.append(step.op("Concat", [outputs[t] for t in range(seq)], "y", axis=0) if seq > 1 else outputs[0])
        last_h.append(step.op("Unsqueeze", [h, step.axes([0])], "y_h"))
        last_c.append(step.op("Unsqueeze", [c, step.axes([0])], "y_c"))
        nodes += step.nodes
    for k, parts in enumerate((ys, last_h, last_c)):
        out = node.output[k] if len(node.output) > k and node.output[k] else None
        if out is None:
            continue
        axis = 1 if k == 0 else 0
        nodes.append(helper.make_node("Concat", parts, [out], name=f"{node.name}/out{k}", axis=axis))
    return nodes


class _Direction:
    """The nodes of one direction's steps."""

    def __init__(self, w: _Writer, node: onnx.NodeProto, prefix: str, hidden: int, batch: int) -> None:
        self.w, self.node, self.prefix, self.hidden, self.batch = w, node, prefix, hidden, batch
        self.nodes: list[onnx.NodeProto] = []

    def op(self, op: str, inputs: list[str], part: str, **attrs) -> str:
        made, out = self.w.node(op, inputs, self.node, f"{self.prefix}/{part}", **attrs)
        self.nodes.append(made)
        return out

    def axes(self, values: list[int]) -> str:
        return self.w.constant(f"{self.node.name}/axes", np.array(values, np.int64))

    def graph_weights(self, d: int) -> tuple[str, str, str]:
        """W'[d] = W[d]^T, R'[d] = R[d]^T and Wb[d] + Rb[d], as nodes (weights as inputs)."""
        index = self.w.constant(f"{self.node.name}/direction", np.array(d, np.int64))
        w_t, r_t = (
            self.op(
                "Transpose", [self.op("Gather", [self.node.input[k], index], f"{part}", axis=0)], f"{part}_t"
            )
            for k, part in ((1, "W"), (2, "R"))
        )
        if not _arg(self.node, 3):
            return w_t, r_t, self.w.constant(f"{self.node.name}/B", np.zeros(4 * self.hidden, np.float32))
        bias = self.op("Gather", [self.node.input[3], index], "B", axis=0)
        axis = self.w.constant(f"{self.node.name}/axis", np.array([0], np.int64))
        halves = []
        for k in range(2):
            start = self.w.constant(f"{self.node.name}/start", np.array([k * 4 * self.hidden], np.int64))
            end = self.w.constant(f"{self.node.name}/end", np.array([(k + 1) * 4 * self.hidden], np.int64))
            halves.append(self.op("Slice", [bias, start, end, axis], f"B{k}"))
        return w_t, r_t, self.op("Add", halves, "B_sum")

    def initial(self, name: str, d: int, part: str) -> str:
        if not name:
            return self.w.constant(
                f"{self.node.name}/{part}", np.zeros((self.batch, self.hidden), np.float32)
            )
        index = self.w.constant(f"{self.node.name}/direction", np.array(d, np.int64))
        return self.op("Gather", [name, index], part, axis=0)

    def cell(self, xwb: str, r_name: str, h: str, c: str, t: int) -> tuple[str, str]:
        step = self.w.constant(f"{self.node.name}/step", np.array(t, np.int64))
        x_t = self.op("Gather", [xwb, step], f"t{t}/x", axis=0)
        gates = self.op("Add", [x_t, self.op("MatMul", [h, r_name], f"t{t}/hr")], f"t{t}/gates")
        quarter = [self._quarter(gates, k, t) for k in range(4)]  # i, o, f, c~
        i, o, f = (self.op("Sigmoid", [quarter[k]], f"t{t}/{g}") for k, g in enumerate("iof"))
        candidate = self.op("Tanh", [quarter[3]], f"t{t}/candidate")
        c = self.op(
            "Add",
            [self.op("Mul", [f, c], f"t{t}/keep"), self.op("Mul", [i, candidate], f"t{t}/write")],
            f"t{t}/c",
        )
        h = self.op("Mul", [o, self.op("Tanh", [c], f"t{t}/c_tanh")], f"t{t}/h")
        return h, c

    def _quarter(self, gates: str, k: int, t: int) -> str:
        start = self.w.constant(f"{self.node.name}/start", np.array([k * self.hidden], np.int64))
        end = self.w.constant(f"{self.node.name}/end", np.array([(k + 1) * self.hidden], np.int64))
        axis = self.w.constant(f"{self.node.name}/axis", np.array([1], np.int64))
        return self.op("Slice", [gates, start, end, axis], f"t{t}/gate{k}")


def _weights(w: _Writer, node: onnx.NodeProto) -> tuple[np.ndarray, np.ndarray] | None:
    """(W' [D, input, 4H], R' [D, H, 4H]) in float, or None when not constant."""
    weight, recurrent = w.constants.get(node.input[1]), w.constants.get(node.input[2])
    if weight is None or recurrent is None:
        return None
    if node.op_type == "LSTM":
        return weight.astype(np.float32).transpose(0, 2, 1), recurrent.astype(np.float32).transpose(0, 2, 1)
    params = [w.constants.get(_arg(node, k)) for k in (8, 9, 10, 11)]
    if any(p is None for p in params):
        return None
    return _dequantize(weight, params[0], params[1]), _dequantize(recurrent, params[2], params[3])


def _dequantize(q: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """(q - zero) * scale with a scale/zero point per direction [D] or per column [D, 4H]."""
    directions = q.shape[0]
    scale = np.asarray(scale, np.float32).reshape(directions, 1, -1)
    zero = np.asarray(zero).astype(np.float32).reshape(directions, 1, -1)
    return ((q.astype(np.float32) - zero) * scale).astype(np.float32)


def _plain(w: _Writer, node: onnx.NodeProto, attrs: dict, x_shape: list[int]) -> bool:
    """The configuration the unroll computes (see the module docstring)."""
    activations = attrs.get("activations")
    if activations is not None and list(activations) not in (DEFAULT_ACTIVATIONS, DEFAULT_ACTIVATIONS * 2):
        return False
    if "clip" in attrs or attrs.get("input_forget", 0) or attrs.get("layout", 0) or _arg(node, 7):
        return False
    if _direction(attrs) not in ("forward", "reverse", "bidirectional"):
        return False
    lengths = _arg(node, 4)
    if lengths:
        value = w.constants.get(lengths)
        if value is None or not np.all(value == x_shape[0]):
            return False
    return True


def _direction(attrs: dict) -> str:
    value = attrs.get("direction", b"forward")
    return value.decode() if isinstance(value, bytes) else str(value)


def _arg(node: onnx.NodeProto, index: int) -> str:
    return node.input[index] if len(node.input) > index else ""
