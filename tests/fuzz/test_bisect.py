"""The fuzzer's opt-bisect names the first graph pass whose output differs from onnxruntime:
here a pass made wrong on purpose (relu -> sigmoid) in the place of `gelu`."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import tvm
from fuzz_check import first_bad_pass
from fuzz_graphs import random_inputs
from onnx import TensorProto, helper, numpy_helper
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from vpuc.compiler import pipeline


@mutator
class _ReluToSigmoid(PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.nn.relu":
            return relax.op.sigmoid(call.args[0])
        return call


def _broken_pass(mod, options):
    mutator_ = _ReluToSigmoid()
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = mutator_.visit_expr(func)
    return mod


def _conv_relu() -> onnx.ModelProto:
    weight = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w"
    )
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["y"]),
        ],
        "conv_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
        [weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_bisect_names_the_broken_pass(monkeypatch):
    steps = tuple(
        dataclasses.replace(step, run=_broken_pass) if step.name == "gelu" else step
        for step in pipeline.PIPELINE
    )
    monkeypatch.setattr(pipeline, "PIPELINE", steps)
    model = _conv_relu()
    found = first_bad_pass(model, "cpu", random_inputs(model, 0), "float")
    assert found["first_bad_pass"] == "gelu", found


def test_bisect_of_a_correct_compile():
    model = _conv_relu()
    found = first_bad_pass(model, "cpu", random_inputs(model, 0), "float")
    assert found["first_bad_pass"] is None and "passes with every graph pass" in found["verdict"]
