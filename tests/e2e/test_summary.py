"""`vpuc compile` ends with a network summary (MAC share on the VPU, bytes, cycles,
compile time) and `--per-layer-csv` writes the per-layer figures of compile and run."""

from __future__ import annotations

import csv
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from vpuc.runtime.artifact import Artifact


def _model(path):
    """Conv 3->4, 3x3, pad 1 on 8x8: 4*8*8 outputs x 3*3*3 = 6,912 MACs (by hand)."""
    w = np.random.default_rng(0).normal(size=(4, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["y"], ["out"], name="relu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 8, 8])],
        [onnx.numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_summary_counts_macs_and_the_csv_adds_up(vpuc, tmp_path):
    model = _model(tmp_path / "m.onnx")
    args = ("--target", "vpu", "--calib-synthetic", "4", "--no-profitability", "-o", tmp_path / "m.vpub")
    text = vpuc("compile", model, *args, "--per-layer-csv", tmp_path / "est.csv")
    assert text.returncode == 0, text.stderr
    assert "Network summary (vpu" in text.stdout and "6,912 of 6,912 (100.0%)" in text.stdout
    report = Artifact.load(tmp_path / "m.vpub").report  # what --json prints
    summary = report["summary"]
    assert summary["macs"] == 6912 and summary["vpu_macs"] == 6912 and summary["vpu_mac_share"] == 1.0
    assert summary["vpu_cycles"] == report["vpu"]["total"]["cycles"] > 0
    clock = summary["clock_mhz"]
    assert summary["vpu_inferences_per_s"] == clock * 1e6 / summary["vpu_cycles"]
    rows = list(csv.DictReader(open(tmp_path / "est.csv")))
    assert rows and "conv" in rows[0]["nodes"].split(";")  # named by the fused group's ONNX nodes
    assert sum(int(r["macs"]) for r in rows) == 6912
    parted = vpuc("partition", model, *args[:-2], "--json")
    assert parted.returncode == 0, parted.stderr
    assert json.loads(parted.stdout)["macs"] == {"total": 6912, "vpu": 6912, "vpu_share": 1.0}
    ran = vpuc("run", tmp_path / "m.vpub", "--per-layer-csv", tmp_path / "sim.csv")
    assert ran.returncode == 0, ran.stderr
    simulated = list(csv.DictReader(open(tmp_path / "sim.csv")))
    assert [r["layer"] for r in simulated] == [r["layer"] for r in rows]
    assert sum(int(r["cycles"]) for r in rows) == report["vpu"]["total"]["cycles"]
    ran = json.loads(vpuc("run", tmp_path / "m.vpub", "--json").stdout)
    assert sum(layer["cycles"] for layer in ran["layers"]) == ran["subgraphs"][0]["cycles"]


def _mul_model(path):
    """conv -> Mul(c, y) -> conv on 1x8x8x8; on `vpu` with two inputs the Mul stays on the host."""
    w = np.random.default_rng(0).normal(size=(8, 8, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Mul", ["c", "y"], ["m"], name="mul"),
         helper.make_node("Conv", ["m", "w"], ["out"], name="conv2", pads=[1, 1, 1, 1])],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 8, 8, 8]) for n in ("x", "y")],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8, 8, 8])],
        [onnx.numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_end_to_end_latency_counts_the_host_ops_by_the_target_host(vpuc, tmp_path):
    model = _mul_model(tmp_path / "m.onnx")
    args = ("--target", "vpu", "--calib-synthetic", "4", "--no-profitability", "-o", tmp_path / "m.vpub")
    compiled = vpuc("compile", model, *args, "--json")
    assert compiled.returncode == 0, compiled.stderr
    host = [op for op in json.loads(compiled.stdout)["partition"]["ops"] if op["device"] == "cpu"]
    assert [op["name"] for op in host] == ["mul"]
    programs = json.loads(compiled.stdout)["vpu"]["subgraphs"]
    # x is NCHW: the first program's DMA takes it channels-first (the second one's input,
    # the host Mul's output, is NHWC already)
    assert [p.get("input_transpose") for p in programs] == ["by the VPU's DMA", None], programs
    ran = vpuc("run", tmp_path / "m.vpub", "--json")
    e2e = json.loads(ran.stdout)["end_to_end"]
    # By hand from targets/vpu.toml [host] (2000 MHz, 14 MACs and 52 B per cycle, 1336 per op):
    # a float Mul of 512 elements reads 2 x 2048 B and writes 2048 B:
    # 1336 + ceil(512 / 14) + ceil(6144 / 52) = 1336 + 37 + 119; the host also dequantises
    # the first conv's output, quantises the Mul's and dequantises the second conv's (the
    # model's float output), each 4 + 1 B per element with no op overhead:
    # 3 x ceil(5 x 512 / 52) = 3 x 50. No transpose of x: the program takes it
    # channels-first (the host's would add 1336 + ceil(8 x 512 / 52)).
    assert e2e["host_modelled_cycles"] == 1336 + 37 + 119 + 3 * 50
    assert e2e["host_modelled_us"] == round(1642 / 2000, 3)
    parts = e2e["vpu_us"] + e2e["link_us"] + e2e["host_modelled_us"]
    assert e2e["total_modelled_us"] == pytest.approx(parts, abs=0.002) and e2e["vpu_us"] > 0


def test_layers_are_charged_by_the_frontier_rule():
    from vpuc.targets.isa.attribution import charge_layers

    # By hand: A 0-100; B 50-150 moves the frontier by 50 (50 overlap); C 60-120 lies inside
    # (0 charged, 60 overlap); D 150-200 charged 50. Sum 200 = the last end.
    assert charge_layers([(0, 100), (50, 150), (60, 120), (150, 200)]) == [
        (100, 0),
        (50, 50),
        (0, 60),
        (50, 0),
    ]


def test_macs_of_a_matmul_by_a_vector():
    """MatMul(x[2, 3, 5], w[5]) is numpy's matrix-vector product: out [2, 3], 5 MACs each, 30
    in all (the MAC share crashed on the 1-D weight: fuzzer case vpu-plus-73f4afaa0e)."""
    from onnx import numpy_helper

    from vpuc.compiler.summary import onnx_macs

    weight = numpy_helper.from_array(np.ones(5, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mv")],
        "mv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert onnx_macs(model) == {"mv": 30}
