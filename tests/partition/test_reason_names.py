"""Issue 20: the reasons `vpuc partition` gives name what the user's ONNX file names, and a
match refused because it would leak a value says so.

- Names: the code generator's refusals named the tensors of a VPU function by the Relax vars
  the partitioning made ('gv', 'lv12'); they now take the ONNX node of the layer that computes
  them, through the provenance the graph passes kept (compiler/lower/reader/names.py).
- Leaks: a pattern may not take a value that is also read outside it (a VPU layer writes one
  tensor); the refused match left no reason of its own, and the op showed a neighbouring
  match's ("the VPU computes int8 tensors (its result is float32)", the float pattern's).
"""

from __future__ import annotations

import json

import onnx

from tests.e2e.ort_qdq import quantize_qdq
from vpuc.examples.graph_builder import GraphBuilder

SHAPE = [1, 4, 12, 14]


def _fused_relu_read_twice(tmp_path):
    """An onnxruntime QDQ export whose Relu reads the conv's float output directly (a fused
    activation, as exporters write it), the conv's output quantised for a second reader, a
    model output: every conv pattern that would take the Relu or the requantisation leaks
    the conv's output, and the Relu reads a float tensor (before: "'gv' is float32")."""
    b = GraphBuilder("fused", seed=5)
    c = b.conv("x", "c", 4, 4, kernel=3)
    r = b.op("Relu", [c], "r")
    y = b.op("Relu", [b.conv(r, "c2", 4, 4, kernel=1)], "r2")
    folder = tmp_path / "fused"
    folder.mkdir()
    _, qdq_path = quantize_qdq(b.model({"x": SHAPE}, {y: SHAPE, c: SHAPE}), folder, SHAPE)
    model = onnx.load(qdq_path)
    nodes = {n.name: n for n in model.graph.node}
    nodes["r"].input[0] = nodes["c"].output[0]  # the Relu skips the conv's Q -> DQ
    onnx.checker.check_model(model)
    path = folder / "fused.onnx"
    onnx.save(model, path)
    return path


def _partition(vpuc, path, target: str) -> dict:
    ran = vpuc("partition", path, "--target", target, "--json", "--no-profitability")
    assert ran.returncode == 0, ran.stderr
    return {o["name"]: o for o in json.loads(ran.stdout)["ops"]}


def test_a_match_refused_for_a_leak_gives_its_own_reason(vpuc, tmp_path):
    ops = _partition(vpuc, _fused_relu_read_twice(tmp_path), "vpu")
    reason = ops["c"]["reason"]
    assert ops["c"]["device"] == "cpu"
    assert "vpu.conv2d_bias_act_q: 'c' is also read outside it, by 'c_QuantizeLinear'" in reason, reason
    assert "vpu.conv2d_bias_q: 'c' is also read outside it, by 'r'" in reason, reason
