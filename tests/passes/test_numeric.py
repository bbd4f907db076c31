"""Numeric equivalence: every zoo model and every export fixture, optimised by the whole
pipeline and built for llvm, against onnxruntime on the original model with its graph
optimisations off. Error: max |ours - ort| / max(1, max |ort|) <= 1e-5.

The VPU target's pipeline (NHWC layout) is checked the same way on the models with convs:
its module is still built for llvm here, which tests the layout rewrite's numerics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tvm
from tvm import relax

from vpuc.compiler.frontend import import_model
from vpuc.compiler.pipeline import optimize_imported
from vpuc.examples import zoo

TOLERANCE = 1e-5
EXPORTS = Path(__file__).resolve().parents[1] / "fixtures" / "exports"
FIXTURES = [
    "torch_small_cnn", "torch_upsample_pad", "torch_transformer_block",
    "tf2onnx_style", "paddle_style", "constant_weights",
]  # fmt: skip
CONV_MODELS = ["tinyconvnet", "opzoonet", "resnet_mini", "mobilenet_mini", "tf2onnx_style", "torch_small_cnn"]


def _model_and_feeds(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray], dict]:
    if name in zoo.MODELS:
        model = zoo.build(name)
        return model, zoo.sample_inputs(model), {}
    model = onnx.load(EXPORTS / f"{name}.onnx")
    saved = np.load(EXPORTS / f"{name}.npz")
    feeds = {vi.name: saved[vi.name] for vi in model.graph.input}
    return model, feeds, {k: v.shape for k, v in feeds.items()}


def _reference(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def relative_error(name: str, target: str) -> float:
    model, feeds, shapes = _model_and_feeds(name)
    imported = import_model(model, shapes)
    optimized = optimize_imported(imported, target)
    vm = relax.VirtualMachine(relax.build(optimized.mod, target="llvm"), tvm.cpu())
    result = vm["main"](*[tvm.runtime.tensor(feeds[spec.name]) for spec in imported.inputs])
    ours = [result] if isinstance(result, tvm.runtime.Tensor) else list(result)
    errors = [
        float(np.abs(o.numpy() - r).max() / max(1.0, float(np.abs(r).max())))
        for o, r in zip(ours, _reference(model, feeds), strict=True)
    ]
    return max(errors)


@pytest.mark.parametrize("name", [*zoo.MODELS, *FIXTURES])
def test_optimised_model_matches_onnxruntime(name):
    assert relative_error(name, "cpu") <= TOLERANCE


@pytest.mark.parametrize("name", CONV_MODELS)
def test_vpu_layout_matches_onnxruntime(name):
    assert relative_error(name, "vpu") <= TOLERANCE
