"""layout on real exports: a QDQ model's Q/DQ follow the conv's NHWC (a per-channel axis
moves along), an exporter's own NHWC <-> NCHW transposes vanish, ops without a channels-last
form (ConvTranspose) keep their layout with transposes only at their edges, and no model of
the corpus ends with more transposes than it was exported with, unless a conv needs NHWC
next to an op that needs NCHW."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from tvm import relax

from vpuc.compiler.frontend import import_model
from vpuc.compiler.passes import PassOptions, layout
from vpuc.compiler.passes.layout import count_transposes
from vpuc.compiler.passes.provenance import import_with_provenance
from vpuc.compiler.pipeline import optimize_imported

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from corpus import TF2ONNX, conv_transpose_net, corpus_models  # noqa: E402


def _calls(mod, op: str) -> list[relax.Call]:
    return [
        b.value
        for block in mod["main"].body.blocks
        for b in block.bindings
        if isinstance(b.value, relax.Call) and getattr(b.value.op, "name", "") == op
    ]


@pytest.mark.parametrize("name", [n for n in TF2ONNX if n != "keras_conv1d"])
@pytest.mark.parametrize("target", ["cpu", "vpu"])
def test_tf2onnx_exports_end_with_no_transposes(name, target):
    entry = corpus_models()[name]
    result = optimize_imported(import_model(entry.model), target)
    assert count_transposes(result.mod) == 0
    if target == "vpu":  # on the CPU a tie keeps NCHW (DS-CNN's one-channel input is a Reshape)
        assert {str(c.attrs.data_layout) for c in _calls(result.mod, "relax.nn.conv2d")} == {"NHWC"}
        assert {str(c.attrs.layout) for c in _calls(result.mod, "relax.nn.max_pool2d")} <= {"NHWC"}


def test_per_channel_quantize_follows_with_its_axis():
    """A per-channel activation quantize on NCHW axis 1 becomes axis 3 in NHWC."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 3, 8, 8], "float32"))
    weight = relax.const(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32))
    scale = relax.const(np.array([0.1, 0.2, 0.3, 0.4], np.float32))
    zero = relax.const(np.zeros(4, np.int8))
    with bb.function("main", [x]):
        with bb.dataflow():
            conv = bb.emit(relax.op.nn.conv2d(x, weight, padding=[1, 1, 1, 1]))
            q = bb.emit(relax.op.quantize(conv, scale, zero, 1, "int8"))
            out = bb.emit_output(relax.op.dequantize(q, scale, zero, 1, "float32"))
        bb.emit_func_output(out)
    mod = layout(bb.get(), PassOptions(target_kind="vpu"))
    (quantize,) = _calls(mod, "relax.quantize")
    assert int(quantize.attrs.axis) == 3 and list(quantize.ty.shape.values) == [1, 8, 8, 4]


def test_conv_transpose_keeps_its_layout_between_nhwc_convs():
    result = optimize_imported(import_model(conv_transpose_net()), "vpu")
    (transpose,) = _calls(result.mod, "relax.nn.conv2d_transpose")
    assert str(transpose.attrs.data_layout) == "NCHW"
    assert {str(c.attrs.data_layout) for c in _calls(result.mod, "relax.nn.conv2d")} == {"NHWC"}
    assert count_transposes(result.mod) == 2  # into the NHWC conv, back to NCHW after it


@pytest.mark.parametrize(
    "name",
    [
        "constant_weights",
        "paddle_style",
        "torch_small_cnn",
        "torch_upsample_pad",
        "keras_conv1d",
        "tflite_resnet8",
    ],
)
def test_cpu_layout_never_adds_transposes(name):
    entry = corpus_models()[name]
    imported = import_model(entry.model, entry.options.get("input_shapes"))
    before = count_transposes(import_with_provenance(imported))
    assert count_transposes(optimize_imported(imported, "cpu").mod) <= before
