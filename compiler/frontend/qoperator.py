"""Frontend step: models in onnxruntime's QOperator format, as the QDQ models they stand for.

onnxruntime's `quantize_static(..., quant_format=QuantFormat.QOperator)` (and the ONNX model
zoo's int8 models) write each quantised op as one node that takes int8/uint8 tensors with
their scales and zero points: QLinearConv, QLinearMatMul (standard ONNX) and the
com.microsoft ops QGemm, QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu,
QLinearAveragePool, QLinearGlobalAveragePool, QLinearConcat and QLinearSoftmax. Each is the
float op between DequantizeLinear and QuantizeLinear nodes, which is the form the rest of
vpuc compiles (the quantised ops of a QDQ model):

    QLinearConv(x, sx, zx, w, sw, zw, sy, zy, B)
        ->  Q(Conv(DQ(x, sx, zx), DQ(w, sw, zw, axis 0), DQ(B, sx * sw, 0, axis 0)), sy, zy)
    QLinearMatMul(a, sa, za, b, sb, zb, sy, zy)
        ->  Q(MatMul(DQ(a, sa, za), DQ(b, sb, zb, axis -1)), sy, zy)
    QGemm(A, sa, za, B, sb, zb, C, sy, zy, alpha, transA, transB)
        ->  Q(Gemm(DQ(A), DQ(B), DQ(C, alpha * sa * sb, 0), alpha, beta 1), sy, zy)
            (no sy: the Gemm's float output is the node's output)
    QLinear<Op>(X, sx, zx, ..., sy, zy)
        ->  Q(<Op>(DQ(X, sx, zx), ...), sy, zy)

These are the computations onnxruntime's kernels define: an int32 accumulator of
(x - zx)(w - zw) plus the int32 bias, scaled by sx * sw / sy, rounded half to even, plus zy,
saturated (QGemm: the bias broadcast and added with weight 1 whatever its beta, the output
scale alpha * sa * sb). The bias's scale is a constant computed here in float32, as
onnxruntime's quantiser writes it in a QDQ model. Ops other than these that take the int8
tensors between them (MaxPool, Reshape, Flatten, Transpose ...) stay as they are: ONNX
defines them on int8 and uint8.

onnxruntime's quantiser writes com.microsoft QuantizeLinear / DequantizeLinear where the
model's opset lacks a type it uses (int4 weights below opset 21): the same ops, written
as the standard ones, int4 and uint4 constants widened to int8 and uint8 (the same values;
int16 stays int16: a 16-bit tensor's layers run on the host CPU).

The float op keeps the node's name, so reports name the node the user's model has; its
DequantizeLinear and QuantizeLinear parts are named `<node>/dq_<input>` and `<node>/q`.
A scale or zero point that is not a constant, or a QLinearAveragePool /
QLinearGlobalAveragePool with channels_last, is one line naming the node.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, version_converter

from vpuc.compiler.errors import FrontendError, first_line
from vpuc.compiler.frontend.integer_ops import MS_DOMAIN, _Writer, rewrite_nodes

# com.microsoft QLinear<Op>: the float op, and where the (tensor, scale, zero point) triples
# and the output's (scale, zero point) are among the inputs
_UNARY = {"QLinearSigmoid": "Sigmoid", "QLinearLeakyRelu": "LeakyRelu", "QLinearSoftmax": "Softmax"}
_BINARY = {"QLinearAdd": "Add", "QLinearMul": "Mul"}
_POOLS = {"QLinearAveragePool": "AveragePool", "QLinearGlobalAveragePool": "GlobalAveragePool"}
_SINGLE_INPUT = {**_UNARY, **_POOLS}  # (X, sx, zx, sy, zy)
# attributes of the com.microsoft op that are not the float op's
_DROPPED_ATTRS = {"channels_last", "opset"}


def rewrite_qoperator_ops(model: onnx.ModelProto, name: str) -> tuple[onnx.ModelProto, list[tuple[str, str]]]:
    """(the model with every QOperator node as its QDQ form, [(node name, op type)] rewritten)."""
    if not any(_rule(n) for n in model.graph.node):
        return model, []
    writer = _Writer(model)
    constants = dict(writer.constants)
    for node in model.graph.node:  # Constant nodes hold scales too (tf2onnx, the zoo's exports)
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            value = next((a for a in node.attribute if a.name == "value"), None)
            if value is not None:
                constants[node.output[0]] = onnx.numpy_helper.to_array(value.t)
    done = rewrite_nodes(
        model, writer, lambda node: (rule := _rule(node)) and rule(_Rewrite(writer, constants, node, name))
    )
    if not any(n.domain == MS_DOMAIN for n in model.graph.node):
        kept = [o for o in model.opset_import if o.domain != MS_DOMAIN]
        del model.opset_import[:]
        model.opset_import.extend(kept)
    return _at_least_opset_13(model, name), done


def _rule(node: onnx.NodeProto):
    if node.domain in ("", "ai.onnx"):
        return {"QLinearConv": _conv, "QLinearMatMul": _matmul}.get(node.op_type)
    if node.domain != MS_DOMAIN:
        return None
    if node.op_type in _SINGLE_INPUT:
        return _single_input
    if node.op_type in _BINARY:
        return _binary
    return {
        "QGemm": _gemm,
        "QLinearConcat": _concat,
        "QuantizeLinear": _contrib_qdq,
        "DequantizeLinear": _contrib_qdq,
    }.get(node.op_type)


class _Rewrite:
    """One QOperator node being written as DequantizeLinear -> op -> QuantizeLinear."""

    def __init__(self, writer: _Writer, constants: dict, node: onnx.NodeProto, model_name: str) -> None:
        self.w, self.constants, self.node, self.model_name = writer, constants, node, model_name
        self.label = node.name or node.output[0]
        self.nodes: list[onnx.NodeProto] = []

    def arg(self, index: int) -> str:
        return self.node.input[index] if len(self.node.input) > index else ""

    def constant(self, index: int, what: str) -> np.ndarray:
        value = self.constants.get(self.arg(index))
        if value is None:
            raise FrontendError(
                f"{self.model_name}: node '{self.label}' ({self.node.op_type}): its {what} "
                f"('{self.arg(index)}') is not a constant; vpuc needs quantisation parameters fixed "
                "at compile time"
            )
        return value

    def fixed(self, *names: str) -> None:
        """Each named scale or zero point is a constant (or one this rewrite made), else one line."""
        made = {t.name for t in self.w.initializers}
        for name in names:
            if name and name not in self.constants and name not in made:
                raise FrontendError(
                    f"{self.model_name}: node '{self.label}' ({self.node.op_type}): its scale or zero point "
                    f"'{name}' is not a constant; vpuc needs quantisation parameters fixed at compile time"
                )

    def dequantize(self, data: str, scale: str, zero: str, part: str, axis: int | None = None) -> str:
        self.fixed(scale, zero)
        inputs = [data, scale] + ([zero] if zero else [])
        attrs = {} if axis is None else {"axis": axis}
        node, out = self.w.node("DequantizeLinear", inputs, self.node, f"dq_{part}", **attrs)
        self.nodes.append(node)
        return out

    def op(self, op_type: str, inputs: list[str], quantized_output: bool = True, **attrs) -> str:
        """The float op, named as the node; quantised to the node's output by its last two inputs."""
        out = self.w.name(f"{self.label}/float") if quantized_output else self.node.output[0]
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=self.label, **attrs))
        return out

    def quantize(self, value: str, scale: str, zero: str) -> list[onnx.NodeProto]:
        self.fixed(scale, zero)
        inputs = [value, scale] + ([zero] if zero else [])
        node, _ = self.w.node("QuantizeLinear", inputs, self.node, "q", out=self.node.output[0])
        return [*self.nodes, node]

    def attrs(self) -> dict:
        return {
            a.name: helper.get_attribute_value(a) for a in self.node.attribute if a.name not in _DROPPED_ATTRS
        }

    def per_axis(self, index: int, what: str) -> bool:
        return self.constant(index, what).size > 1


