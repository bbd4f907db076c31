"""The real-model corpus (tests/fixtures/corpus.py), each model compiled for cpu, vpu and
vpu-plus and checked against onnxruntime on the same inputs; on VPU targets `vpuc
partition` must report exactly what `vpuc compile` did, and the QDQ exports of tf2onnx
must run on the VPU (their CPU ops: the boundary float<->int8 conversions and the known
limits listed below, each with its reason)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from vpuc.compiler import cli
from vpuc.compiler.driver import CompileOptions, build_artifact, prepare_model
from vpuc.runtime.executor import Executable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from corpus import TFLITE_QDQ, CorpusModel, corpus_models  # noqa: E402

TARGETS = ("cpu", "vpu", "vpu-plus")
CALIB = 8  # synthetic calibration samples: the figures here are about the compiler, not accuracy
QDQ_NODES = {"QuantizeLinear", "DequantizeLinear"}
# Compute ops a tf2onnx QDQ model still runs on the CPU, with why (docs/partition.md):
KNOWN_CPU = {
    "vpu": {"Softmax"},  # it needs the lookup table vpu lacks (docs/softmax.md)
    "vpu-plus": set(),
}
KNOWN_CPU_BY_MODEL = {
    # Allowed, not required: they ran on the CPU before the decompositions and, on vpu, before
    # the first conv's im2col (one input channel fed the array one tap per pixel a cycle, and
    # the profitability rule moved it from the subgraph's edge; docs/partition.md).
    "tflite_dscnn": {
        "vpu": {"Conv", "Relu", "AveragePool", "Reshape", "MatMul"},
        "vpu-plus": {"Conv", "Relu", "Reshape"},
    },
    "tflite_dscnn_int8io": {
        "vpu": {"Conv", "Relu", "AveragePool", "Reshape", "MatMul"},
        "vpu-plus": {"Conv", "Relu", "Reshape"},
    },
}


@pytest.fixture(scope="module")
def corpus() -> dict[str, CorpusModel]:
    return corpus_models()


_COMPILED: dict[tuple[str, str], tuple] = {}


def _compiled(corpus, name: str, target: str):
    key = (name, target)
    if key not in _COMPILED:
        entry = corpus[name]
        prepared = prepare_model(entry.model, target, CompileOptions(calib_synthetic=CALIB, **entry.options))
        artifact = build_artifact(entry.model, prepared)
        _COMPILED[key] = (artifact, Executable(artifact, source=name))
    return _COMPILED[key]


def _reference(entry: CorpusModel) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        entry.model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    feeds = dict(entry.inputs)
    for name, value in entry.options.get("bound_inputs", {}).items():
        feeds[name] = np.array([int(value)], np.int64)
    return session.run(None, feeds)


def _output_scale(model: onnx.ModelProto, output: str) -> float | None:
    """The scale of the (De)QuantizeLinear that writes a QDQ model's output."""
    constants = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type in QDQ_NODES and node.output[0] == output:
            return float(constants[node.input[1]])
    return None


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(corpus_models()))
def test_compiles_and_matches_onnxruntime(corpus, name: str, target: str):
    entry = corpus[name]
    artifact, executable = _compiled(corpus, name, target)
    outputs = executable.run(entry.inputs)
    for spec, reference in zip(artifact.outputs, _reference(entry), strict=True):
        got = outputs[spec["name"]].astype(np.float64)
        want = reference.astype(np.float64)
        error = float(np.abs(got - want).max()) if want.size else 0.0
        scale = _output_scale(entry.model, spec["name"])
        if scale is not None and spec["dtype"] in ("int8", "uint8"):
            assert error <= 1, f"{spec['name']}: {error} LSB from onnxruntime"
        elif scale is not None:
            assert error <= 1.01 * scale, f"{spec['name']}: {error / scale:.2f} LSB from onnxruntime"
        elif target == "cpu" or artifact.manifest.get("numerics") != "int8":
            assert error <= 1e-4 * max(1.0, float(np.abs(want).max())), f"{spec['name']}: {error}"
        else:  # a float model quantised to int8: the documented --check tolerance
            assert error <= 0.1 * float(np.abs(want).max()), f"{spec['name']}: rel err {error}"


def _cli_args(entry: CorpusModel, path: Path) -> list[str]:
    args = [str(path), "--calib-synthetic", str(CALIB)]
    for name, shape in entry.options.get("input_shapes", {}).items():
        args += ["--input-shape", f"{name}={'x'.join(map(str, shape))}"]
    for name, value in entry.options.get("bound_inputs", {}).items():
        args += ["--bind-input", f"{name}={value}"]
    return args


@pytest.mark.parametrize("target", ("vpu", "vpu-plus"))
@pytest.mark.parametrize("name", sorted(corpus_models()))
def test_partition_reports_what_compile_does(corpus, name: str, target: str, tmp_path, capsys):
    entry = corpus[name]
    path = tmp_path / f"{name}.onnx"
    onnx.save(entry.model, path)
    artifact, _ = _compiled(corpus, name, target)
    capsys.readouterr()
    assert cli.main(["partition", *_cli_args(entry, path), "--target", target, "--json"]) == 0
    reported = json.loads(capsys.readouterr().out)
    reported.pop("model")
    assert reported == artifact.report["partition"]


