"""16-bit activations from onnxruntime's quantiser: `quantize_static(...,
activation_type=QuantType.QInt16)` (A16W8, QDQ at opset 21), QUInt16, the com.microsoft
Q/DQ its `UseQDQContribOps` option writes, and the mixed precision `TensorQuantOverrides`
gives (int8 everywhere, int16 on chosen tensors). vpuc refused every one of them ("zero
point is int16"). The VPU's datapath is 8-bit, so a layer that reads or writes a 16-bit
tensor runs on the host CPU with that reason, and the int8 layers around it stay on the VPU.

The reference is onnxruntime running the QDQ model the quantiser wrote (nothing of vpuc's
in it); the CLI compiles and runs it as a user would.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

SHAPE = (1, 3, 16, 16)
INT16_TENSORS = ("dw", "s1", "m1")  # the mixed model's 16-bit tensors: the SiLU's input and output


def _float_model(rng) -> onnx.ModelProto:
    inits = []

    def weight(*shape):
        inits.append(
            numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), f"w{len(inits)}")
        )
        return inits[-1].name

    node = helper.make_node
    nodes = [
        node("Conv", ["x", weight(16, 3, 3, 3), weight(16)], ["c1"], pads=[1, 1, 1, 1]),
        node("Relu", ["c1"], ["r1"]),
        node("Conv", ["r1", weight(16, 16, 3, 3), weight(16)], ["c2"], pads=[1, 1, 1, 1]),
        node("Relu", ["c2"], ["r2"]),
        node("Conv", ["r2", weight(16, 1, 3, 3), weight(16)], ["dw"], pads=[1, 1, 1, 1], group=16),
        node("Sigmoid", ["dw"], ["s1"]),
        node("Mul", ["dw", "s1"], ["m1"]),
        node("Conv", ["m1", weight(16, 16, 1, 1), weight(16)], ["c3"]),
        node("Relu", ["c3"], ["r3"]),
        node("Conv", ["r3", weight(16, 16, 3, 3), weight(16)], ["c4"], pads=[1, 1, 1, 1]),
        node("Relu", ["c4"], ["r4"]),
        node("GlobalAveragePool", ["r4"], ["g"]),
        node("Flatten", ["g"], ["f"]),
        node("Gemm", ["f", weight(10, 16), weight(10)], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "a16", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


class _Samples(CalibrationDataReader):
    def __init__(self, samples):
        self.samples = iter(samples)

    def get_next(self):
        return next(self.samples, None)


def _vpuc(*args):
    return subprocess.run(
        [sys.executable, "-m", "vpuc.compiler.cli", *map(str, args)], capture_output=True, text=True, timeout=600
    )


FORMS = {
    "a16w8": dict(activation_type=QuantType.QInt16, weight_type=QuantType.QInt8),
    "au16wu8": dict(activation_type=QuantType.QUInt16, weight_type=QuantType.QUInt8),
    "a16w8_contrib": dict(
        activation_type=QuantType.QInt16, weight_type=QuantType.QInt8, extra_options={"UseQDQContribOps": True}
    ),
    "mixed": dict(
        activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8,
        extra_options={"TensorQuantOverrides": {t: [{"quant_type": QuantType.QInt16}] for t in INT16_TENSORS}},
    ),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("int16")
    rng = np.random.default_rng(7)
    float_path = folder / "float.onnx"
    onnx.save(_float_model(rng), float_path)
    samples = [{"x": rng.standard_normal(SHAPE).astype(np.float32)} for _ in range(16)]
    paths = {}
    for name, options in FORMS.items():
        paths[name] = folder / f"{name}.onnx"
        quantize_static(float_path, paths[name], _Samples(samples), quant_format=QuantFormat.QDQ, **options)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    np.savez(folder / "x.npz", x=x)
    return folder, paths, x


def _qdq_dtypes(path) -> set[int]:
    model = onnx.load(path)
    zeros = {t.name: t.data_type for t in model.graph.initializer}
    return {zeros[n.input[2]] for n in model.graph.node if n.op_type == "QuantizeLinear" and len(n.input) > 2}


def test_the_quantiser_wrote_16_bit_activations(models):
    """The fixture is what the test means: onnxruntime wrote int16 (uint16) activations."""
    _, paths, _ = models
    assert _qdq_dtypes(paths["a16w8"]) == {TensorProto.INT16}
    assert _qdq_dtypes(paths["au16wu8"]) == {TensorProto.UINT16}
    assert {n.domain for n in onnx.load(paths["a16w8_contrib"]).graph.node} >= {"com.microsoft"}
    assert _qdq_dtypes(paths["mixed"]) == {TensorProto.INT8, TensorProto.INT16}


def _reference(path, x):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("target", ["cpu", "vpu-plus"])
def test_16_bit_activations_compile_and_match_onnxruntime(models, form, target, tmp_path):
    folder, paths, x = models
    artifact = tmp_path / f"{form}.vpub"
    compiled = _vpuc("compile", paths[form], "--target", target, "-o", artifact, "--json")
    assert compiled.returncode == 0, compiled.stderr
    out = tmp_path / "y.npz"
    ran = _vpuc("run", artifact, "--inputs", folder / "x.npz", "--outputs", out, "--check", paths[form])
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr
    assert "check: PASS" in ran.stdout
    got = np.load(out)["y"]
    want = _reference(paths[form], x)
    # the output's last QuantizeLinear step: the same grid as onnxruntime's, at most one step off
    assert np.abs(got - want).max() <= 2 * _output_step(paths[form]) + 1e-6


def _output_step(path) -> float:
    model = onnx.load(path)
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    last = [n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "y"]
    return float(consts[last[0].input[1]]) if last else 0.0


def _partition(path) -> dict[str, dict]:
    done = _vpuc("partition", path, "--target", "vpu-plus", "--json")
    assert done.returncode == 0, done.stderr
    return {op["name"]: op for op in json.loads(done.stdout)["ops"]}


WHY = "16-bit runs on the CPU"  # the reason a layer with a 16-bit tensor gets, before any cost


def test_16_bit_layers_stay_on_the_host_with_their_reason(models):
    """In the mixed model the SiLU (int16 in and out), the depthwise conv writing its int16
    input and the conv reading its int16 output run on the CPU, saying why; the int8 convs
    before and after stay on the VPU. The depthwise conv's reason once named only a shorter
    match's float32 result, not the int16 tensor that refused the full one."""
    _, paths, _ = models
    ops = _partition(paths["mixed"])
    convs = sorted((n for n in ops if n.startswith("Conv_")), key=lambda n: int(n.split("_")[1]))
    silu = [n for n in ops if n.startswith(("Sigmoid_", "Mul_"))]
    assert len(convs) == 5 and len(silu) == 2
    for name in [*silu, convs[2], convs[3]]:  # convs[2] writes dw (int16), convs[3] reads m1 (int16)
        assert ops[name]["device"] == "cpu" and WHY in ops[name]["reason"], (name, ops[name]["reason"])
    assert [ops[n]["device"] for n in (convs[0], convs[1], convs[4])] == ["vpu"] * 3


def test_a16w8_has_no_vpu_layer(models):
    """Every compute layer of the A16W8 model is refused for its 16-bit tensors (not judged
    on cost first: no VPU cycle count makes an int16 tensor fit an 8-bit datapath)."""
    _, paths, _ = models
    ops = _partition(paths["a16w8"])
    compute = {n: op for n, op in ops.items() if op["op"] not in ("QuantizeLinear", "DequantizeLinear")}
    assert len(compute) == 10
    assert all(op["device"] == "cpu" and WHY in op["reason"] for op in compute.values()), {
        n: op["reason"] for n, op in compute.items()
    }
