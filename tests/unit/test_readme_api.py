"""The README's Python API example runs as written (it once used an undefined `x`), on a
small model saved as model.onnx with an input x of 1x3x224x224 and calibration data."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[2]


def _example() -> str:
    (code,) = re.findall(
        r"## Python API\n\n```python\n(.+?)\n```", (REPO / "README.md").read_text(), flags=re.S
    )
    return code


def _model(path: Path) -> None:
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) / 5).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], strides=[4, 4], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["y"], name="pool"),
    ]
    graph = helper.make_graph(
        nodes,
        "readme",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])],
        [weight],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_python_api_example_runs_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _model(tmp_path / "model.onnx")
    samples = np.random.default_rng(1).standard_normal((4, 1, 3, 224, 224)).astype(np.float32)
    np.savez(tmp_path / "calib.npz", x=samples)
    namespace: dict = {}
    exec(compile(_example(), "README.md", "exec"), namespace)
    assert set(namespace["outputs"]) == {"y"} and namespace["outputs"]["y"].shape == (1, 4, 1, 1)
    assert (tmp_path / "model.vpub").exists()
    assert "sqnr_db" in capsys.readouterr().out
