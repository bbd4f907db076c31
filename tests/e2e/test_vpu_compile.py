"""`vpuc compile --target vpu` as a user runs it: quantisation with its accuracy report, the
partition totals, calibration files checked, and QDQ models compiled with their own scales."""

from __future__ import annotations

import json
import logging

import numpy as np
import onnx
import pytest
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

from vpuc.examples import zoo


def test_compile_json_reports_accuracy_and_partition(vpuc, zoo_dir, tmp_path):
    model = zoo_dir / "mobilenet_mini.onnx"
    result = vpuc(
        "compile", model, "--target", "vpu", "-o", tmp_path / "m.vpub", "--json", "--calib-synthetic", "16"
    )
    assert result.returncode == 0, result.stderr
    assert "synthetic data" in result.stderr  # the warning that the figures then mean little
    report = json.loads(result.stdout)
    accuracy = report["accuracy"]
    assert set(accuracy) >= {"outputs", "layers"}
    (logits,) = accuracy["outputs"]
    assert set(logits) == {"name", "sqnr_db", "cosine", "max_abs_err", "top1_agreement"}
    assert logits["name"] == "logits" and logits["sqnr_db"] > 25 and logits["top1_agreement"] == 1.0
    assert accuracy["layers"] and all(set(layer) >= {"name", "sqnr_db"} for layer in accuracy["layers"])
    assert report["partition"]["totals"]["vpu_ops"] > 0
    ran = vpuc("run", tmp_path / "m.vpub", "--check", model, "--json")
    assert ran.returncode == 0, ran.stderr
    check = json.loads(ran.stdout)["check"]
    assert check["numerics"] == "int8" and check["passed"]
    # The int8 artifact really is quantised: it does not match the float model to 1e-4,
    # and its VPU outputs are judged against the QDQ reference in LSB.
    (out,) = check["float"]["outputs"]
    assert out["rel_err"] > 1e-4 and out["sqnr_db"] >= out["sqnr_floor_db"]
    assert check["qdq"]["outputs"] and all(o["max_lsb"] <= 1 for o in check["qdq"]["outputs"])


def _calib(tmp_path, **arrays):
    path = tmp_path / "calib.npz"
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda p: _calib(p, other=np.zeros((4, 1, 3, 16, 16), np.float32)), "'other' is not an input"),
        (lambda p: _calib(p, input=np.zeros((4, 1, 3, 8, 8), np.float32)), "shape"),
        (lambda p: _calib(p, input=np.full((4, 1, 3, 16, 16), np.nan, np.float32)), "NaN"),
        (
            lambda p: _calib(p, input=np.zeros((4, 1, 3, 16, 16), np.float64)),
            "float64, the model expects float32",
        ),
        (lambda p: _calib(p), "calib.npz"),
    ],
    ids=["missing input", "wrong shape", "nan", "wrong dtype", "empty file"],
)
def test_bad_calibration_files(vpuc, zoo_dir, tmp_path, make, message):
    calib = make(tmp_path)
    out = tmp_path / "t.vpub"
    result = vpuc("compile", zoo_dir / "tinyconvnet.onnx", "--target", "vpu", "--calib", calib, "-o", out)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr
    assert not out.exists()


def test_calib_options_exclude_each_other(vpuc, zoo_dir, tmp_path):
    calib = _calib(tmp_path, input=np.zeros((4, 1, 3, 16, 16), np.float32))
    result = vpuc(
        "compile", zoo_dir / "tinyconvnet.onnx", "--target", "vpu", "--calib", calib, "--calib-synthetic", "8"
    )
    assert result.returncode == 2 and "not allowed with argument" in result.stderr


class _Reader(CalibrationDataReader):
    def __init__(self, model: onnx.ModelProto) -> None:
        self.samples = iter([zoo.sample_inputs(model, seed) for seed in range(8)])

    def get_next(self):
        return next(self.samples, None)


def _ort_qdq(name: str, tmp_path) -> onnx.ModelProto:
    model = zoo.build(name)
    onnx.save(model, tmp_path / "float.onnx")
    logging.disable(logging.WARNING)
    try:
        quantize_static(
            str(tmp_path / "float.onnx"), str(tmp_path / "qdq.onnx"), _Reader(model), quant_format=QuantFormat.QDQ,
            per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
        )  # fmt: skip
    finally:
        logging.disable(logging.NOTSET)
    return onnx.load(tmp_path / "qdq.onnx")


def test_qdq_residual_dequantize_shared_by_two_composites(tmp_path):
    """A QDQ ResNet dequantizes the block input once for the conv and the residual add; the
    partitioner gives each reader its own dequantize, and the add runs on the VPU in int8."""
    from vpuc.compiler.driver import CompileOptions, prepare_model

    prepared = prepare_model(_ort_qdq("resnet_mini", tmp_path), "vpu", CompileOptions(profitability=False))
    names = [c.name for c in prepared.partition.placement.composites]
    assert "vpu.add_q" in names
    adds = [op for op in prepared.partition.report["ops"] if op["op"] == "Add"]
    assert adds and all(op["device"] == "vpu" for op in adds)


def test_qdq_model_compiles_with_its_own_scales(vpuc, tmp_path):
    _ort_qdq("tinyconvnet", tmp_path)
    result = vpuc("compile", tmp_path / "qdq.onnx", "--target", "vpu", "-o", tmp_path / "q.vpub", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["partition"]["raw_totals"]["vpu_ops"] > 0
    # The artifact evaluates the QDQ model as onnxruntime does with optimisations off.
    ran = vpuc("run", tmp_path / "q.vpub", "--check", tmp_path / "qdq.onnx", "--json", "--tolerance", "1e-4")
    assert ran.returncode == 0, ran.stderr
