"""Slice with starts/ends far outside the axis, or an end before the start, answers as ONNX's
reference evaluator does (the spec: numpy's slicing). TVM's importer narrowed -2^62 to 0 (an
empty slice where ONNX takes the whole axis backwards: fuzzer case cpu-e4c8ee58bf) and its
build failed on an end before the start; frontend/fixes/conversions.py clamps them first.
(onnxruntime itself differs from the spec for a start of INT64_MIN with a negative step.)"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from vpuc import runtime
from vpuc.compiler import compile_model

BIG = 2**62
CASES = [  # (start, end) along axis 0 of a 3-row input, each with step -1 and +1
    (-2, -BIG), (-2, -4), (2, -4), (-1, -1000), (5, -BIG), (0, BIG),
    (BIG, 0), (1, -1), (2, 0), (0, 0), (-(2**63), 2**63 - 1),
]  # fmt: skip


def test_out_of_range_bounds_follow_the_spec(tmp_path):
    nodes, inits, outputs = [], [], []
    for k, (start, end) in enumerate(CASES):
        for step in (-1, 1):
            name = f"y{k}_{'neg' if step < 0 else 'pos'}"
            params = [(f"{name}_{p}", [v]) for p, v in (("s", start), ("e", end), ("a", 0), ("t", step))]
            inits += [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in params]
            nodes.append(helper.make_node("Slice", ["x", *(n for n, _ in params)], [name]))
            outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [None, 2]))
    graph = helper.make_graph(
        nodes, "slices", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2])], outputs, inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "m.onnx")
    compile_model(str(tmp_path / "m.onnx"), target="cpu").save(str(tmp_path / "m.vpub"))
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    got = runtime.load(str(tmp_path / "m.vpub")).run({"x": x})
    want = dict(zip([o.name for o in outputs], ReferenceEvaluator(model).run(None, {"x": x}), strict=True))
    for name, expected in want.items():
        assert got[name].shape == expected.shape, name
        np.testing.assert_array_equal(got[name], expected, err_msg=name)
