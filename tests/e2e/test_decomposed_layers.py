"""Issue 20, item 3: layers past the conv instruction's field limits run on the VPU by
decomposition. A KWS-like net (tf2onnx-style int8 input, per-channel weights) whose first
conv is 10x4 with padding [4, 1, 5, 1] and stride 2 (past the kernel limit, 7 or 8, and on
vpu and vpu-plus the padding limit, 3), then a depthwise-separable block and a 25x5
average pool over the whole map (on `vpu`, which has no pool, a 25x5 depthwise conv), is
compiled for each VPU target, run on the simulator and checked against the QDQ reference
(onnxruntime, optimisations off). The first conv is lowered as a conv here (sub-kernels),
not as the im2col the planner prefers for it (tests/e2e/test_first_layer_im2col.py). A conv
whose outer output rows read only padding is staged, the report naming those rows."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from test_whole_models import TARGETS, _int8_input, _run_check

from tests.e2e.ort_qdq import quantize_qdq
from vpuc.compiler import compile_model
from vpuc.compiler.lower.codegen import tile_im2col
from vpuc.examples.graph_builder import GraphBuilder
from vpuc.targets import load_target
from vpuc.targets.isa.formats import Conv
from vpuc.targets.isa.program import Program


def _kws_like(nchw: bool, channels: int = 8) -> onnx.ModelProto:
    b = GraphBuilder("kws_like", seed=7)
    x = "x" if nchw else b.op("Transpose", ["x"], "to_nchw", perm=[0, 3, 1, 2])
    w = b.he_weight("conv1.weight", (channels, 1, 10, 4), 40)
    y = b.op(
        "Conv", [x, w, b.small_bias("conv1.bias", channels)], "conv1",
        kernel_shape=[10, 4], strides=[2, 2], pads=[4, 1, 5, 1],
    )  # fmt: skip
    y = b.op("Relu", [y], "relu1")
    y = b.op("Relu", [b.conv(y, "dw1", channels, channels, group=channels)], "relu2")
    y = b.op("Relu", [b.conv(y, "pw1", channels, channels, kernel=1)], "relu3")
    y = b.op("AveragePool", [y], "pool", kernel_shape=[25, 5])
    shape = b.constant("flat_shape", np.array([1, channels], dtype=np.int64))
    y = b.gemm(b.op("Reshape", [y, shape], "flatten"), "fc", channels, 12, output="logits")
    return b.model({"x": [1, 1, 49, 10] if nchw else [1, 49, 10, 1]}, {y: [1, 12]})


def _int8_nhwc_input(qdq_path, out_path):
    """The NHWC form as tf2onnx exports an int8 TFLite model: the int8 input goes through
    the leading Transpose (the QuantizeLinear after it removed) into the first DQ."""
    model = onnx.load(qdq_path)
    graph = model.graph
    name = graph.input[0].name
    (transpose,) = [n for n in graph.node if n.op_type == "Transpose" and n.input[0] == name]
    (quantize,) = [n for n in graph.node if n.op_type == "QuantizeLinear" and n.input[0] == transpose.output[0]]
    shape = [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim]
    graph.node.remove(quantize)
    transpose.output[0] = quantize.output[0]
    del graph.input[:]
    graph.input.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.INT8, shape))
    onnx.checker.check_model(model)
    onnx.save(model, out_path)
    return out_path


@pytest.mark.parametrize("nchw", [True, False], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("target", TARGETS)
def test_a_kws_first_conv_and_its_pool_run_on_the_vpu_decomposed(vpuc, tmp_path, monkeypatch, target, nchw):
    monkeypatch.setattr(tile_im2col, "CHOOSE", "conv")  # the sub-kernels, not an im2col
    shape = [1, 1, 49, 10] if nchw else [1, 49, 10, 1]
    _, qdq_path = quantize_qdq(_kws_like(nchw), tmp_path, shape)
    convert = _int8_input if nchw else _int8_nhwc_input
    model = convert(qdq_path, tmp_path / "m.int8in.onnx")
    artifact = compile_model(model, target=target, profitability=False)
    ops = {o["name"]: o for o in artifact.report["partition"]["ops"]}
    layers = ("conv1", "dw1", "pw1", "pool", "fc")
    assert all(ops[n]["device"] == "vpu" for n in layers), [(n, ops[n]["reason"]) for n in layers]
    assert "decomposed: 10x4 kernel with padding [4, 1, 5, 1]" in ops["conv1"]["reason"]
    if target == "vpu":  # no pool there: one 25x5 depthwise conv, its rows split
        assert "decomposed: 25x5 kernel" in ops["pool"]["reason"], ops["pool"]["reason"]
    host = [n for n, o in ops.items() if o["device"] == "cpu"]
    assert host == ["logits_DequantizeLinear"], host  # the float output's only
    _assert_convs_within_the_limits(artifact, target)
    _run_check(vpuc, artifact.save(tmp_path / "m.vpub"), model)


def _assert_convs_within_the_limits(artifact, target: str) -> None:
    """Every conv instruction of the programs keeps the target's kernel and padding limits."""
    limits = load_target(target).op_limits("conv2d")
    kernel_max, pad_max = limits["kernel"][1], limits["padding"][1]
    convs = [
        i
        for entry in artifact.manifest["vpu_programs"]
        for i in Program.from_bytes(artifact.members[entry["program"]]).instructions
        if isinstance(i, Conv)
    ]
    assert any(i.accumulate for i in convs)  # the sub-kernels add onto one accumulator
    for i in convs:
        assert max(i.kernel_h, i.kernel_w) <= kernel_max, i
        assert max(i.pad_top, i.pad_bottom, i.pad_left, i.pad_right) <= pad_max, i


