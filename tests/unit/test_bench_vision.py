"""bench/vision_models.py builds issue 23's YOLO-class detectors (the checkpoints are not on
the machine): their size and outputs must be the published architectures' (Ultralytics'
model summary of yolov8n.yaml: 3,157,200 parameters; YOLOX's table: YOLOX-s 8.97M (9.0M);
one prediction per anchor point of strides 8, 16 and 32). And
bench/compile_time.py takes the vision exports only when asked, each skipped with a line
when its file is absent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import compile_time  # noqa: E402
import vision_models  # noqa: E402


def _trainable_params(model: onnx.ModelProto) -> int:
    """Conv weights and biases and BatchNorm's scale and shift, as PyTorch counts a model's
    parameters (BatchNorm's running mean and variance are buffers, not parameters)."""
    sizes = {t.name: int(np.prod(t.dims)) for t in model.graph.initializer}
    weights = sum(size for name, size in sizes.items() if name.startswith("w_"))
    statistics = [n.input[3:5] for n in model.graph.node if n.op_type == "BatchNormalization"]
    return weights - sum(sizes[name] for pair in statistics for name in pair)


@pytest.mark.parametrize(
    ("build", "size", "published_params", "output_shape"),
    [  # YOLOv8n's count includes its DFL's 16 fixed weights (a Conv parameter without grad)
        (vision_models.yolov8n, 320, 3_157_200 - 16, (1, 84, 40 * 40 + 20 * 20 + 10 * 10)),
        (vision_models.yolox_s, 416, 8.97e6, (1, 52 * 52 + 26 * 26 + 13 * 13, 85)),
    ],
)
def test_detectors_are_the_published_size_and_run(build, size, published_params, output_shape):
    model = build(size)
    onnx.checker.check_model(model)
    assert abs(_trainable_params(model) - published_params) <= 0.005e6
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    image = np.random.default_rng(0).random((1, 3, size, size), dtype=np.float32)
    (out,) = session.run(None, {"images": image})
    assert out.shape == output_shape
    assert np.isfinite(out).all()


def test_the_generator_is_deterministic():
    assert vision_models.yolov8n(320).SerializeToString() == vision_models.yolov8n(320).SerializeToString()


def test_vision_models_only_when_asked_and_present(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(compile_time, "VISION", tmp_path)
    monkeypatch.setattr(compile_time, "ANCHORS", tmp_path / "no-anchors")
    (tmp_path / "yolov8n_320.onnx").write_bytes(vision_models.yolov8n(320).SerializeToString())
    assert not any(name in compile_time._models(tmp_path / "zoo") for name in compile_time.VISION_MODELS)
    capsys.readouterr()
    models = compile_time._models(tmp_path / "zoo2", vision=True)
    assert models["yolov8n_320"]["kind"] == "vision"
    assert models["yolov8n_320"]["input_shape"] == "images=1x3x320x320"
    assert "ocr_cls" not in models
    skipped = capsys.readouterr().out
    assert "ocr_cls" in skipped and "absent" in skipped and "yolov8n_320" not in skipped
    assert compile_time._shapes("x=1x3x48x192") == {"x": (1, 3, 48, 192)}


def test_the_pytorch_classifier_skips_with_a_line_where_torch_is_absent(tmp_path):
    """bench/run_all.py runs every bench script in the `bench` extra's venv, which has no torch
    (torch_classifier.py runs in a venv of its own): there it says so, writes nothing, and does
    not fail the run. torch is hidden from the script, whatever this venv has."""
    without_torch = "import runpy, sys; sys.modules['torch'] = None; sys.argv = sys.argv[1:]; "
    without_torch += "runpy.run_path(sys.argv[0], run_name='__main__')"
    done = subprocess.run(
        [sys.executable, "-c", without_torch, str(BENCH / "torch_classifier.py"), str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "skipped, torch is not installed here" in done.stderr and "bench/.venv-torch" in done.stderr
    assert not (tmp_path / "out").exists()
