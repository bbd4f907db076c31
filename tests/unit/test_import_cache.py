"""The Relax import memo (frontend/importer.py): the same prepared model and input specs are
imported once per process, and each caller gets a module of its own."""

from __future__ import annotations

from pathlib import Path

import onnx
import tvm
from onnx import helper
from tvm import relax

from vpuc.compiler.frontend import import_model, importer

MODEL = Path(__file__).resolve().parent.parent / "fixtures" / "tf2onnx" / "tflite_dscnn.onnx"


def _counting(monkeypatch) -> list:
    calls = []
    real = importer.compat.relax_from_onnx

    def counting(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(importer.compat, "relax_from_onnx", counting)
    return calls


def test_a_model_imports_once_and_each_caller_gets_its_own_module(monkeypatch):
    calls = _counting(monkeypatch)
    first = import_model(MODEL)
    second = import_model(str(MODEL))  # the same bytes by another spelling of the path
    assert len(calls) == 1
    assert first.mod is not second.mod and first.var_to_node == second.var_to_node
    first.mod["main"] = relax.Function([], relax.Tuple([]))  # a caller writes into its module
    first.var_to_node.clear()
    third = import_model(MODEL)
    assert len(calls) == 1
    monkeypatch.setattr(importer, "_IMPORTED", {})
    cold = import_model(MODEL)
    assert len(calls) == 2
    tvm.ir.assert_structural_equal(third.mod, cold.mod)
    tvm.ir.assert_structural_equal(second.mod, cold.mod)
    assert third.var_to_node == cold.var_to_node


def test_other_bytes_or_shapes_import_again(monkeypatch, tmp_path):
    calls = _counting(monkeypatch)
    import_model(MODEL)
    model = onnx.load(MODEL)
    model.graph.initializer[0].raw_data = bytes(len(model.graph.initializer[0].raw_data))  # other weights
    changed = tmp_path / "changed.onnx"
    onnx.save(model, changed)
    import_model(changed)
    assert len(calls) == 2
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n", 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y])
    dynamic = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for batch in (1, 2, 1):
        import_model(dynamic, input_shapes={"x": (batch, 4)})
    assert len(calls) == 4  # batch 1 and batch 2, each once