def _conv(r: _Rewrite) -> list:
    x = r.dequantize(r.arg(0), r.arg(1), r.arg(2), "x")
    w = r.dequantize(r.arg(3), r.arg(4), r.arg(5), "w", axis=0 if r.per_axis(4, "weight scale") else None)
    inputs = [x, w]
    if r.arg(8):
        inputs.append(_bias(r, 8, r.constant(1, "input scale") * r.constant(4, "weight scale")))
    return r.quantize(r.op("Conv", inputs, **r.attrs()), r.arg(6), r.arg(7))


def _bias(r: _Rewrite, index: int, scale: np.ndarray) -> str:
    """DQ of the int32 bias at `index` by `scale` (float32, as onnxruntime's quantiser writes it)."""
    scale = np.asarray(scale, np.float32).reshape(-1)
    scale_name = r.w.constant(f"{r.label}/bias_scale", scale if scale.size > 1 else scale.reshape(()))
    zero = np.zeros(scale.shape if scale.size > 1 else (), np.int32)
    zero_name = r.w.constant(f"{r.label}/bias_zero_point", zero)
    return r.dequantize(r.arg(index), scale_name, zero_name, "bias", axis=0 if scale.size > 1 else None)


def _matmul(r: _Rewrite) -> list:
    if r.per_axis(1, "input a's scale"):
        raise FrontendError(
            f"{r.model_name}: node '{r.label}' (QLinearMatMul): a scale per row of input a is not supported "
            "(one scale for the tensor is)"
        )
    a = r.dequantize(r.arg(0), r.arg(1), r.arg(2), "a")
    b = r.dequantize(r.arg(3), r.arg(4), r.arg(5), "b", axis=-1 if r.per_axis(4, "input b's scale") else None)
    return r.quantize(r.op("MatMul", [a, b]), r.arg(6), r.arg(7))


