"""QDQ models for the VPU half of the fuzzer: a random float graph quantised by onnxruntime's
own static quantiser (QDQ format, as users bring them), calibrated on seeded random inputs.

The QDQ model is both what vpuc compiles (it keeps the model's scales) and the reference
onnxruntime evaluates: the ONNX QDQ semantics that the VPU must meet within 1 LSB.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from fuzz_graphs import float_graphs, random_inputs
from hypothesis import reject
from hypothesis import strategies as st
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

CALIBRATION_SAMPLES = 4


class _Samples(CalibrationDataReader):
    def __init__(self, model: onnx.ModelProto, seed: int) -> None:
        self._samples = iter([random_inputs(model, seed * 100 + i) for i in range(CALIBRATION_SAMPLES)])

    def get_next(self):
        return next(self._samples, None)


def quantize(
    model: onnx.ModelProto,
    seed: int,
    activation: str,
    per_channel: bool,
    quant_format=QuantFormat.QDQ,
    wide: tuple[str, ...] = (),
) -> onnx.ModelProto:
    """`wide` names tensors the quantiser keeps at 16 bits (its TensorQuantOverrides: the
    mixed precision of an int8 model with a few sensitive tensors in int16)."""
    activation_type = QuantType.QInt8 if activation == "int8" else QuantType.QUInt8
    wide_type = QuantType.QInt16 if activation == "int8" else QuantType.QUInt16
    extra = {"TensorQuantOverrides": {name: [{"quant_type": wide_type}] for name in wide}} if wide else {}
    logging.disable(logging.WARNING)
    try:
        with tempfile.TemporaryDirectory(prefix="vpuc-fuzz-qdq-") as workdir:
            source, target = Path(workdir) / "float.onnx", Path(workdir) / "qdq.onnx"
            onnx.save(model, source)
            quantize_static(
                str(source), str(target), _Samples(model, seed), quant_format=quant_format,
                per_channel=per_channel, activation_type=activation_type, weight_type=QuantType.QInt8,
                extra_options=extra,
            )  # fmt: skip
            return onnx.load(target)
    finally:
        logging.disable(logging.NOTSET)


@st.composite
def qdq_graphs(draw, graphs=None) -> tuple[onnx.ModelProto, int]:
    """(QDQ model, seed): a random float graph (fuzz_graphs.float_graphs, or the strategy
    `graphs`) through onnxruntime's quantize_static."""
    model, seed = draw(float_graphs(quantizable=True) if graphs is None else graphs)
    activation = draw(st.sampled_from(["int8", "uint8"]))
    per_channel = draw(st.booleans())
    try:
        quantized = quantize(model, seed, activation, per_channel)
    except Exception:  # onnxruntime's quantiser fails on some valid graphs: not ours to test
        reject()
    if not any(node.op_type == "QuantizeLinear" for node in quantized.graph.node):
        reject()  # nothing it could quantise (a lone Flatten): a float model, the cpu test's job
    return quantized, seed


@st.composite
def mixed_precision_graphs(draw) -> tuple[onnx.ModelProto, int]:
    """(QDQ model, seed): a float graph quantised to 8 bits but for one to three of its
    activations, which the quantiser keeps at 16 bits (the VPU leaves their layers to the host)."""
    model, seed = draw(float_graphs(quantizable=True))
    activation = draw(st.sampled_from(["int8", "uint8"]))
    outputs = [name for node in model.graph.node for name in node.output if name]
    if not outputs:
        reject()
    wide = draw(st.lists(st.sampled_from(outputs), min_size=1, max_size=3, unique=True))
    try:
        quantized = quantize(model, seed, activation, draw(st.booleans()), wide=tuple(wide))
    except Exception:  # onnxruntime's quantiser fails on some valid graphs: not ours to test
        reject()
    zero_points = {t.name: t.data_type for t in quantized.graph.initializer}
    sixteen = (onnx.TensorProto.INT16, onnx.TensorProto.UINT16)
    if not any(
        node.op_type == "QuantizeLinear" and len(node.input) > 2 and zero_points.get(node.input[2]) in sixteen
        for node in quantized.graph.node
    ):
        reject()  # the chosen tensors were not quantised (a graph output, a view): no 16-bit tensor
    return quantized, seed


@st.composite
def qoperator_graphs(draw) -> tuple[onnx.ModelProto, int]:
    """(QOperator model, seed): the same float graphs through quantize_static in onnxruntime's
    QOperator format (QLinearConv, QLinearAdd, ...: computed by its integer kernels)."""
    model, seed = draw(float_graphs(quantizable=True))
    activation = draw(st.sampled_from(["int8", "uint8"]))
    per_channel = draw(st.booleans())
    try:
        quantized = quantize(model, seed, activation, per_channel, QuantFormat.QOperator)
    except Exception:  # onnxruntime's quantiser fails on some valid graphs: not ours to test
        reject()
    if not any(
        node.op_type.startswith("QLinear") or node.op_type == "QGemm" for node in quantized.graph.node
    ):
        reject()  # no QOperator node: the QDQ test's graphs
    try:  # onnxruntime's kernels refuse some of its quantiser's models (QLinearMatMul with a
        # per-column zero point on a 3-D input): no reference, not ours to test
        session = ort.InferenceSession(quantized.SerializeToString(), providers=["CPUExecutionProvider"])
        session.run(None, random_inputs(quantized, seed))
    except Exception:
        reject()
    return quantized, seed


def np_inputs(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    return random_inputs(model, seed)