@pytest.mark.parametrize("target", ("vpu", "vpu-plus"))
@pytest.mark.parametrize("name", TFLITE_QDQ)
def test_tf2onnx_qdq_models_run_on_the_vpu(corpus, name: str, target: str):
    artifact, _ = _compiled(corpus, name, target)
    partition = artifact.report["partition"]
    allowed = KNOWN_CPU[target] | KNOWN_CPU_BY_MODEL.get(name, {}).get(target, set())
    compute_on_cpu = {
        op["op"] for op in partition["ops"] if op["device"] == "cpu" and op["op"] not in QDQ_NODES
    }
    assert compute_on_cpu <= allowed, [op for op in partition["ops"] if op["op"] in compute_on_cpu - allowed]
    assert partition["totals"]["subgraphs"] == 1 or name in KNOWN_CPU_BY_MODEL
    # Q/DQ on the CPU only where a tensor crosses: the model's float<->int8 conversions and
    # the ones around the ops above.
    crossings = partition["totals"]["boundaries"]
    assert crossings <= 2 + 2 * len(compute_on_cpu - {"Softmax"})


def test_the_report_says_what_was_decomposed(corpus):
    artifact, _ = _compiled(corpus, "tflite_resnet8", "vpu")
    (pool,) = [op for op in artifact.report["partition"]["ops"] if op["op"] == "AveragePool"]
    assert pool["device"] == "vpu"
    assert "mean over 8x8 as depthwise conv 2x2 -> 4x4" in pool["reason"]
    artifact, _ = _compiled(corpus, "tflite_dscnn", "vpu")
    (pool,) = [op for op in artifact.report["partition"]["ops"] if op["op"] == "AveragePool"]
    assert pool["device"] == "vpu", pool["reason"]
    assert "mean over 25x5 as depthwise conv 25x5" in pool["reason"]
    assert "as 4 sub-kernels (7 + 7 + 7 + 4 of its 25 rows) accumulated in int32" in pool["reason"]
    # The first conv (one input channel: one tap per pixel a cycle as a conv) runs as an
    # im2col on the VPU, cheaper there than on the CPU, on vpu too (docs/partition.md).
    (first,) = [op for op in artifact.report["partition"]["ops"] if op["op"] == "Conv" and "10x4" in op["reason"]]
    assert first["device"] == "vpu", first["reason"]
    layers = [layer for layer in artifact.report["vpu"]["layers"] if first["name"] in layer["nodes"]]
    assert [layer["tiling"]["lowering"] for layer in layers] == ["im2col of kernel rows (10 channels, 1x4 kernel)"]
    artifact, _ = _compiled(corpus, "tflite_dscnn", "vpu-plus")
    (first,) = [op for op in artifact.report["partition"]["ops"] if op["op"] == "Conv" and "10x4" in op["reason"]]
    assert first["device"] == "vpu" and "as 3 sub-kernels (1 + 7 + 2 of its 10 rows)" in first["reason"]


def test_nameless_nodes_are_named_and_placed(corpus):
    artifact, _ = _compiled(corpus, "nameless_cnn", "vpu-plus")
    ops = artifact.report["partition"]["ops"]
    assert [op["name"] for op in ops][:3] == ["Conv_0", "BatchNormalization_1", "Relu_2"]
    assert all(op["device"] in ("vpu", "cpu") for op in ops)
    assert artifact.report["partition"]["totals"]["vpu_ops"] >= 7


def test_separately_quantised_batch_norm_runs_on_the_vpu(corpus):
    """onnxruntime's quantize_static without pre-processing quantises the BN on its own."""
    assert "BatchNormalization" in {n.op_type for n in corpus["ort_qdq_bn"].model.graph.node}
    artifact, _ = _compiled(corpus, "ort_qdq_bn", "vpu-plus")
    (bn,) = [op for op in artifact.report["partition"]["ops"] if op["op"] == "BatchNormalization"]
    assert bn["device"] == "vpu", bn["reason"]


def test_an_int8_tensor_that_is_also_a_graph_output(corpus):
    """The MobileNet where a VPU tensor is also an int8 graph output (TVM's
    MergeCompositeFunctions crashed on it): one subgraph, the tensor crosses once more."""
    model = onnx.ModelProto()
    model.CopyFrom(corpus["tflite_mobilenet"].model)
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in inferred.graph.value_info}
    middle = [n for n in model.graph.node if n.op_type == "QuantizeLinear"][5].output[0]
    model.graph.output.append(
        onnx.helper.make_tensor_value_info(middle, onnx.TensorProto.INT8, shapes[middle])
    )
    prepared = prepare_model(model, "vpu", CompileOptions(calib_synthetic=CALIB))
    artifact = build_artifact(model, prepared)
    totals = artifact.report["partition"]["totals"]
    assert totals["subgraphs"] == 1 and totals["boundaries"] == 3
    inputs = corpus["tflite_mobilenet"].inputs
    got = Executable(artifact).run(inputs)[middle]
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    want = session.run([middle], inputs)[0]
    assert got.dtype == np.int8 and np.abs(got.astype(int) - want.astype(int)).max() <= 1
