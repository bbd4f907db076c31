"""Graph outputs no node computes: an input passed straight through, a constant, one output
listed twice. onnxruntime runs the first two; vpuc said "'x' has a dynamic shape ([])" of a
model whose shapes were all static (fix_input_shapes cleared the outputs' shapes for shape
inference, which has no node to infer such an output from). Now both compile and match
onnxruntime; an output listed twice is one line naming it, exit 2."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from vpuc.compiler import cli
from vpuc.runtime import load
from vpuc.runtime.inputs import random_inputs


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _value(name: str, dims) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


CONSTANT = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5

CASES = {
    # the input itself is the second output (its dim given by --input-shape)
    "passthrough": (
        _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [_value("x", ["n", 8])],
               [_value("y", ["n", 8]), _value("x", ["n", 8])]),
        ["--input-shape", "x=2x8"],
    ),
    # a constant is the second output
    "constant": (
        _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [_value("x", [1, 8])],
               [_value("y", [1, 8]), _value("c", [2, 3])], [numpy_helper.from_array(CONSTANT, "c")]),
        [],
    ),
}  # fmt: skip


@pytest.mark.parametrize("target", ["cpu", "vpu"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_outputs_no_node_computes_match_onnxruntime(case, target, tmp_path, capsys):
    model, flags = CASES[case]
    source, artifact = tmp_path / f"{case}.onnx", tmp_path / f"{case}.vpub"
    onnx.save(model, source)
    assert cli.main(["compile", str(source), "--target", target, "-o", str(artifact), *flags]) == 0
    loaded = load(artifact)
    feeds = random_inputs(loaded.inputs, 1)
    session = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    expected = dict(zip([o.name for o in model.graph.output], session.run(None, feeds), strict=True))
    got = loaded.run(feeds)
    assert set(got) == set(expected)
    # the passed-through or constant output is exact; the Relu within the int8 artifact's LSB
    last = model.graph.output[1].name
    np.testing.assert_array_equal(got[last], expected[last])
    np.testing.assert_allclose(got["y"], expected["y"], atol=0.05 if target == "vpu" else 1e-6)
    capsys.readouterr()
    assert cli.main(["run", str(artifact), "--check", str(source)]) == 0
    assert "PASS" in capsys.readouterr().out


def test_an_output_listed_twice_is_named(tmp_path, capsys):
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [_value("x", [1, 8])],
                   [_value("y", [1, 8]), _value("y", [1, 8])])  # fmt: skip
    source, artifact = tmp_path / "twice.onnx", tmp_path / "twice.vpub"
    onnx.save(model, source)
    assert cli.main(["compile", str(source), "-o", str(artifact)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"vpuc compile: {source}: output 'y' is listed twice among the graph's outputs; list it once"]
    assert not artifact.exists()