def _gemm(r: _Rewrite) -> list:
    attrs = r.attrs()
    alpha = float(attrs.get("alpha", 1.0))
    attrs["beta"] = 1.0  # onnxruntime's QGemm adds C with weight 1 whatever its beta
    b_per_column = r.per_axis(4, "input b's scale")
    a = r.dequantize(r.arg(0), r.arg(1), r.arg(2), "a")
    b_axis = (0 if attrs.get("transB", 0) else 1) if b_per_column else None
    b = r.dequantize(r.arg(3), r.arg(4), r.arg(5), "b", axis=b_axis)
    inputs = [a, b]
    if r.arg(6):
        product = np.float32(alpha) * r.constant(1, "input a's scale").astype(np.float32)
        inputs.append(_bias(r, 6, product * r.constant(4, "input b's scale").astype(np.float32)))
    quantized = bool(r.arg(7))
    out = r.op("Gemm", inputs, quantized_output=quantized, **attrs)
    return r.quantize(out, r.arg(7), r.arg(8)) if quantized else r.nodes


def _single_input(r: _Rewrite) -> list:
    attrs = {a.name: helper.get_attribute_value(a) for a in r.node.attribute}
    why = None
    if r.node.op_type == "QLinearSoftmax" and attrs.get("opset", 13) < 13:
        why = (
            f"opset {attrs['opset']}'s softmax over the input flattened to 2-D is not supported "
            "(opset 13's, over one axis, is)"
        )
    elif attrs.get("channels_last", 0):
        why = "channels_last=1 is not supported (the NCHW form is)"
    if why:
        raise FrontendError(f"{r.model_name}: node '{r.label}' ({r.node.op_type}): {why}")
    x = r.dequantize(r.arg(0), r.arg(1), r.arg(2), "x")
    return r.quantize(r.op(_SINGLE_INPUT[r.node.op_type], [x], **r.attrs()), r.arg(3), r.arg(4))


def _binary(r: _Rewrite) -> list:
    a = r.dequantize(r.arg(0), r.arg(1), r.arg(2), "a")
    b = r.dequantize(r.arg(3), r.arg(4), r.arg(5), "b")
    return r.quantize(r.op(_BINARY[r.node.op_type], [a, b]), r.arg(6), r.arg(7))


def _concat(r: _Rewrite) -> list:
    triples = [r.node.input[i : i + 3] for i in range(2, len(r.node.input), 3)]
    parts = [r.dequantize(x, s, z, f"{k}") for k, (x, s, z) in enumerate(triples)]
    return r.quantize(r.op("Concat", parts, **r.attrs()), r.arg(0), r.arg(1))


_WIDER = {"int4": np.int8, "uint4": np.uint8}  # numpy's names of ONNX's INT4 and UINT4 (ml_dtypes)


def _contrib_qdq(r: _Rewrite) -> list:
    """com.microsoft QuantizeLinear / DequantizeLinear as the standard op; int4/uint4 constants
    widened."""
    inputs = []
    for name in r.node.input:
        value = r.constants.get(name)
        wider = None if value is None else _WIDER.get(str(value.dtype))
        inputs.append(name if wider is None else r.w.constant(f"{name}_8bit", value.astype(wider)))
    attrs = {a.name: helper.get_attribute_value(a) for a in r.node.attribute}
    return [helper.make_node(r.node.op_type, inputs, list(r.node.output), name=r.label, **attrs)]


def _at_least_opset_13(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """The model at opset 13 or later, where DequantizeLinear has per-axis scales (the ONNX model
    zoo's int8 models are opset 10-12): converted by ONNX's version converter."""
    version = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    if version >= 13:
        return model
    try:
        return version_converter.convert_version(model, 13)
    except Exception as error:  # the converter's own errors are RuntimeError, ValueError, IndexError
        raise FrontendError(
            f"{name}: its QOperator nodes need opset 13 (per-channel DequantizeLinear) and ONNX's version "
            f"converter could not lift the model from opset {version}: {first_line(error)}"
        ) from None
