"""Issue 20, item 4: a classifier's Softmax head (DQ -> Softmax -> Q, onnxruntime's
quantize_static with per-channel weights, output scale 1/256 and zero point -128) runs on
the VPU on the targets with a lookup table and on the host on `vpu`, with the reason; the
simulated output is within 1 LSB of the QDQ reference (`vpuc run --check`)."""

from __future__ import annotations

import json

import onnx
import pytest

from tests.e2e.ort_qdq import quantize_qdq
from vpuc.compiler import compile_model
from vpuc.examples.graph_builder import GraphBuilder


def _softmax_head(classes: int, conv_head: bool) -> onnx.ModelProto:
    """Conv, relu, global pool, flatten, FC -> Softmax over `classes` (resnet8's head); or a
    1x1 conv straight into a Softmax over its channels (an NHWC tensor's innermost axis)."""
    b = GraphBuilder(f"softmax_head_{classes}", seed=11)
    y = b.op("Relu", [b.conv("x", "conv1", 3, 16)], "relu1")
    if conv_head:
        logits = b.conv(y, "classifier", 16, classes, kernel=1)
        out = b.op("Softmax", [logits], "softmax", axis=1)
        return b.model({"x": [1, 3, 6, 6]}, {out: [1, classes, 6, 6]})
    flat = b.op("Flatten", [b.op("GlobalAveragePool", [y], "gap")], "flat")
    logits = b.gemm(flat, "fc", 16, classes, output="logits")
    out = b.op("Softmax", [logits], "softmax", axis=-1)
    return b.model({"x": [1, 3, 8, 8]}, {out: [1, classes]})


def _qdq(model: onnx.ModelProto, tmp_path):
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return quantize_qdq(model, tmp_path, shape, seed=2, scale=2.0)[1]


@pytest.mark.parametrize("target,classes", [("vpu", 10), ("vpu-plus", 12), ("u55-256", 10)])
def test_a_softmax_head_runs_on_the_vpu_where_there_is_a_table(vpuc, tmp_path, target, classes):
    qdq_path = _qdq(_softmax_head(classes, conv_head=False), tmp_path)
    artifact = compile_model(qdq_path, target=target, profitability=False)
    ops = {o["name"]: o for o in artifact.report["partition"]["ops"]}
    softmax = ops["softmax"]
    if target == "vpu":
        assert softmax["device"] == "cpu"
        assert softmax["reason"] == (
            "'softmax' is not on the op list of target 'vpu': it needs a 256-entry lookup table, "
            "and this target has none (lut_entries = 0)"
        )
    else:
        assert softmax["device"] == "vpu", softmax["reason"]
        assert ops["softmax_QuantizeLinear"]["device"] == "vpu"
        assert softmax["subgraph"] == ops["fc"]["subgraph"]
    ran = vpuc("run", artifact.save(tmp_path / "m.vpub"), "--check", qdq_path, "--json")
    assert ran.returncode == 0, ran.stderr
    report = json.loads(ran.stdout)
    outputs = report["check"]["qdq"]["outputs"]
    assert report["check"]["passed"] and all(o["max_lsb"] <= 1 for o in outputs), outputs
    if target != "vpu":  # judged layer by layer: the softmax is the subgraph's last layer
        assert outputs[-1]["layer"] == "softmax" and outputs[-1]["output"] == "softmax_QuantizeLinear_Output"
        assert [o["output"] for o in report["check"]["qdq"]["subgraph_outputs"]] == ["softmax_QuantizeLinear_Output"]
        (layer,) = [row for row in report["layers"] if row["name"] == "softmax"]
        assert layer["op"] == "softmax" and layer["cycles"] > 0


def test_a_softmax_over_channels_of_an_nhwc_tensor_runs_on_the_vpu(vpuc, tmp_path):
    """Softmax over axis 1 of an NCHW conv output: after the layout pass the channels are
    the innermost axis, every pixel one row."""
    qdq_path = _qdq(_softmax_head(10, conv_head=True), tmp_path)
    artifact = compile_model(qdq_path, target="u55-256", profitability=False)
    ops = {o["name"]: o for o in artifact.report["partition"]["ops"]}
    assert ops["softmax"]["device"] == "vpu", ops["softmax"]["reason"]
    ran = vpuc("run", artifact.save(tmp_path / "m.vpub"), "--check", qdq_path, "--json")
    assert ran.returncode == 0, ran.stderr
    outputs = json.loads(ran.stdout)["check"]["qdq"]["outputs"]
    assert all(o["max_lsb"] <= 1 for o in outputs) and outputs[-1]["layer"] == "softmax", outputs
