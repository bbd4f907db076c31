"""`vpuc run` inputs and outputs that would otherwise be silently wrong: default random ids
that index past an embedding table, user ids outside it, NaN/Inf outputs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from vpuc.compiler import cli
from vpuc.runtime.artifact import Artifact
from vpuc.runtime.inputs import random_inputs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from corpus import embedding_net  # noqa: E402


def _compiled(model: onnx.ModelProto, tmp_path: Path, name: str) -> tuple[Path, Path]:
    source, artifact = tmp_path / f"{name}.onnx", tmp_path / f"{name}.vpub"
    onnx.save(model, source)
    assert cli.main(["compile", str(source), "-o", str(artifact), "--json"]) == 0
    return source, artifact


def test_random_ids_stay_inside_the_table(tmp_path, capsys):
    source, artifact = _compiled(embedding_net(), tmp_path, "embed")
    manifest_inputs = Artifact.load(artifact).inputs
    assert manifest_inputs[0]["index_range"] == 5
    for seed in range(5):
        ids = random_inputs(manifest_inputs, seed)["ids"]
        assert ids.min() >= 0 and ids.max() < 5
    capsys.readouterr()
    assert cli.main(["run", str(artifact), "--check", str(source), "--seed", "3"]) == 0
    assert "PASS" in capsys.readouterr().out


def test_ids_outside_the_table_are_refused(tmp_path, capsys):
    _, artifact = _compiled(embedding_net(), tmp_path, "embed")
    inputs = tmp_path / "ids.npz"
    np.savez(inputs, ids=np.array([[0, 1, 2, 3, 4, 9]], np.int64))
    capsys.readouterr()
    assert cli.main(["run", str(artifact), "--inputs", str(inputs)]) == 2
    assert "input 'ids': 1 of 6 values are outside [-5, 5)" in capsys.readouterr().err


def test_int8_inputs_span_their_range():
    (ids,) = random_inputs([{"name": "q", "shape": [4096], "dtype": "int8"}], 0).values()
    assert ids.min() == -128 and ids.max() == 127


def test_nonfinite_outputs_are_reported_and_fail_unless_allowed(tmp_path, capsys):
    nodes = [helper.make_node("Log", ["x"], ["y"], name="log")]  # log of a negative number is NaN
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
    )  # fmt: skip
    _, artifact = _compiled(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path, "log"
    )
    capsys.readouterr()
    assert cli.main(["run", str(artifact)]) == 1
    err = capsys.readouterr().err
    assert "warning: output 'y':" in err and "of 64 values are NaN or Inf" in err
    assert cli.main(["run", str(artifact), "--allow-nonfinite"]) == 0
