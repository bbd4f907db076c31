"""Models in onnxruntime's QOperator format (`quantize_static(..., QuantFormat.QOperator)`, the
ONNX model zoo's int8 models): QLinearConv, QLinearMatMul and the com.microsoft QGemm,
QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearAveragePool,
QLinearGlobalAveragePool and QLinearConcat, with int8 MaxPool and Flatten between them. vpuc
refused every one of them by name; compiler/frontend/qoperator.py writes each as its QDQ form.

The reference is onnxruntime running the QOperator model itself, with its int8 kernels (the
model the user has; nothing of vpuc's in it). The CLI compiles and runs it as a user would.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

SHAPE = (1, 3, 32, 32)
EVERY_QOPERATOR_OP = {
    "QLinearConv", "QLinearMatMul", "QGemm", "QLinearAdd", "QLinearMul", "QLinearSigmoid",
    "QLinearLeakyRelu", "QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearConcat",
}  # fmt: skip


def _float_model(rng) -> onnx.ModelProto:
    inits = []

    def weight(*shape):
        inits.append(
            numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), f"w{len(inits)}")
        )
        return inits[-1].name

    node = helper.make_node
    nodes = [
        node("Conv", ["x", weight(16, 3, 3, 3), weight(16)], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        node("Relu", ["c1"], ["r1"]),
        node("Conv", ["r1", weight(16, 16, 3, 3), weight(16)], ["c2"], pads=[1, 1, 1, 1]),
        node("Relu", ["c2"], ["r2"]),
        node("Add", ["r1", "r2"], ["a1"]),
        node("Conv", ["a1", weight(16, 1, 3, 3), weight(16)], ["dw"], pads=[1, 1, 1, 1], group=16),
        node("Sigmoid", ["dw"], ["s1"]),
        node("Mul", ["dw", "s1"], ["m1"]),
        node("Conv", ["m1", weight(8, 16, 1, 1), weight(8)], ["c3"]),
        node("Concat", ["c3", "a1"], ["cat"], axis=1),
        node("MaxPool", ["cat"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
        node("AveragePool", ["mp"], ["ap"], kernel_shape=[2, 2], strides=[2, 2]),
        node("GlobalAveragePool", ["ap"], ["g"]),
        node("Flatten", ["g"], ["f"]),
        node("Gemm", ["f", weight(10, 24), weight(10)], ["y0"], transB=1),
        node("LeakyRelu", ["y0"], ["y1"], alpha=0.1),
        node("MatMul", ["y1", weight(10, 6)], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "qop", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


class _Samples(CalibrationDataReader):
    def __init__(self, samples):
        self.samples = iter(samples)

    def get_next(self):
        return next(self.samples, None)


def _vpuc(*args):
    return subprocess.run(
        [sys.executable, "-m", "vpuc.compiler.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
    )


def _ort(path, x):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _output_scale(model: onnx.ModelProto) -> float:
    """The scale the graph output is dequantised with (its last DequantizeLinear)."""
    last = next(n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "y")
    scales = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return float(scales[last.input[1]])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("qoperator")
    rng = np.random.default_rng(3)
    onnx.save(_float_model(rng), folder / "float.onnx")
    samples = [{"x": rng.standard_normal(SHAPE).astype(np.float32)} for _ in range(8)]
    signed = {"activation_type": QuantType.QInt8, "weight_type": QuantType.QInt8, "per_channel": True}
    for name, options in (("s8_per_channel", signed), ("u8", {})):
        quantize_static(
            str(folder / "float.onnx"), str(folder / f"{name}.onnx"), _Samples(samples),
            quant_format=QuantFormat.QOperator, **options,
        )  # fmt: skip
        ops = {n.op_type for n in onnx.load(folder / f"{name}.onnx").graph.node}
        assert EVERY_QOPERATOR_OP <= ops, ops  # the model is what the test says it is
    np.savez(folder / "x.npz", x=rng.standard_normal(SHAPE).astype(np.float32) * 1.5)
    return folder


@pytest.mark.parametrize("target", ["vpu-plus", "vpu", "cpu"])
@pytest.mark.parametrize("name", ["s8_per_channel", "u8"])
def test_qoperator_model_matches_onnxruntime_int8_kernels(folder, name, target):
    """Compiles, puts its quantised ops on the VPU (vpu-plus runs every one of them), and its
    output is onnxruntime's within one step of the output's scale; on the VPU, which computes
    each layer in integers as onnxruntime's kernels do, almost all of it exact. (The CPU path
    runs the QDQ model's float semantics: a layer's rounding may differ by a step.)"""
    model, artifact, out = (
        folder / f"{name}.onnx",
        folder / f"{name}.{target}.vpub",
        folder / f"{name}.{target}.npz",
    )
    compiled = _vpuc("compile", model, "--target", target, "-o", artifact)
    assert compiled.returncode == 0, compiled.stderr
    if target == "vpu-plus":
        placed = _vpuc("partition", model, "--target", target)
        assert placed.returncode == 0, placed.stderr
        rows = {
            line.split("│")[1].strip(): line for line in placed.stdout.splitlines() if line.count("│") > 3
        }
        for node in ("QLinearConv_1", "QLinearAdd_3", "QLinearMul_6", "QLinearConcat_8", "QGemm_13"):
            assert "│ vpu " in rows[node], rows.get(node)
    ran = _vpuc("run", artifact, "--inputs", folder / "x.npz", "--outputs", out)
    assert ran.returncode == 0, ran.stderr
    with np.load(out) as got, np.load(folder / "x.npz") as x:
        expected = _ort(model, x["x"])
        steps = np.abs(got["y"] - expected) / _output_scale(onnx.load(model))
    assert steps.max() <= 1.01, steps.max()
    if target != "cpu":
        assert np.mean(steps < 0.01) >= 0.8, steps
    checked = _vpuc("run", artifact, "--inputs", folder / "x.npz", "--check", model)
    assert checked.returncode == 0, checked.stdout[-2000:]


def test_qoperator_model_below_opset_13_is_lifted(folder):
    """The model zoo's int8 models are opset 10-12: per-channel DequantizeLinear needs 13, so
    the rewritten model is lifted by ONNX's version converter; onnxruntime runs the original."""
    model = onnx.load(folder / "s8_per_channel.onnx")
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = 12
    onnx.save(model, folder / "opset12.onnx")
    artifact, out = folder / "opset12.vpub", folder / "opset12.npz"
    compiled = _vpuc("compile", folder / "opset12.onnx", "--target", "vpu-plus", "-o", artifact)
    assert compiled.returncode == 0, compiled.stderr
    assert _vpuc("run", artifact, "--inputs", folder / "x.npz", "--outputs", out).returncode == 0
    with np.load(out) as got, np.load(folder / "x.npz") as x:
        steps = np.abs(got["y"] - _ort(folder / "opset12.onnx", x["x"])) / _output_scale(model)
    assert steps.max() <= 1.01, steps.max()


