"""Issue 21: depthwise convs whose tiles the MAC array and the vector unit's vconv share
(docs/targets.md, "Depthwise on the vector unit"). A net of depthwise convs, stride 1 and 2,
'same' padding, 24 and 40 channels (not multiples of the 16- and 32-wide array nor of the
32 lanes), per-channel weights from onnxruntime's quantize_static, is compiled for each VPU
target, run on the simulator and checked against the QDQ reference (`vpuc run --check`):
each depthwise layer exact on its inputs on the float32-requantising vpu and vpu-plus.
On vpu and vpu-plus the programs use vconv; u55-256 has no vector multiply-accumulate and
keeps its depthwise on the MAC array."""

from __future__ import annotations

import onnx
import pytest
from test_whole_models import TARGETS, _run_check

from tests.e2e.ort_qdq import quantize_qdq
from vpuc.compiler import compile_model
from vpuc.examples.graph_builder import GraphBuilder
from vpuc.targets import load_target
from vpuc.targets.isa.formats import Opcode
from vpuc.targets.isa.program import Program


def _depthwise_net() -> onnx.ModelProto:
    b = GraphBuilder("depthwise_net", seed=11)
    y = b.op("Relu", [b.conv("x", "pw0", 3, 24, kernel=1)], "relu0")
    y = b.op("Relu", [b.conv(y, "dw1", 24, 24, group=24)], "relu1")
    y = b.op("Relu", [b.conv(y, "pw1", 24, 40, kernel=1)], "relu2")
    y = b.op("Relu", [b.conv(y, "dw2", 40, 40, stride=2, group=40)], "relu3")
    y = b.op("Relu", [b.conv(y, "dw3", 40, 40, group=40)], "relu4", output="y")
    return b.model({"x": [1, 3, 20, 20]}, {y: [1, 40, 10, 10]})


@pytest.mark.parametrize("target", TARGETS)
def test_depthwise_convs_on_both_units_match_the_qdq_reference(vpuc, tmp_path, target):
    _, qdq_path = quantize_qdq(_depthwise_net(), tmp_path, [1, 3, 20, 20])
    artifact = compile_model(qdq_path, target=target, profitability=False)
    ops = {o["name"]: o for o in artifact.report["partition"]["ops"]}
    assert all(ops[n]["device"] == "vpu" for n in ("dw1", "dw2", "dw3")), ops
    opcodes = {
        i.opcode
        for entry in artifact.manifest["vpu_programs"]
        for i in Program.from_bytes(artifact.members[entry["program"]]).instructions
    }
    assert (Opcode.VCONV in opcodes) == (target != "u55-256"), (target, opcodes)
    report = _run_check(vpuc, artifact.save(tmp_path / "m.vpub"), qdq_path)
    layers = {o["layer"]: o for o in report["check"]["qdq"]["outputs"] if "layer" in o}
    # each depthwise layer on its inputs as the VPU had them: every element exact where the
    # target requantises in float32 as the reference does (u55-256: TFLite fixed point)
    exact = load_target(target).numerics.requant == "float32"
    assert all(layers[n]["max_lsb"] <= (0 if exact else 1) for n in ("dw1", "dw2", "dw3")), layers
