"""Inputs whatever their memory: an empty array and a strided view (the Python API takes
numpy arrays as they come) give onnxruntime's answer. An empty input crashed the VM call
(numpy's strides for a zero-size array fail TVM's compactness check: ONNX's node tests
test_tril_zero, test_reduce_sum_empty_set_*)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from vpuc import runtime
from vpuc.compiler import compile_model


def _compiled(tmp_path, nodes, x_shape, y_shape, initializers=()):
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        list(initializers),
    )  # fmt: skip
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    compile_model(str(path), target="cpu").save(str(tmp_path / "m.vpub"))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return runtime.load(str(tmp_path / "m.vpub")), ort.InferenceSession(str(path), options)


def test_an_empty_input(tmp_path):
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [2])
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)
    program, session = _compiled(tmp_path, [node], [2, 0, 4], [2, 0, 1], [axes])
    x = np.zeros((2, 0, 4), np.float32)
    got = program.run({"x": x})["y"]
    (want,) = session.run(None, {"x": x})
    assert got.shape == want.shape == (2, 0, 1)


def test_a_strided_view(tmp_path):
    node = helper.make_node("Mul", ["x", "x"], ["y"])
    program, session = _compiled(tmp_path, [node], [4, 3], [4, 3])
    base = np.arange(96, dtype=np.float32).reshape(8, 12)
    for x in (base[::2, ::4], base[1::2, 1::4], base[:4, :3], base.T[:4, :3]):
        assert x.shape == (4, 3)
        (want,) = session.run(None, {"x": np.ascontiguousarray(x)})
        np.testing.assert_array_equal(program.run({"x": x})["y"], want)
