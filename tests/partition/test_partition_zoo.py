"""The partitioner through the whole compiler (frontend, graph passes) on the zoo, and the
`vpuc partition` command as a user runs it."""

from __future__ import annotations

import json
import shutil

import pytest

from vpuc.examples import zoo


def _by_name(report):
    return {op["name"]: op for op in report["ops"]}


def test_tinyconvnet_zoo(partition):
    report = partition(zoo.build("tinyconvnet"))
    # One subgraph: 'vpu' lacks global_avg_pool, and the pool over 4x4 becomes a depthwise
    # conv (decompose.py). int8 bytes: input 3*16*16 = 768 in, logits 4 out.
    assert report["raw_totals"] == {
        "vpu_ops": 17,
        "cpu_ops": 0,
        "subgraphs": 1,
        "boundaries": 2,
        "bytes": 772,
    }
    ops = _by_name(report)
    # Batch norms were folded into their convs by the graph passes: they go where the conv goes.
    assert all(ops[f"stage{i}/bn"]["device"] == ops[f"stage{i}/conv"]["device"] == "vpu" for i in range(1, 5))
    assert ops["head/gap"]["device"] == "vpu" and "depthwise conv" in ops["head/gap"]["reason"]


def test_resnet_residual_adds_run_on_the_vpu(partition):
    report = partition(zoo.build("resnet_mini"), profitability=False)
    adds = [op for op in report["ops"] if op["op"] == "Add"]
    assert adds and all(op["device"] == "vpu" for op in adds)
    assert report["raw_totals"]["subgraphs"] == 1  # the pool is a depthwise conv: one subgraph


def test_mobilenet_depthwise_and_relu6_run_on_the_vpu(partition):
    report = partition(zoo.build("mobilenet_mini"), profitability=False)
    kinds = {op["op"] for op in report["ops"] if op["device"] == "vpu"}
    assert {"Conv", "Clip", "Add"} <= kinds


def test_transformer_keeps_norms_and_softmax_on_the_cpu(partition):
    report = partition(zoo.build("transformer_encoder"), profitability=False)
    ops = report["ops"]
    cpu = {op["op"] for op in ops if op["device"] == "cpu"}
    assert {"Softmax", "Erf"} <= cpu or {"Softmax"} <= cpu
    dense = [op for op in ops if op["op"] == "MatMul" and op["device"] == "vpu"]
    assert dense, "the projections (MatMul with constant weights) run on the VPU"
    plus = partition(zoo.build("transformer_encoder"), "vpu-plus", profitability=False)
    assert plus["raw_totals"]["cpu_ops"] < report["raw_totals"]["cpu_ops"]


def test_cli_partition_json_and_dot(vpuc, zoo_dir, tmp_path):
    result = vpuc("partition", zoo_dir / "tinyconvnet.onnx", "--json", "--dot", tmp_path / "p.dot")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["raw_totals"]["subgraphs"] == 1
    dot = (tmp_path / "p.dot").read_text()
    assert "cluster_vpu0" in dot and "dashed" in dot


def test_cli_partition_table(vpuc, zoo_dir):
    result = vpuc("partition", zoo_dir / "opzoonet.onnx", "--target", "vpu-plus")
    assert result.returncode == 0, result.stderr
    assert "partition (vpu-plus):" in result.stdout and "Boundaries" in result.stdout


def test_cli_partition_svg(vpuc, zoo_dir, tmp_path):
    out = tmp_path / "p.svg"
    result = vpuc("partition", zoo_dir / "tinyconvnet.onnx", "--svg", out)
    if shutil.which("dot"):
        assert result.returncode == 0, result.stderr
        assert out.read_text().lstrip().startswith(("<?xml", "<svg"))
    else:  # without graphviz's program: one clear line, no file
        assert result.returncode == 2 and "'dot' program is not installed" in result.stderr
        assert not out.exists()


@pytest.mark.parametrize(
    "args,message",
    [
        (["--target", "cpu"], "target 'cpu' has no VPU"),
        (["--min-subgraph-ops", "0"], "--min-subgraph-ops: must be at least 1"),
        (["--target", "nope"], "unknown target 'nope'"),
    ],
)
def test_cli_partition_errors(vpuc, zoo_dir, args, message):
    result = vpuc("partition", zoo_dir / "tinyconvnet.onnx", *args)
    assert result.returncode == 2 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_compile_for_vpu_prints_totals_and_runs(vpuc, zoo_dir, tmp_path):
    model = zoo_dir / "resnet_mini.onnx"
    compiled = vpuc("compile", model, "--target", "vpu", "-o", tmp_path / "r.vpub")
    assert compiled.returncode == 0, compiled.stderr
    assert "partition (vpu):" in compiled.stdout and "run as VPU programs" in compiled.stdout
    ran = vpuc("run", tmp_path / "r.vpub", "--check", model, "--json")
    assert ran.returncode == 0, ran.stderr


@pytest.mark.parametrize("name", ["tinyconvnet", "resnet_mini"])
def test_quantised_partition_reports_as_the_float_one(name):
    """compile --target vpu partitions the quantised module; vpuc partition, the float one.
    Both reports must tell the user the same thing: devices, subgraphs, boundaries."""
    from vpuc.compiler.driver import CompileOptions, prepare_model

    model = zoo.build(name)
    float_report = prepare_model(model, "vpu", CompileOptions(quantize=False)).partition.report
    int8_report = prepare_model(model, "vpu", CompileOptions(calib_synthetic=8)).partition.report
    for key in ("subgraphs", "boundaries", "totals", "raw_totals"):
        assert int8_report[key] == float_report[key], key
    # Same rows; a VPU op's composite is the requantising (_q) form of the float one. The
    # host figures differ where they should: the int8 model's host also runs its Q and DQ.
    other = ("reason", "host_cycles_modelled")
    for int8_op, float_op in zip(int8_report["ops"], float_report["ops"], strict=True):
        assert int8_op["reason"].replace("_q in VPU", " in VPU") == float_op["reason"]
        assert {k: v for k, v in int8_op.items() if k not in other} == {
            k: v for k, v in float_op.items() if k not in other
        }
        if float_op["device"] == "cpu":
            assert int8_op["host_cycles_modelled"] >= float_op["host_cycles_modelled"]
