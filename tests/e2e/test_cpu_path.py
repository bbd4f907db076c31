"""The CPU path end to end: every zoo model and every real-export fixture compiled with
--target cpu, saved, then run by `vpuc run --check` in a fresh process; onnxruntime on the
original model is the truth (max abs error <= 1e-4 of the output's max magnitude)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from vpuc.compiler import compile_model
from vpuc.examples import zoo

TOLERANCE = 1e-4
FIXTURES = [
    "torch_small_cnn", "torch_upsample_pad", "torch_transformer_block",
    "tf2onnx_style", "paddle_style", "constant_weights",
]  # fmt: skip


def _run_checked(vpuc, artifact, model, inputs_npz=None):
    args = ["run", artifact, "--check", model, "--json", "--tolerance", TOLERANCE]
    if inputs_npz:
        args += ["--inputs", inputs_npz]
    result = vpuc(*args)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["check"]["passed"]
    return report


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_zoo_model_matches_onnxruntime(vpuc, zoo_dir, tmp_path, name):
    model = zoo_dir / f"{name}.onnx"
    artifact = compile_model(model, target="cpu").save(tmp_path / f"{name}.vpub")
    report = _run_checked(vpuc, artifact, model)
    for out in report["check"]["float"]["outputs"]:
        assert out["rel_err"] <= TOLERANCE
    assert [o["name"] for o in report["outputs"]] == [o.name for o in onnx.load(model).graph.output]


@pytest.mark.parametrize("name", FIXTURES)
def test_real_export_matches_onnxruntime(vpuc, fixtures_dir, tmp_path, name):
    model = fixtures_dir / "exports" / f"{name}.onnx"
    data = np.load(fixtures_dir / "exports" / f"{name}.npz")
    inputs = {vi.name: data[vi.name] for vi in onnx.load(model).graph.input}
    np.savez(tmp_path / "inputs.npz", **inputs)
    shapes = {name: array.shape for name, array in inputs.items()}
    artifact = compile_model(model, target="cpu", input_shapes=shapes).save(tmp_path / "m.vpub")
    _run_checked(vpuc, artifact, model, tmp_path / "inputs.npz")


def test_cli_compile_run_outputs(vpuc, zoo_dir, tmp_path):
    """The README's path: compile and run through the CLI, outputs written to .npz."""
    model = zoo_dir / "tinyconvnet.onnx"
    compiled = vpuc("compile", model, "--target", "cpu", "-o", tmp_path / "t.vpub")
    assert compiled.returncode == 0, compiled.stderr
    assert "1x3x16x16" in compiled.stdout and "t.vpub" in compiled.stdout
    ran = vpuc("run", tmp_path / "t.vpub", "--outputs", tmp_path / "y.npz", "--seed", "3")
    assert ran.returncode == 0, ran.stderr
    with np.load(tmp_path / "y.npz") as outputs:
        assert outputs["logits"].shape == (1, 4)
        logits = outputs["logits"]
    import onnxruntime as ort

    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)
    expected = ort.InferenceSession(str(model)).run(None, {"input": x})[0]
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())


def test_check_fails_on_a_different_model(vpuc, zoo_dir, tmp_path):
    """--check must be able to fail: perturb one weight of the reference model."""
    model = onnx.load(zoo_dir / "tinyconvnet.onnx")
    weight = model.graph.initializer[0]
    values = onnx.numpy_helper.to_array(weight).copy()
    values.flat[0] += 1.0
    weight.CopyFrom(onnx.numpy_helper.from_array(values, weight.name))
    onnx.save(model, tmp_path / "other.onnx")
    artifact = compile_model(zoo_dir / "tinyconvnet.onnx").save(tmp_path / "t.vpub")
    result = vpuc("run", artifact, "--check", tmp_path / "other.onnx", "--json")
    assert result.returncode == 1
    assert json.loads(result.stdout)["check"]["passed"] is False
