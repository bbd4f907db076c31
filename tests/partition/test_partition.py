"""The partitioner on models of the shapes users bring: which op runs where and why, the
subgraphs, and every boundary with its int8 bytes (computed here by hand from the shapes)."""

from __future__ import annotations

import json

from partition_models import opzoonet_shaped, strided_conv_model, tinyconvnet_shaped  # noqa: I001

from vpuc.compiler.partition.draw import to_dot


def test_tinyconvnet_raw_cut(partition):
    report = partition(tinyconvnet_shaped())
    # 'vpu' has no global_avg_pool: the pool over 4x4 becomes a depthwise 4x4 conv with
    # weights 1/16 (decompose.py), so the whole net is one VPU subgraph. Boundaries: input
    # 1x3x16x16 (768 int8 B) in, logits 1x4 (4 B) out.
    assert report["raw_totals"] == {
        "vpu_ops": 13,
        "cpu_ops": 0,
        "subgraphs": 1,
        "boundaries": 2,
        "bytes": 768 + 4,
    }
    gap = next(op for op in report["ops"] if op["name"] == "head/gap")
    assert gap["device"] == "vpu" and "mean over 4x4 as depthwise conv 4x4" in gap["reason"]


def test_tinyconvnet_final_decision_keeps_the_whole_net(partition):
    report = partition(tinyconvnet_shaped())
    (net,) = report["subgraphs"]
    assert net["ops"][:3] == ["stage1/conv", "stage1/relu", "stage2/conv"]
    assert {"stage4/pool", "head/gap", "head/fc"} <= set(net["ops"])
    boundaries = {(b["direction"], b["tensor"]): b for b in report["boundaries"]}
    # The VPU computes in NHWC: the input crosses in NHWC (the host's transpose, or the
    # code generator's strided DMA: compiler/lower/reader/edges.py), the logits come back.
    entry = boundaries[("CPU->VPU", "input (transposed)")]
    assert (entry["producer"], entry["shape"], entry["bytes"]) == ("input:input", [1, 16, 16, 3], 768)
    assert boundaries[("VPU->CPU", "output")] == {
        "direction": "VPU->CPU", "tensor": "output", "producer": "head/fc", "consumer": "output:output",
        "shape": [1, 4], "dtype": "int8", "bytes": 4,
    }  # fmt: skip
    (verdict,) = report["profitability"]
    # The decision follows the figures: VPU time plus the transfers it adds vs CPU time.
    vpu_side = verdict["vpu_us"] + verdict["transfer_us"]
    assert (verdict["decision"] == "vpu") == (vpu_side <= verdict["cpu_us"])
    totals = report["totals"]
    assert totals["vpu_ops"] + totals["cpu_ops"] == 13
    assert totals["bytes"] == sum(b["bytes"] for b in report["boundaries"])


def test_json_keys_are_exactly_the_documented_ones(partition):
    report = json.loads(json.dumps(partition(tinyconvnet_shaped())))
    assert {"ops", "subgraphs", "boundaries", "totals", "raw_totals"} <= set(report)
    assert all(
        set(op) == {"name", "op", "device", "subgraph", "reason", "inputs", "outputs"} for op in report["ops"]
    )
    assert all(set(s) == {"id", "ops"} for s in report["subgraphs"])
    assert all(
        set(b) == {"direction", "tensor", "producer", "consumer", "shape", "dtype", "bytes"}
        for b in report["boundaries"]
    )
    for key in ("totals", "raw_totals"):
        assert set(report[key]) == {"vpu_ops", "cpu_ops", "subgraphs", "boundaries", "bytes"}


