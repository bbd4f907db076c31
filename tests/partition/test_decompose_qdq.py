"""A QDQ model's global mean is split into conv stages only when the stages' rounding at the
input's step keeps the answer within 1 LSB of onnxruntime on the QDQ model (decompose.py);
otherwise it is one conv whose kernel runs as sub-kernels of rows and columns (the mean's
own rounding). The fuzzer found GlobalAveragePool over 2x8 on 'vpu' (kernel <= 7: two
stages) 6 LSB low when the mean's scale was 16x finer than its input's."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from vpuc import runtime
from vpuc.compiler import compile_model

IN_SCALE, IN_ZERO = 0.02, -10


def _qdq_mean(path, out_scale: float) -> None:
    inits = [
        numpy_helper.from_array(np.float32(IN_SCALE), "s_in"),
        numpy_helper.from_array(np.int8(IN_ZERO), "z_in"),
        numpy_helper.from_array(np.float32(out_scale), "s_out"),
        numpy_helper.from_array(np.int8(3), "z_out"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_in", "z_in"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s_in", "z_in"], ["xd"]),
        helper.make_node("GlobalAveragePool", ["xd"], ["m"], name="gap"),
        helper.make_node("QuantizeLinear", ["m", "s_out", "z_out"], ["mq"]),
        helper.make_node("DequantizeLinear", ["mq", "s_out", "z_out"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "qdq_mean",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])],
        inits,
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize(
    ("out_scale", "staged"),
    [(IN_SCALE / 16, False), (IN_SCALE, True)],  # 1 stage of rounding at the input's step: <= 1 LSB
)
def test_stages_only_within_one_lsb(tmp_path, out_scale, staged):
    path = tmp_path / "m.onnx"
    _qdq_mean(path, out_scale)
    artifact = compile_model(str(path), target="vpu", profitability=False)
    (gap,) = [op for op in artifact.report["partition"]["ops"] if op["name"] == "gap"]
    assert ("mean over 2x8 as depthwise conv 1x2 -> 2x4" in gap["reason"]) == staged, gap["reason"]
    one_conv = (
        "mean over 2x8 as depthwise conv 2x8 with weights 1/window (exact up to the requantisation; one conv"
    )
    assert (one_conv in gap["reason"]) != staged, gap["reason"]
    artifact.save(str(tmp_path / "m.vpub"))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options)
    program = runtime.load(str(tmp_path / "m.vpub"))
    rng = np.random.default_rng(0)
    for _ in range(8):
        x = rng.uniform(-1.0, 1.0, (1, 4, 2, 8)).astype(np.float32)
        (expected,) = session.run(None, {"x": x})
        got = program.run({"x": x})["y"]
        assert np.abs(got - expected).max() <= out_scale * 1.001
