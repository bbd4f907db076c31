"""quantize_for_compile, as the compile driver calls it: options, data sources, the default,
the route for QDQ models, and the JSON the report carries."""

from __future__ import annotations

import json

import numpy as np
import pytest
from qdq_models import qdq_conv
from quantize_testing import optimised, optimised_zoo

from vpuc.compiler.errors import CompileError
from vpuc.compiler.quantize import CalibrationError, QDQError, quantize_for_compile
from vpuc.targets import load_target

TARGET = load_target("vpu")


def _compile(**options):
    mod, provenance, imported = optimised_zoo("tinyconvnet")
    return quantize_for_compile(mod, TARGET, imported.onnx_model, provenance, imported.inputs, **options)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"calib_path": "x.npz", "calib_synthetic": 8}, "--calib and --calib-synthetic exclude each other"),
        ({"calib_synthetic": 0}, "--calib-synthetic 0: need at least 1 sample"),
        ({"method": "kl"}, "--calib-method 'kl': known methods are minmax, percentile, entropy, mse, auto"),
        ({"percentile": 0.0}, "--percentile 0: must be in (0, 100]"),
        ({"percentile": 100.5}, "--percentile 100.5: must be in (0, 100]"),
    ],
)
def test_bad_options(options, message):
    with pytest.raises(
        CompileError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ):
        _compile(**options)


def test_default_is_32_synthetic_samples_with_a_warning():
    result = _compile()
    summary = result.to_json()
    assert summary["calibration"] == {
        "source": "synthetic (N=32, seed=0, stream=0)",
        "samples": 32,
        "synthetic": True,
    }
    assert (
        summary["held_out"]["samples"] == 8
        and summary["method"] == "percentile"
        and summary["percentile"] == 99.99
    )
    assert "synthetic" in summary["warnings"][0] and "--calib" in summary["warnings"][0]
    json.dumps({"accuracy": result.accuracy, "quantization": summary})  # the report is plain JSON
    assert set(result.accuracy["outputs"][0]) >= {
        "name",
        "sqnr_db",
        "cosine",
        "max_abs_err",
        "top1_agreement",
    }
    assert all(set(layer) >= {"name", "sqnr_db"} for layer in result.accuracy["layers"])


def test_printed_report_tables():
    from rich.console import Console

    from vpuc.compiler.quantize import accuracy_tables

    console = Console(record=True, width=120)
    for table in accuracy_tables(_compile(calib_synthetic=8).accuracy):
        console.print(table)
    text = console.export_text()
    assert "logits" in text and "stage1/relu" in text and "SQNR (dB)" in text


def test_cpu_targets_are_not_quantised():
    mod, provenance, imported = optimised_zoo("tinyconvnet")
    with pytest.raises(ValueError, match="has no VPU"):
        quantize_for_compile(mod, load_target("cpu"), imported.onnx_model, provenance, imported.inputs)


def test_calibration_file_is_split_into_calibration_and_held_out(tmp_path):
    rng = np.random.default_rng(7)
    path = tmp_path / "calib.npz"
    np.savez(path, input=rng.standard_normal((10, 1, 3, 16, 16)).astype(np.float32))
    summary = _compile(calib_path=path, method="minmax").to_json()
    assert summary["calibration"]["samples"] == 8 and summary["held_out"] == {
        "source": f"{path} [8:10]",
        "samples": 2,
    }
    assert summary["method"] == "minmax" and summary["percentile"] is None and not summary["warnings"]


def test_bad_calibration_file_is_a_compile_error(tmp_path):
    path = tmp_path / "calib.npz"
    np.savez(path, input=np.zeros((4, 3, 3), np.float32))
    with pytest.raises(CalibrationError, match="input 'input' has shape"):
        _compile(calib_path=path)
    assert issubclass(CalibrationError, CompileError) and issubclass(QDQError, CompileError)


def test_qdq_models_keep_their_parameters():
    mod, provenance, imported = optimised(qdq_conv(act_dtype=np.uint8, act_zero=128))
    result = quantize_for_compile(
        mod, TARGET, imported.onnx_model, provenance, imported.inputs, calib_synthetic=8
    )
    assert result.summary["mode"] == "qdq model: parameters kept" and result.summary["method"] is None
    assert result.accuracy["samples"] == 8 and result.accuracy["outputs"][0]["sqnr_db"] > 25.0
    assert "QDQ model" in result.warnings[0]