def _qlinear_conv(scale_input: bool, channels_last_pool: bool) -> onnx.ModelProto:
    def const(name, value):
        return numpy_helper.from_array(np.asarray(value), name)

    inits = [
        const("w", np.ones((4, 3, 1, 1), np.int8)), const("ws", np.float32(0.01)), const("wz", np.int8(0)),
        const("xz", np.int8(0)), const("ys", np.float32(0.05)), const("yz", np.int8(0)),
    ]  # fmt: skip
    inputs = [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 3, 8, 8])]
    if scale_input:
        inputs.append(helper.make_tensor_value_info("xs", TensorProto.FLOAT, []))
    else:
        inits.append(const("xs", np.float32(0.02)))
    nodes = [
        helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["c"], name="conv")
    ]
    pool = {"channels_last": 1} if channels_last_pool else {}
    nodes.append(
        helper.make_node(
            "QLinearGlobalAveragePool",
            ["c", "ys", "yz", "ys", "yz"],
            ["y"],
            name="gap",
            domain="com.microsoft",
            **pool,
        )
    )
    graph = helper.make_graph(
        nodes, "bad", inputs, [helper.make_tensor_value_info("y", TensorProto.INT8, [1, 4, 1, 1])], inits
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]
    )


@pytest.mark.parametrize(
    ("scale_input", "channels_last", "said"),
    [(True, False, "node 'conv' (QLinearConv): its scale or zero point 'xs' is not a constant"),
     (False, True, "node 'gap' (QLinearGlobalAveragePool): channels_last=1 is not supported")],
)  # fmt: skip
def test_qoperator_node_vpuc_cannot_rewrite_is_one_line(tmp_path, scale_input, channels_last, said):
    path = tmp_path / "bad.onnx"
    onnx.save(_qlinear_conv(scale_input, channels_last), path)
    compiled = _vpuc("compile", path, "--target", "vpu", "-o", tmp_path / "bad.vpub")
    assert compiled.returncode == 2, compiled.stderr
    assert said in compiled.stderr and len(compiled.stderr.strip().splitlines()) == 1, compiled.stderr
    assert not (tmp_path / "bad.vpub").exists()


