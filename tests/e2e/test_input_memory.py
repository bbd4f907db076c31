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


# Executable.run keeps small inputs' tensors between calls (runtime/executor.py `_stage`):
# what it returns must still be the caller's own, whatever the next call does.


def test_outputs_are_not_shared_between_runs(tmp_path):
    """An Identity returns the staged input tensor itself: each run's output is a copy, so
    the next run (which writes that tensor again) leaves it as it was."""
    program, session = _compiled(tmp_path, [helper.make_node("Identity", ["x"], ["y"])], [4, 3], [4, 3])
    first_x = np.arange(12, dtype=np.float32).reshape(4, 3)
    first = program.run({"x": first_x})["y"]
    second = program.run({"x": -first_x})["y"]
    np.testing.assert_array_equal(first, first_x)
    np.testing.assert_array_equal(second, -first_x)
    first_x[...] = 7  # the caller's input changes after the run: the output does not
    np.testing.assert_array_equal(first, np.arange(12, dtype=np.float32).reshape(4, 3))
    assert not np.shares_memory(first, second)


def test_a_constant_output_cannot_be_changed_through_a_run(tmp_path):
    """An output that is a constant of the graph comes back as a copy: writing into it does
    not change what the next run returns."""
    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    const = helper.make_node("Constant", [], ["y"], value=onnx.numpy_helper.from_array(value))
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), const], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 3])],
    )  # fmt: skip
    path = tmp_path / "c.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    compile_model(str(path), target="cpu").save(str(tmp_path / "c.vpub"))
    program = runtime.load(str(tmp_path / "c.vpub"))
    x = np.ones((2, 3), np.float32)
    program.run({"x": x})["y"][...] = -1
    np.testing.assert_array_equal(program.run({"x": x})["y"], value)


def test_runs_agree_with_onnxruntime_for_small_and_large_inputs(tmp_path):
    """Repeated runs with changing inputs, below and above the size staged in a kept tensor
    (64 KiB), each give onnxruntime's answer."""
    for shape in ([3, 5], [256, 128]):
        node = helper.make_node("Mul", ["x", "x"], ["y"])
        program, session = _compiled(tmp_path, [node], shape, shape)
        rng = np.random.default_rng(0)
        outputs = []
        for _ in range(3):
            x = rng.standard_normal(shape).astype(np.float32)
            got = program.run({"x": x})["y"]
            (want,) = session.run(None, {"x": x})
            np.testing.assert_array_equal(got, want)
            outputs.append((got, want))
        for got, want in outputs:  # earlier outputs untouched by later runs
            np.testing.assert_array_equal(got, want)


def test_a_bfloat16_input_reaches_the_model(tmp_path):
    """A small input is staged in a kept tensor that is filled after it is wrapped, which is
    right only when the tensor is a view of the buffer. numpy cannot export bfloat16 through
    DLPack, so TVM copied the buffer before it was filled: the model read uninitialised
    memory (ONNX's node tests test_cast_BFLOAT16_to_FLOAT and nine other bfloat16 cases,
    found by `run_node_tests.py --check`). The truth is the input's own float32 value
    (every bfloat16 is exactly a float32), in two runs with different inputs."""
    import ml_dtypes

    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)], "g",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
    )  # fmt: skip
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    compile_model(str(path), target="cpu").save(str(tmp_path / "m.vpub"))
    program = runtime.load(str(tmp_path / "m.vpub"))
    for values in (np.linspace(-3, 3, 12), np.arange(12) * 0.5 + 100):
        x = values.reshape(3, 4).astype(ml_dtypes.bfloat16)
        np.testing.assert_array_equal(program.run({"x": x})["y"], x.astype(np.float32))