def _one_conv(kernel, pads) -> onnx.ModelProto:
    b = GraphBuilder("bad_conv", seed=2)
    w = b.he_weight("conv.weight", (4, 2, *kernel), 2 * kernel[0] * kernel[1])
    y = b.op("Conv", ["x", w], "conv", kernel_shape=list(kernel), pads=list(pads))
    out_h, out_w = (20 + pads[0] + pads[2] - kernel[0]) + 1, (20 + pads[1] + pads[3] - kernel[1]) + 1
    return b.model({"x": [1, 2, 20, 20]}, {b.op("Relu", [y], "relu"): [1, 4, out_h, out_w]})


@pytest.mark.parametrize(
    "kernel, pads, why",
    [
        ((2, 9), [5, 4, 5, 4], "output rows 0-3 and 25-28 read only padding"),
        ((1, 1), [6, 0, 6, 0], "output rows 0-5 and 26-31 read only padding"),
    ],
)
def test_a_conv_whose_outer_rows_read_only_padding_says_which_rows(tmp_path, kernel, pads, why):
    """No sub-kernel covers these rows (a conv instruction reads at least one input row):
    the input is staged with all of its padding, and the report names the rows (by hand:
    20 rows, kernel kh, top padding t: rows 0 .. t-kh read only padding, and as many at the
    bottom). Before, the conv stayed on the host with that reason
    (tests/e2e/test_padding_only_rows.py runs such convs against the QDQ reference)."""
    _, qdq_path = quantize_qdq(_one_conv(kernel, pads), tmp_path, [1, 2, 20, 20])
    artifact = compile_model(qdq_path, target="vpu", profitability=False, reference=False)
    ops = {o["name"]: o for o in artifact.report["partition"]["ops"]}
    assert ops["conv"]["device"] == "vpu", ops["conv"]["reason"]
    reason = ops["conv"]["reason"]
    assert why in reason and "staged into a tile holding all of its padding" in reason, reason


def _pool_net(pads, count_include_pad: int) -> onnx.ModelProto:
    """conv, then a 10x3 average pool (past every target's pool window, 8) that is not over
    the whole map."""
    b = GraphBuilder("big_pool", seed=6)
    y = b.op("Relu", [b.conv("x", "conv", 2, 4)], "relu")
    y = b.op(
        "AveragePool", [y], "pool", kernel_shape=[10, 3], strides=[2, 1], pads=pads,
        count_include_pad=count_include_pad,
    )  # fmt: skip
    out_h, out_w = (20 + pads[0] + pads[2] - 10) // 2 + 1, 6 + pads[1] + pads[3] - 2
    return b.model({"x": [1, 2, 20, 6]}, {y: [1, 4, out_h, out_w]})


@pytest.mark.parametrize("target", ["vpu-plus", "u55-256"])
def test_an_average_pool_past_the_window_limit_is_a_depthwise_conv(vpuc, tmp_path, target):
    _, qdq_path = quantize_qdq(_pool_net([2, 0, 2, 0], 1), tmp_path, [1, 2, 20, 6])
    artifact = compile_model(qdq_path, target=target, profitability=False)
    ops = {o["name"]: o for o in artifact.report["partition"]["ops"]}
    assert ops["pool"]["device"] == "vpu", ops["pool"]["reason"]
    assert "AveragePool 10x3 as a depthwise conv" in ops["pool"]["reason"]
    assert "decomposed: 10x3 kernel" in ops["pool"]["reason"]
    _run_check(vpuc, artifact.save(tmp_path / "m.vpub"), qdq_path)


def test_an_average_pool_whose_padded_windows_divide_by_fewer_stays_on_the_host(tmp_path):
    _, qdq_path = quantize_qdq(_pool_net([2, 0, 2, 0], 0), tmp_path, [1, 2, 20, 6])
    artifact = compile_model(qdq_path, target="vpu-plus", profitability=False, reference=False)
    ops = {o["name"]: o for o in artifact.report["partition"]["ops"]}
    assert ops["pool"]["device"] == "cpu"
    assert "Pooling window must be between 1 and 8" in ops["pool"]["reason"], ops["pool"]["reason"]
    assert "count_include_pad=0" in ops["pool"]["reason"], ops["pool"]["reason"]
