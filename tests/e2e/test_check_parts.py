"""`vpuc run --check` cannot be fooled: each VPU subgraph judged on its own inputs (a missing
capture fails), the end-to-end parts labelled and judged separately, and degenerate
calibration caught at compile (docs/metrics.md, issue 22)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from vpuc import runtime
from vpuc.compiler.driver import compile_model
from vpuc.runtime.check import check_run, subgraph_check
from vpuc.runtime.check_qdq import quantization

ANCHORS = Path(__file__).resolve().parents[3] / "shared" / "anchors"
TINYCONV = ANCHORS / "tinyconv" / "tinyconv_int8_qdq.onnx"
needs_anchors = pytest.mark.skipif(not TINYCONV.is_file(), reason="the anchors are not beside the repo")


@pytest.fixture(scope="module")
def tinyconv(tmp_path_factory):
    path = tmp_path_factory.mktemp("anchor") / "tinyconv.vpub"
    return compile_model(str(TINYCONV), target="u55-256").save(path)


def _ran(artifact, seed=0):
    executable = runtime.load(artifact)
    executable.record_outputs(True)
    inputs = runtime.inputs.random_inputs(executable.inputs, seed)
    return executable, inputs, executable.run(inputs)


@needs_anchors
def test_each_subgraph_is_checked_and_a_missing_capture_fails(tinyconv):
    executable, _, _ = _ran(tinyconv)
    check = subgraph_check(executable, 1)
    subgraphs = {row["subgraph"] for row in check["outputs"]}
    assert subgraphs == {call.subgraph for call in executable.vpu_calls} and check["passed"]
    tensors = {t for node in onnx.load(TINYCONV).graph.node for t in node.output}
    assert all(row["output"] in tensors for row in check["outputs"])  # named by their ONNX tensors
    assert check["outputs"][-1]["output"] == "output"  # the last subgraph writes the model's output
    executable.last_run.calls[0].inputs = []  # the capture is lost
    lost = subgraph_check(executable, 1)
    assert not lost["passed"] and lost["outputs"][0]["missing"]
    executable.last_run.calls.pop(0)  # the program did not run at all
    assert not subgraph_check(executable, 1)["passed"]


@needs_anchors
def test_qdq_model_end_to_end_parts_are_separate_and_labelled(tinyconv):
    executable, inputs, outputs = _ran(tinyconv, seed=1)
    float_model = str(ANCHORS / "tinyconv" / "tinyconv_float.onnx")
    check = check_run(executable, inputs, outputs, str(TINYCONV), None, float_model)
    assert check["float"]["model"] == float_model  # the float model, not the QDQ one
    assert check["qdq_model"]["model"] == str(TINYCONV)
    # The float part compares dequantised values: recompute them with onnxruntime here.
    (in_scale, in_zero), (out_scale, out_zero) = (
        q["input"] if "input" in q else q["output"] for q in quantization(str(TINYCONV))
    )
    feed = {"input": ((inputs["input"].astype(np.float32) - in_zero) * in_scale).astype(np.float32)}
    want = ort.InferenceSession(float_model).run(None, feed)[0].astype(np.float64)
    got = (outputs["output"].astype(np.float64) - out_zero) * out_scale
    (row,) = check["float"]["outputs"]
    assert row["sqnr_db"] == pytest.approx(
        10 * np.log10((want**2).sum() / ((want - got) ** 2).sum()), abs=0.01
    )
    assert row["sqnr_floor_db"] is None  # the quantisation is the model's: judged only with --sqnr-floor
    strict = check_run(executable, inputs, outputs, str(TINYCONV), None, float_model, sqnr_floor=200.0)
    assert not strict["passed"] and strict["qdq"]["passed"]  # one part failing fails the check
    without = check_run(executable, inputs, outputs, str(TINYCONV), None)
    assert without["float"]["skipped"] and without["qdq_model"]["outputs"]


def test_all_zero_calibration_is_refused_naming_the_input(vpuc, zoo_dir, tmp_path):
    model = zoo_dir / "tinyconvnet.onnx"
    spec = onnx.load(model).graph.input[0]
    shape = [d.dim_value for d in spec.type.tensor_type.shape.dim]
    np.savez(tmp_path / "zeros.npz", **{spec.name: np.zeros([8, *shape[1:]], np.float32)})
    result = vpuc(
        "compile", model, "--target", "u55-256", "--calib", tmp_path / "zeros.npz", "-o", tmp_path / "m.vpub"
    )
    assert result.returncode == 2 and f"input '{spec.name}'" in result.stderr, result.stderr
    assert not (tmp_path / "m.vpub").exists()


def test_a_constant_tensor_feeding_the_vpu_is_warned_by_name(vpuc, tmp_path):
    """y is 0 in every sample while x varies: Mul(x, y) is calibrated on a zero range."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["c", "y"], ["m"], name="mul"),
        helper.make_node("Conv", ["m", "w"], ["out"], name="conv2", pads=[1, 1, 1, 1]),
    ]
    w = np.random.default_rng(0).normal(size=(8, 8, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 8, 8, 8]) for n in ("x", "y")],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8, 8, 8])],
        [onnx.numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "m.onnx")
    x = np.random.default_rng(1).normal(size=(8, 1, 8, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "c.npz", x=x, y=np.zeros_like(x))
    result = vpuc("compile", tmp_path / "m.onnx", "--target", "vpu", "--calib", tmp_path / "c.npz",
                  "-o", tmp_path / "m.vpub", "--json", "--no-profitability")  # fmt: skip
    assert result.returncode == 0, result.stderr
    warnings = [w for w in json.loads(result.stdout).get("warnings", []) if "zero range" in w]
    assert warnings and all("tensor '" in w for w in warnings), result.stdout[-2000:]


@needs_anchors
def test_the_reference_is_built_by_the_check_and_cached_beside_the_artifact(tinyconv):
    executable = runtime.load(tinyconv)
    spec = executable.artifact.manifest["reference"]
    assert spec["module"] in executable.artifact.members  # carried, not built at compile
    cached = list(Path(tinyconv).parent.glob(f"{Path(tinyconv).name}.reference-*.so"))
    for path in cached:
        path.unlink()
    executable, _, _ = _ran(tinyconv, seed=2)
    assert subgraph_check(executable, 1)["passed"]
    (built,) = Path(tinyconv).parent.glob(f"{Path(tinyconv).name}.reference-*.so")
    assert built.name.endswith(f"{spec['sha256'][:12]}.so")


@needs_anchors
def test_without_a_reference_the_subgraph_check_fails(tmp_path):
    path = compile_model(str(TINYCONV), target="u55-256", reference=False).save(tmp_path / "none.vpub")
    executable, _, _ = _ran(path)
    check = subgraph_check(executable, 1)
    assert not check["passed"] and all("no-reference" in row["missing"] for row in check["outputs"])
