"""MobileNetV3's hard-swish and squeeze-excite on the VPU (issue 26 item 10: PP-OCR's direction
classifier), in both forms users bring: a float model vpuc calibrates, and a QDQ model from
onnxruntime's quantize_static (QDQ, per-channel weights).

    hswish   Conv -> x * HardSigmoid(x)                                  (ONNX's HardSwish)
    se       Conv -> GlobalAveragePool -> Conv 1x1 -> Relu -> Conv 1x1 -> HardSigmoid(0.2, 0.5)
             -> Mul with the block input, the gate broadcast over H and W
    clip     Conv -> x * Clip(x + 3, 0, 6) / 6                          (PyTorch's export)

Judged as `vpuc run --check` judges them: every VPU subgraph on its own inputs within 1 LSB of
its QDQ reference, and, for the QDQ model, the artifact's outputs within 1 LSB of onnxruntime
on that model (optimisations off: ONNX QDQ semantics; 2 on u55-256, whose fixed-point
requantisation differs from it by one step at the conv, which the Mul then reads twice). On vpu-plus and u55-256 the gate's
clip and the Mul run on the VPU (asserted: the test would otherwise check the host).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from vpuc import runtime
from vpuc.compiler.driver import compile_model
from vpuc.runtime.check import check_run, subgraph_check

C, H = 16, 24
PATTERNS = ("hswish", "se", "clip")
TARGETS = ("vpu", "vpu-plus", "u55-256")
VPU_CHOICES = {"profitability": False, "min_subgraph_ops": 1}  # the cost model keeps small graphs on the host


def _model(pattern: str, first_bias: bool = True) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    inits, nodes = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array, np.float32), name))
        return name

    def conv(x, out, ci, co, k, bias_scale=0.5):
        w = rng.standard_normal((co, ci, k, k)) / np.sqrt(ci * k * k)
        b = bias_scale * rng.standard_normal(co)
        nodes.append(
            helper.make_node(
                "Conv", [x, const(f"{out}.w", w), const(f"{out}.b", b)], [out], pads=[k // 2] * 4
            )
        )

    conv("x", "c0", C, C, 3)
    if not first_bias:  # the Add of x + 3 must not be taken for the conv's bias
        del nodes[0].input[2]
    if pattern == "hswish":
        nodes.append(helper.make_node("HardSigmoid", ["c0"], ["gate"], alpha=1 / 6, beta=0.5))
    elif pattern == "se":
        nodes.append(helper.make_node("GlobalAveragePool", ["c0"], ["pooled"]))
        conv("pooled", "squeezed", C, C // 4, 1, 0.1)
        nodes.append(helper.make_node("Relu", ["squeezed"], ["hidden"]))
        conv("hidden", "excite", C // 4, C, 1, 1.0)
        nodes.append(helper.make_node("HardSigmoid", ["excite"], ["gate"], alpha=0.2, beta=0.5))
    else:
        nodes.append(helper.make_node("Add", ["c0", const("three", 3.0)], ["shifted"]))
        nodes.append(helper.make_node("Clip", ["shifted", const("zero", 0.0), const("six", 6.0)], ["gate"]))
    nodes.append(helper.make_node("Mul", ["c0", "gate"], ["y" if pattern != "clip" else "scaled"]))
    if pattern == "clip":
        nodes.append(helper.make_node("Div", ["scaled", const("six_div", 6.0)], ["y"]))
    graph = helper.make_graph(
        nodes,
        pattern,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, H])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, H, H])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _samples(count: int, seed: int) -> np.ndarray:
    return (2.0 * np.random.default_rng(seed).standard_normal((count, C, H, H))).astype(np.float32)


def _quantized(model: onnx.ModelProto, folder: Path) -> Path:
    """onnxruntime's quantize_static: QDQ, int8 activations, per-channel int8 weights."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._samples = iter({"x": s[None]} for s in _samples(8, 1))

        def get_next(self):
            return next(self._samples, None)

    source, target = folder / "float.onnx", folder / "qdq.onnx"
    onnx.save(model, source)
    logging.disable(logging.WARNING)
    try:
        quantize_static(
            str(source), str(target), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
        )  # fmt: skip
    finally:
        logging.disable(logging.NOTSET)
    return target


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("form", ["float", "qdq"])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_hard_swish_patterns_within_one_lsb(pattern, form, target, tmp_path):
    _check_within_one_lsb(_model(pattern), form, target, tmp_path)


@pytest.mark.parametrize("form", ["float", "qdq"])
@pytest.mark.parametrize("pattern", ["clip", "hswish"])
def test_hard_swish_after_conv_without_bias(pattern, form, tmp_path):
    """The conv has no bias: its output is read by x + 3 and by the Mul, so the conv pattern
    must not take the + 3 as its bias (the layer would compute a value read outside it, and
    the code generator refused the Conv, the Add and the Clip to the CPU)."""
    executable = _check_within_one_lsb(_model(pattern, first_bias=False), form, "vpu-plus", tmp_path)
    layers = [layer["op"] for call in executable.vpu_calls for layer in call.entry.get("layers", [])]
    assert "conv2d" in layers and "mul" in layers, layers


def _check_within_one_lsb(model: onnx.ModelProto, form: str, target: str, tmp_path: Path):
    model_path = tmp_path / "model.onnx"
    onnx.save(model, model_path)
    choices = dict(VPU_CHOICES)
    if form == "qdq":
        model_path = _quantized(model, tmp_path)
    else:
        np.savez(tmp_path / "calib.npz", x=_samples(8, 1))
        choices["calib"] = str(tmp_path / "calib.npz")
    artifact = compile_model(str(model_path), target=target, **choices).save(tmp_path / "m.vpub")
    executable = runtime.load(artifact)
    executable.record_outputs(True)
    inputs = {"x": _samples(1, 7)}
    outputs = executable.run(inputs)

    vpu_kinds = {layer["op"] for call in executable.vpu_calls for layer in call.entry.get("layers", [])}
    if target != "vpu":  # the gate's activation and the Mul are on the VPU's op list there
        assert "mul" in vpu_kinds, vpu_kinds
    subgraphs = subgraph_check(executable, 1)
    worst = max(row["max_lsb"] for row in subgraphs["outputs"])
    assert subgraphs["passed"] and worst <= 1, subgraphs["outputs"]
    check = check_run(executable, inputs, outputs, str(model_path), None)
    assert check["passed"], check
    if form == "qdq":  # end to end against onnxruntime on the QDQ model, in its output steps
        # float32 requantisation is onnxruntime-exact per layer: 1 LSB end to end; u55-256's
        # fixed point may differ by one at the conv and one more at the Mul that reads it twice.
        # (PyTorch's form ends in a float Div that quantize_static leaves unquantised: no step.)
        limit = 2 if target == "u55-256" else 1
        rows = check["qdq_model"]["outputs"]
        assert rows and all(row["max_lsb"] is None or row["max_lsb"] <= limit for row in rows), rows
    return executable
