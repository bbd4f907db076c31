"""The default CPU schedule and TVM 0.27's LLVM backend: which float intrinsics cannot be
vectorised, and a model calling one still builds and is right (against onnxruntime)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tvm
import tvm.s_tir as s_tir
from onnx import TensorProto, helper
from tvm import te, tirx

from vpuc.compiler.host.defaults import NO_VECTOR_INTRINSICS

FLOAT_INTRINSICS = [
    "exp", "exp2", "exp10", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos",
    "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "erf",
    "sigmoid", "floor", "ceil", "round", "trunc", "nearbyint", "isnan", "isinf", "isfinite",
]  # fmt: skip


def _vectorised_builds(name: str) -> bool:
    a = te.placeholder((3, 8), name="A")
    b = te.compute((3, 8), lambda i, j: getattr(tirx, name)(a[i, j]), name="B")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([a, b])}))
    sch.vectorize(sch.get_loops(sch.get_sblock("B"))[-1])
    try:
        tvm.tirx.build(sch.mod, target="llvm")
    except Exception:  # noqa: BLE001 - TVM raises its own error kinds from codegen
        return False
    return True


def test_the_no_vector_list_is_exactly_what_llvm_cannot_vectorise():
    failing = {name for name in FLOAT_INTRINSICS if not _vectorised_builds(name)}
    listed = {name for name in FLOAT_INTRINSICS if NO_VECTOR_INTRINSICS.search(f"T.{name}(x)")}
    assert failing == listed


@pytest.mark.parametrize("op", ["Sinh", "Cosh"])
def test_a_model_calling_a_no_vector_intrinsic_builds_and_matches_onnxruntime(op, tmp_path):
    from vpuc import runtime
    from vpuc.compiler import compile_model

    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 16])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3, 16])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    x = np.random.default_rng(0).uniform(-3, 3, (2, 3, 16)).astype(np.float32)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    (expected,) = ort.InferenceSession(str(path), options).run(None, {"x": x})
    compile_model(str(path), target="cpu").save(str(tmp_path / "m.vpub"))
    got = runtime.load(str(tmp_path / "m.vpub")).run({"x": x})["z"]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
