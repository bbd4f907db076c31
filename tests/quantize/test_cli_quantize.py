"""The quantiser's flags through `vpuc compile`: --keep-float and the accuracy floor reach the
partition report, and a floor that cannot be reached stops the compile with the figure."""

from __future__ import annotations

import json

import onnx

from vpuc.examples import zoo


def _one_line_error(result, *fragments):
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = [
        line
        for line in result.stderr.strip().splitlines()
        if "Warning" not in line and "warning:" not in line
    ]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_keep_float_and_sensitivity_in_the_json_report(vpuc, tmp_path):
    model = tmp_path / "tiny.onnx"
    onnx.save(zoo.build("tinyconvnet"), model)
    result = vpuc(
        "compile", str(model), "--target", "vpu", "--calib-synthetic", "8", "--keep-float", "stage3/conv",
        "--json", "-o", str(tmp_path / "tiny.vpub"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    ops = {op["name"]: op for op in report["ops"]}
    assert (
        ops["stage3/conv"]["device"] == "cpu" and "--keep-float stage3/conv" in ops["stage3/conv"]["reason"]
    )
    assert ops["stage4/conv"]["device"] == "vpu"
    layers = [row["layer"] for row in report["accuracy"]["sensitivity"]]
    assert "stage3/conv" not in layers and "stage4/conv" in layers
    assert report["quantization"]["methods"]["keep_float"] == ["stage3/conv"]
    assert report["accuracy"]["floor"]["min_sqnr_db"] == 25.0 and report["accuracy"]["floor"]["reached"]


def test_unreachable_floor_stops_the_compile_and_writes_nothing(vpuc, tmp_path):
    model, out = tmp_path / "tiny.onnx", tmp_path / "tiny.vpub"
    onnx.save(zoo.build("tinyconvnet"), model)
    result = vpuc(
        "compile", str(model), "--target", "vpu", "--calib-synthetic", "8", "--min-sqnr", "95", "-o", str(out)
    )
    _one_line_error(result, "vpuc compile: output SQNR", "below --min-sqnr 95", "--accept-low-sqnr")
    assert not out.exists()


def test_unknown_keep_float_node_is_a_user_error(vpuc, tmp_path):
    model = tmp_path / "tiny.onnx"
    onnx.save(zoo.build("tinyconvnet"), model)
    result = vpuc(
        "compile",
        str(model),
        "--target",
        "vpu",
        "--keep-float",
        "stage9/conv",
        "-o",
        str(tmp_path / "x.vpub"),
    )
    _one_line_error(result, "--keep-float 'stage9/conv': the model has no node of that name")
