"""The frontend on what real exporters write: nameless nodes, inputs bound to constants, If
nodes a constant condition decides, dynamic shapes named at their source, and the integer
ops of dynamically quantised models (checked against numpy and onnx's reference
evaluator: onnxruntime's u8s8 MatMulInteger saturates int16 pairs on CPUs without VNNI)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from vpuc.compiler.driver import compile_model
from vpuc.compiler.errors import FrontendError
from vpuc.compiler.frontend import import_model, parse_bind_input
from vpuc.runtime.executor import Executable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from corpus import float_cnn, vad_like  # noqa: E402


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model: onnx.ModelProto, feeds: dict, **options) -> list[np.ndarray]:
    artifact = compile_model(model, "cpu", **options)
    return list(Executable(artifact).run(feeds).values())


def test_nameless_and_repeated_nodes_get_stable_names():
    model = float_cnn(with_names=False)
    model.graph.node[3].name = "pool"
    model.graph.node[4].name = "pool"  # a repeat
    imported = import_model(model)
    names = [node.name for node in imported.onnx_model.graph.node]
    assert names[:5] == ["Conv_0", "BatchNormalization_1", "Relu_2", "pool", "pool_4"]
    assert len(set(names)) == len(names)
    assert set(imported.var_to_node.values()) <= set(names)
    assert not model.graph.node[0].name  # the caller's model is left alone


def test_bind_input_folds_an_if_on_it():
    imported = import_model(vad_like(), bound_inputs={"sr": "16000"})
    assert [spec.name for spec in imported.inputs] == ["x"]
    assert imported.outputs[0].shape == (1, 16)
    assert ("by_rate", "If") in imported.folded_nodes
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    (got,) = _run(vad_like(), {"x": x}, bound_inputs={"sr": "8000"})
    expected = ReferenceEvaluator(vad_like()).run(None, {"x": x, "sr": np.array([8000], np.int64)})[0]
    np.testing.assert_array_equal(got, expected)
    assert got.shape == (2, 8)


def test_an_if_decided_at_run_time_is_named_with_the_input_it_depends_on():
    with pytest.raises(FrontendError) as error:
        import_model(vad_like())
    message = str(error.value)
    assert "node 'by_rate' (If) gives 'branch' a shape known only at run time" in message
    assert "--bind-input sr=VALUE" in message


@pytest.mark.parametrize(
    "spec, problem",
    [("sr=1.5", "does not fit the input's dtype int64"), ("sr=1,2", "2 values for an input of shape [1]"),
     ("rate=1", "not an input (inputs: x, sr)"), ("sr=fast", "is not a number")],
)  # fmt: skip
def test_bad_bind_input_names_the_input(spec, problem):
    with pytest.raises(FrontendError) as error:
        import_model(vad_like(), bound_inputs=dict([parse_bind_input(spec)]))
    assert problem in str(error.value)


def test_a_dynamic_shape_names_the_node_it_comes_from():
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name="find"), helper.make_node("Relu", ["nz"], ["y"])]
    model = _model(
        nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, ["a", "b"])],
    )  # fmt: skip
    with pytest.raises(
        FrontendError, match="node 'find' \\(NonZero\\) gives 'nz' a shape known only at run time"
    ):
        import_model(model)


def _integer_model(op: str, a_shape, b, zeros, attrs=None, domain="") -> onnx.ModelProto:
    a_type = TensorProto.UINT8
    out = TensorProto.INT32 if op in ("MatMulInteger", "ConvInteger") else TensorProto.FLOAT
    inputs = ["a", "b", *zeros]
    inits = [numpy_helper.from_array(b, "b")]
    inits += [numpy_helper.from_array(np.asarray(v), n) for n, v in zeros.items()]
    node = helper.make_node(op, inputs, ["y"], domain=domain, **(attrs or {}))
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("a", a_type, a_shape)],
        [helper.make_tensor_value_info("y", out, ["d0", "d1", "d2", "d3"][: len(a_shape)])], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=opsets)


def test_matmul_integer_is_exact():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (2, 300)).astype(np.uint8)
    b = rng.integers(-128, 128, (300, 5)).astype(np.int8)
    model = _integer_model("MatMulInteger", [2, 300], b, {"za": np.uint8(7), "zb": np.int8(3)})
    (got,) = _run(model, {"a": a})
    np.testing.assert_array_equal(got, (a.astype(np.int64) - 7) @ (b.astype(np.int64) - 3))


def test_conv_integer_is_exact():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (1, 3, 8, 8)).astype(np.uint8)
    w = rng.integers(-128, 128, (4, 3, 3, 3)).astype(np.int8)
    model = _integer_model(
        "ConvInteger", [1, 3, 8, 8], w, {"zx": np.uint8(9), "zw": np.int8(-2)}, {"pads": [1] * 4}
    )
    (got,) = _run(model, {"a": x})
    expected = ReferenceEvaluator(model).run(None, {"a": x})[0]
    np.testing.assert_array_equal(got, expected)


def test_matmul_integer_to_float_and_dynamic_quantize_matmul():
    """The com.microsoft ops onnxruntime's optimiser writes for quantize_dynamic models,
    against their definition computed here with numpy."""
    rng = np.random.default_rng(2)
    b = rng.integers(-128, 128, (16, 4)).astype(np.int8)
    scale_b, bias = np.float32(0.02), rng.standard_normal(4).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("DynamicQuantizeMatMul", ["x", "b", "sb", "zb", "bias"], ["y"], domain="com.microsoft")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        [numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.array(scale_b), "sb"),
         numpy_helper.from_array(np.array(0, np.int8), "zb"), numpy_helper.from_array(bias, "bias")],
    )  # fmt: skip
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    x = rng.standard_normal((3, 16)).astype(np.float32)
    (got,) = _run(model, {"x": x})
    lo, hi = min(0.0, float(x.min())), max(0.0, float(x.max()))
    scale = np.float32((hi - lo) / 255)
    zero = np.clip(np.rint(-lo / scale), 0, 255)
    q = np.clip(np.rint(x / scale) + zero, 0, 255)
    expected = ((q - zero) @ b.astype(np.float64)) * (scale * scale_b) + bias
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