def test_opzoonet_is_cut_into_pieces_each_judged(partition):
    report = partition(opzoonet_shaped(), min_subgraph_ops=1)
    raw = report["raw_totals"]
    ops = report["ops"]
    # The activations the VPU lacks, the average pool and the softmax stay on the CPU (half of
    # the ops); the mean over H and W becomes depthwise convs (decompose.py).
    cpu = {op["name"] for op in ops if op["device"] == "cpu"}
    assert {"sig1", "leaky1", "avg1", "sig2", "mul1", "tanh1", "softmax"} <= cpu
    assert raw["cpu_ops"] >= len(ops) / 2
    assert "as depthwise conv" in next(op["reason"] for op in ops if op["name"] == "mean1")
    # Every VPU-capable op sits between unsupported ones: small subgraphs.
    assert raw["subgraphs"] >= 4
    assert len(report["profitability"]) == raw["subgraphs"]
    reasons = {op["name"]: op["reason"] for op in ops}
    assert reasons["sig1"] == (
        "'sigmoid' is not on the op list of target 'vpu': it needs a 256-entry lookup table, "
        "and this target has none (lut_entries = 0)"
    )
    assert reasons["softmax"].startswith("'softmax' is not on the op list of target 'vpu': it needs a 256-entry")
    assert reasons["mm2"] != "" and reasons["avg1"] == "'avg_pool2d' is not on the op list of target 'vpu'"


def test_min_subgraph_ops_keeps_small_subgraphs_on_the_cpu(partition):
    report = partition(opzoonet_shaped(), min_subgraph_ops=3)
    small = [v for v in report["profitability"] if v["onnx_ops"] < 3]
    assert small and all(v["decision"] == "cpu" and "below the minimum of 3" in v["reason"] for v in small)
    assert all(op["device"] != "vpu" or op["subgraph"] is not None for op in report["ops"])


def test_vpu_plus_has_fewer_cpu_ops_and_boundaries(partition):
    base = partition(opzoonet_shaped(), "vpu", profitability=False)["raw_totals"]
    plus = partition(opzoonet_shaped(), "vpu-plus", profitability=False)["raw_totals"]
    assert plus["cpu_ops"] < base["cpu_ops"]
    assert plus["boundaries"] < base["boundaries"]
    # tinyconvnet is all VPU on both ('vpu' by the pool's decomposition).
    for target in ("vpu", "vpu-plus"):
        assert partition(tinyconvnet_shaped(), target, profitability=False)["raw_totals"]["cpu_ops"] == 0


def test_constraint_violation_is_the_reason(partition):
    report = partition(strided_conv_model(stride=4), profitability=False)
    conv = next(op for op in report["ops"] if op["name"] == "conv")
    assert conv["device"] == "cpu"
    assert conv["reason"] == "Stride must be between 1 and 3 in both H and W (got 4x4)"
    ok = partition(strided_conv_model(stride=2), profitability=False)
    assert all(op["device"] == "vpu" for op in ok["ops"])


def test_drawing_clusters_subgraphs_and_labels_crossings(partition):
    model = opzoonet_shaped()
    report = partition(model, profitability=False)
    dot = to_dot(report, model).source
    # One cluster per VPU subgraph; a dashed edge per crossing, labelled with its bytes: 10
    # boundaries, and c3's output crosses once but feeds two CPU ops (sig2, mul1).
    assert dot.count("subgraph cluster_vpu") == report["raw_totals"]["subgraphs"] == 5
    assert report["totals"]["boundaries"] == 10 and dot.count("style=dashed") == 11
    for boundary in report["boundaries"]:
        assert f'label="{boundary["bytes"]} B"' in dot


def test_two_outputs_cross_back_once_each(partition):
    """A model returning an intermediate and the final tensor: both leave the VPU for the host."""
    from onnx import TensorProto, helper
    from partition_models import Builder

    b = Builder([1, 3, 8, 8])
    b.conv("c1", 3, 8)
    relu = b.node("Relu", "r1")
    b.node("MaxPool", "p1", kernel_shape=[2, 2], strides=[2, 2])
    model = b.model([1, 8, 4, 4])
    model.graph.output.append(helper.make_tensor_value_info(relu, TensorProto.FLOAT, [1, 8, 8, 8]))
    report = partition(model, profitability=False)
    rows = {(x["direction"], x["tensor"]): x for x in report["boundaries"]}
    # r1's output feeds the pool on the VPU and the host: 8*8*8 = 512 int8 bytes back.
    assert (rows[("VPU->CPU", "r1:0")]["consumer"], rows[("VPU->CPU", "r1:0")]["bytes"]) == (
        "output:r1:0",
        512,
    )
    assert (rows[("VPU->CPU", "output")]["producer"], rows[("VPU->CPU", "output")]["bytes"]) == ("p1", 128)
    assert report["totals"]["boundaries"] == 3
