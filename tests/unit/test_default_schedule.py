"""The default CPU schedule and TVM 0.27's LLVM backend: which float intrinsics cannot be
vectorised, and a model calling one still builds and is right (against onnxruntime)."""

from __future__ import annotations

import re

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


def _unrolled_extents(func) -> list[int]:
    return [int(n) for n in re.findall(r"T\.unroll\((\d+)\)", func.script())]


@pytest.mark.parametrize(("lanes", "rows", "vectors"), [(8, 4, 2), (16, 4, 4)])
def test_the_register_tile_fills_the_vector_registers(lanes, rows, vectors):
    """A matmul's register tile is rows x vectors accumulators (rows of A, each one broadcast
    load; vectors of C's row, each one vector load), the most FMAs per load whose
    accumulators and loads fit the vector registers: 4 x 2 of AVX2's 16, 4 x 4 of
    AVX-512's 32 (6 x 4 needs a row count 6 divides); the scheduled kernel still computes A @ B."""
    from vpuc.compiler.host.defaults import ScheduleOptions, default_schedule

    a = te.placeholder((32, 24), name="A")
    b = te.placeholder((24, 64), name="B")
    k = te.reduce_axis((0, 24), name="k")
    c = te.compute((32, 64), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    func = default_schedule(te.create_prim_func([a, b, c]), ScheduleOptions(vector_lanes=lanes, num_cores=1))
    assert _unrolled_extents(func) == [rows, vectors] * 2  # the init and the update
    lib = tvm.tirx.build(func.with_attr("global_symbol", "main"), target="llvm")
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((32, 24), np.float32), rng.standard_normal((24, 64), np.float32)
    out = tvm.runtime.tensor(np.zeros((32, 64), np.float32))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(y), out)
    np.testing.assert_allclose(out.numpy(), x @ y, rtol=1e-5, atol=1e-5)