def test_qoperator_softmax_head_on_the_vpu(tmp_path):
    """QLinearMatMul -> QLinearSoftmax (a classifier's head): on u55-256, whose op list has
    Softmax, both run on the VPU and the output is onnxruntime's kernels' within a step."""
    rng = np.random.default_rng(4)
    weight = numpy_helper.from_array((rng.standard_normal((64, 10)) * 0.3).astype(np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Softmax", ["m"], ["y"], axis=-1)],
        "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], [weight],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "float.onnx")
    samples = [{"x": rng.standard_normal((1, 64)).astype(np.float32)} for _ in range(16)]
    quantize_static(
        str(tmp_path / "float.onnx"), str(tmp_path / "q.onnx"), _Samples(samples),
        quant_format=QuantFormat.QOperator, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
    )  # fmt: skip
    model = onnx.load(tmp_path / "q.onnx")
    assert {"QLinearMatMul", "QLinearSoftmax"} <= {n.op_type for n in model.graph.node}
    x = rng.standard_normal((1, 64)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    compiled = _vpuc("compile", tmp_path / "q.onnx", "--target", "u55-256", "-o", tmp_path / "q.vpub")
    assert compiled.returncode == 0, compiled.stderr
    assert "0 VPU subgraphs" not in compiled.stdout, compiled.stdout
    ran = _vpuc("run", tmp_path / "q.vpub", "--inputs", tmp_path / "x.npz", "--outputs", tmp_path / "y.npz")
    assert ran.returncode == 0, ran.stderr
    with np.load(tmp_path / "y.npz") as got:
        steps = np.abs(got["y"] - _ort(tmp_path / "q.onnx", x)) / _output_scale(model)
    assert steps.max() <= 1.01, steps


def test_int4_weights_in_contrib_qdq_run_as_int8(folder):
    """onnxruntime's quantiser with int4 weights on an opset-13 model writes com.microsoft
    QuantizeLinear / DequantizeLinear (int4 needs opset 21): read as the standard ops with
    the int4 weights widened to int8 (the same values), every layer on vpu-plus's VPU, and
    the output onnxruntime's on that model. int16 activations stay a one-line refusal."""
    samples = [{"x": np.random.default_rng(k).standard_normal(SHAPE).astype(np.float32)} for k in range(8)]
    quantize_static(
        str(folder / "float.onnx"), str(folder / "w4.onnx"), _Samples(samples), quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QInt8, weight_type=QuantType.QInt4,
    )  # fmt: skip
    model = onnx.load(folder / "w4.onnx")
    assert {(n.domain, n.op_type) for n in model.graph.node} >= {("com.microsoft", "DequantizeLinear")}
    artifact, out = folder / "w4.vpub", folder / "w4.npz"
    compiled = _vpuc("compile", folder / "w4.onnx", "--target", "vpu-plus", "-o", artifact)
    assert compiled.returncode == 0, compiled.stderr
    assert "1 VPU subgraphs" in compiled.stdout, compiled.stdout
    assert _vpuc("run", artifact, "--inputs", folder / "x.npz", "--outputs", out).returncode == 0
    with np.load(out) as got, np.load(folder / "x.npz") as x:
        expected = _ort(folder / "w4.onnx", x["x"])
        step = float(numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "y_scale")))
        steps = np.abs(got["y"] - expected) / step
    assert steps.max() <= 1.01, steps

    quantize_static(
        str(folder / "float.onnx"), str(folder / "a16.onnx"), _Samples(samples), quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QInt16, weight_type=QuantType.QInt8,
    )  # fmt: skip
    # 16-bit activations compile since stop 40; their layers run on the host
    # (tests/e2e/test_int16_activations.py holds them against onnxruntime)
    compiled = _vpuc("compile", folder / "a16.onnx", "--target", "vpu-plus", "-o", folder / "a16.vpub")
    assert compiled.returncode == 0, compiled.stderr
    assert "0 VPU subgraphs" in compiled.stdout, compiled.stdout
