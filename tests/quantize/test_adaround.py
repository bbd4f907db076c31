"""Adaptive rounding (compiler/quantize/transforms/adaround.py): the layer inputs it sees are what the
conv reads (against onnxruntime's Conv), and the rounding it learns lowers the layer's
output error on fresh samples while only choosing between floor and ceil."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from tvm import relax

from vpuc.compiler.quantize.params import quantize_weight
from vpuc.compiler.quantize.transforms import adaround


def _onnx_conv(x_nchw, w_oihw, stride, pad, group):
    node = helper.make_node(
        "Conv",
        ["x", "w"],
        ["y"],
        strides=[stride] * 2,
        pads=[pad] * 4,
        group=group,
        kernel_shape=list(w_oihw.shape[2:]),
    )
    graph = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_nchw.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(w_oihw, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x_nchw})[0]


@pytest.mark.parametrize("stride, pad, group", [(1, 1, 1), (2, 0, 1), (1, 1, 4)])
def test_im2col_rows_times_weights_is_the_conv(stride, pad, group):
    """Rows of the layer input (NHWC, OHWI) times the flattened weights give onnxruntime's
    Conv output: the H that AdaRound builds from them is E[x x^T] of what the conv reads."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 6, 6, 8)).astype(np.float32)
    w = rng.standard_normal((8, 3, 3, 8 // group)).astype(np.float32)  # OHWI
    data = relax.Var("x", relax.TensorType(x.shape, "float32"))
    call = relax.op.nn.conv2d(
        data,
        relax.const(w),
        strides=stride,
        padding=pad,
        groups=group,
        data_layout="NHWC",
        kernel_layout="OHWI",
    )
    call = relax.BlockBuilder().normalize(call)
    rows = adaround._rows(x, call, "conv2d")  # (groups, P, K)
    grouped, _ = adaround._grouped(w, call, "conv2d")  # (groups, O/g, K)
    ours = np.einsum("gpk,gok->gpo", rows, grouped)  # (g, P, O/g)
    reference = _onnx_conv(x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2), stride, pad, group)
    expected = reference.transpose(0, 2, 3, 1).reshape(-1, group, 8 // group).transpose(1, 0, 2)
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-4)


def test_learned_rounding_lowers_the_output_error_on_fresh_samples():
    rng = np.random.default_rng(1)
    mixing = rng.standard_normal((32, 32)) * np.linspace(0.2, 3.0, 32)  # correlated inputs
    calibration = rng.standard_normal((2048, 32)) @ mixing
    fresh = rng.standard_normal((2048, 32)) @ mixing
    weight = rng.standard_normal((32, 16)).astype(np.float32)  # dense (K, N)
    nearest, params = quantize_weight(weight, axis=1)
    grouped = weight.T[None].astype(np.float64)
    scale = params.scale.astype(np.float64).reshape(1, 16, 1)
    hessian = (calibration.T @ calibration / len(calibration))[None]
    learned, iterations = adaround._optimise(grouped, scale, hessian, seconds=2.0)
    learned = learned[0].T
    ratio = weight / params.scale
    assert iterations >= adaround.MIN_ITERATIONS
    assert np.all((learned == np.floor(ratio)) | (learned == np.floor(ratio) + 1))
    assert np.abs(learned).max() <= 127

    def output_error(integers):
        return float(np.mean((fresh @ (integers * params.scale) - fresh @ weight) ** 2))

    assert output_error(learned) < 0.8 * output_error(nearest.astype(np.float64))
