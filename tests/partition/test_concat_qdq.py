"""Issue 20 (fuzzer finding): a Concat of a QDQ model runs on the VPU, also where one of its
dequantized inputs is read by a Conv as well.

onnxruntime's quantiser writes `DQ(a), DQ(b) -> Concat -> Q`; the concat's composite must take
the dequantizes of its tuple's fields, or the code generator sees float inputs and refuses it
("the VPU computes int8 tensors"). A dequantize read by the Concat and by a Conv needs a copy
for each (prepare.py), the concat's read being a field of the tuple it concatenates; without
the copy neither composite may take it and both went to the CPU (the Conv with the reason of
its bias Add). Each model is built here as a user's int8 export is (onnxruntime's
quantize_static), compiled as `vpuc compile --no-profitability` would, the partition asserted,
and run on the simulator against the QDQ reference (`vpuc run --check`: within 1 LSB)."""

from __future__ import annotations

import json

import pytest

from tests.e2e.ort_qdq import quantize_qdq
from vpuc.compiler import compile_model
from vpuc.examples.graph_builder import GraphBuilder

SHAPE = [1, 4, 12, 14]


def _concat_model(shared: bool):
    """x -> two 1x1 convs -> Concat -> 1x1 conv; `shared`: the first branch is also read by
    a 1x3 conv (a second output)."""
    b = GraphBuilder("concat_qdq", seed=3)
    other = b.op("Relu", [b.conv("x", "pre2", 4, 4, kernel=1)], "pre2_relu")
    branch = b.op("Relu", [b.conv("x", "pre3", 4, 4, kernel=1)], "pre3_relu")
    cat = b.op("Concat", [branch, other], "cat", axis=1)
    outs = {b.op("Relu", [b.conv(cat, "post", 8, 8, kernel=1)], "post_relu"): [1, 8, 12, 14]}
    if shared:
        w = b.he_weight("wide.weight", (8, 4, 1, 3), 12)
        y = b.op(
            "Conv", [branch, w, b.small_bias("wide.bias", 8)], "wide", kernel_shape=[1, 3], pads=[0, 1, 0, 1]
        )
        outs[b.op("Relu", [y], "relu")] = [1, 8, 12, 14]
    return b.model({"x": SHAPE}, outs)


@pytest.mark.parametrize("target", ["vpu", "vpu-plus"])
@pytest.mark.parametrize("shared", [False, True], ids=["alone", "shared_with_conv"])
def test_a_qdq_concat_runs_on_the_vpu(vpuc, tmp_path, target, shared):
    _, qdq_path = quantize_qdq(_concat_model(shared), tmp_path, SHAPE)
    artifact = compile_model(qdq_path, target=target, profitability=False)
    ops = {o["name"]: o for o in artifact.report["partition"]["ops"]}
    layers = ["cat", "cat_QuantizeLinear", "post", "pre2", "pre3"] + (["wide"] if shared else [])
    for name in layers:
        assert ops[name]["device"] == "vpu", (name, ops[name]["reason"])
    # the concat's dequantizes are inside its composite: no float tensor crosses to the host
    for name in ("pre2_relu_DequantizeLinear", "pre3_relu_DequantizeLinear"):
        assert ops[name]["device"] == "vpu", (name, ops[name]["reason"])
    assert ops["cat"]["subgraph"] == ops["post"]["subgraph"]
    if shared:
        assert ops["wide"]["reason"].startswith("vpu.conv2d_bias"), ops["wide"]["reason"]
    ran = vpuc("run", artifact.save(tmp_path / "m.vpub"), "--check", qdq_path, "--json")
    assert ran.returncode == 0, ran.stderr
    check = json.loads(ran.stdout)["check"]
    assert check["passed"], json.dumps(check, indent=1)
    assert all(o["max_lsb"] <= 1 for o in check["qdq"]["outputs"]), check["qdq"]


def test_a_concat_the_code_generator_cannot_lay_out_stays_on_the_cpu_with_its_reason(vpuc, tmp_path):
    """Concat(a, a) with `a` also a model output: a concat's inputs are written into its
    channel slices, so each must be an op's own output read by no other concat and not a
    subgraph output. The code generator's refusal names the layer, so the partitioner keeps
    it on the CPU (before, the compile failed: 'VPU lowering failed')."""
    b = GraphBuilder("concat_twice", seed=5)
    a = b.op("Relu", [b.conv("x", "a", 4, 4, kernel=1)], "a_relu")
    cat = b.op("Concat", [a, a], "cat", axis=1)
    y = b.op("Relu", [b.conv(cat, "post", 8, 8, kernel=1)], "post_relu")
    _, qdq_path = quantize_qdq(b.model({"x": SHAPE}, {y: [1, 8, 12, 14], a: SHAPE}), tmp_path, SHAPE)
    artifact = compile_model(qdq_path, target="vpu", profitability=False)
    ops = {o["name"]: o for o in artifact.report["partition"]["ops"]}
    assert ops["cat"]["device"] == "cpu"
    assert "is also an output of the VPU subgraph" in ops["cat"]["reason"], ops["cat"]["reason"]
    assert ops["a"]["device"] == ops["post"]["device"] == "vpu"
    ran = vpuc("run", artifact.save(tmp_path / "m.vpub"), "--check", qdq_path, "--json")
    assert ran.returncode == 0, ran.stderr
    check = json.loads(ran.stdout)["check"]
    assert check["passed"], json.dumps(check, indent=1)
