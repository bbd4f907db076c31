"""The VPU's numerics against onnxruntime's int8 kernels, bit for bit: QLinearConv (s8s8,
per-channel weights) through the reference and through the simulator, QLinearAdd and
QLinearAveragePool / QLinearGlobalAveragePool (com.microsoft) through the simulator."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from vpuc.sim import Add, AvgPool, Conv, Requant
from vpuc.sim import reference as ref
from vpuc.targets.isa.params import requant_multiplier


def _run_ort(node, inputs: dict[str, np.ndarray], initializers: dict[str, np.ndarray]):
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.INT8, a.shape) for n, a in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.INT8, None)],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in initializers.items()],
    )
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    model = helper.make_model(graph, opset_imports=opsets)
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, inputs)[0]


def _scales(rng):
    return (
        np.float32(rng.uniform(0.01, 0.1)),
        np.int8(rng.integers(-20, 20)),
        np.float32(rng.uniform(0.05, 0.5)),
        np.int8(rng.integers(-20, 20)),
    )


CONV_CASES = [
    dict(in_c=8, out_c=16, k=3, stride=1, pad=1, group=1, dilation=1),
    dict(in_c=64, out_c=32, k=3, stride=2, pad=1, group=1, dilation=1),
    dict(in_c=16, out_c=16, k=3, stride=1, pad=1, group=16, dilation=1),
    dict(in_c=16, out_c=8, k=3, stride=1, pad=2, group=4, dilation=2),
    dict(in_c=3, out_c=8, k=1, stride=1, pad=0, group=1, dilation=1),
]


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_qlinearconv_matches_reference_and_simulator(vpu, scratchpad, case, seed):
    rng = np.random.default_rng(seed)
    in_c, out_c, k, group = case["in_c"], case["out_c"], case["k"], case["group"]
    x = rng.integers(-128, 128, (1, in_c, 11, 9)).astype(np.int8)
    w = rng.integers(-127, 128, (out_c, in_c // group, k, k)).astype(np.int8)
    w_scale = rng.uniform(0.001, 0.02, out_c).astype(np.float32)
    bias = rng.integers(-5000, 5000, out_c).astype(np.int32)
    x_scale, x_zp, y_scale, y_zp = _scales(rng)
    node = helper.make_node(
        "QLinearConv",
        ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
        ["y"],
        pads=[case["pad"]] * 4,
        strides=[case["stride"]] * 2,
        dilations=[case["dilation"]] * 2,
        group=group,
        kernel_shape=[k, k],
    )
    initializers = {
        "xs": x_scale,
        "xz": x_zp,
        "w": w,
        "ws": w_scale,
        "wz": np.zeros(out_c, np.int8),
        "ys": y_scale,
        "yz": y_zp,
        "b": bias,
    }
    expected = _run_ort(node, {"x": x}, initializers)[0].transpose(1, 2, 0)

    x_hwc, w_ohwi = x[0].transpose(1, 2, 0), w.transpose(0, 2, 3, 1)
    geometry = dict(
        stride=(case["stride"],) * 2, dilation=(case["dilation"],) * 2, pads=(case["pad"],) * 4, groups=group
    )
    multiplier = requant_multiplier(x_scale, w_scale, y_scale)
    acc = ref.conv2d(x_hwc, w_ohwi, zp=int(x_zp), bias=bias, **geometry)
    np.testing.assert_array_equal(ref.requant_float32(acc, multiplier, int(y_zp)), expected)

    src, wts, b, params = (scratchpad.put(a) for a in (x_hwc, w_ohwi, bias, multiplier))
    acc_addr, dst = scratchpad.reserve(acc.nbytes), scratchpad.reserve(acc.size)
    program = [
        Conv(
            src=src,
            weights=wts,
            bias=b,
            dst=acc_addr,
            in_h=11,
            in_w=9,
            in_c=in_c,
            out_c=out_c,
            kernel_h=k,
            kernel_w=k,
            stride_h=case["stride"],
            stride_w=case["stride"],
            dilation_h=case["dilation"],
            dilation_w=case["dilation"],
            pad_top=case["pad"],
            pad_bottom=case["pad"],
            pad_left=case["pad"],
            pad_right=case["pad"],
            groups=group,
            src_zp=int(x_zp),
            with_bias=1,
        ),
        Requant(
            src=acc_addr,
            dst=dst,
            params=params,
            pixels=acc.shape[0] * acc.shape[1],
            channels=out_c,
            dst_zp=int(y_zp),
        ),
    ]
    result = scratchpad.run(vpu, program)
    np.testing.assert_array_equal(scratchpad.read(result, dst, expected.shape, np.int8), expected)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_qlinearadd_matches_simulator(vpu, scratchpad, seed):
    rng = np.random.default_rng(seed)
    a, b = (rng.integers(-128, 128, 999).astype(np.int8) for _ in range(2))
    a_scale, a_zp, y_scale, y_zp = _scales(rng)
    b_scale, b_zp = np.float32(rng.uniform(0.01, 0.3)), np.int8(rng.integers(-128, 127))
    node = helper.make_node(
        "QLinearAdd", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"], domain="com.microsoft"
    )
    initializers = {"as": a_scale, "az": a_zp, "bs": b_scale, "bz": b_zp, "ys": y_scale, "yz": y_zp}
    expected = _run_ort(node, {"a": a, "b": b}, initializers)
    pa, pb, dst = scratchpad.put(a), scratchpad.put(b), scratchpad.reserve(999)
    add = Add(
        src_a=pa,
        src_b=pb,
        dst=dst,
        count=999,
        zp_a=int(a_zp),
        zp_b=int(b_zp),
        dst_zp=int(y_zp),
        scale_a=a_scale / y_scale,
        scale_b=b_scale / y_scale,
    )
    got = scratchpad.read(scratchpad.run(vpu, [add]), dst, (999,), np.int8)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_qlinearaveragepool_matches_simulator(vpu, scratchpad, count_include_pad):
    rng = np.random.default_rng(count_include_pad)
    x = rng.integers(-128, 128, (1, 24, 9, 9)).astype(np.int8)
    x_scale, x_zp, y_scale, y_zp = _scales(rng)
    node = helper.make_node(
        "QLinearAveragePool",
        ["x", "xs", "xz", "ys", "yz"],
        ["y"],
        domain="com.microsoft",
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
        count_include_pad=count_include_pad,
    )
    initializers = {"xs": x_scale, "xz": x_zp, "ys": y_scale, "yz": y_zp}
    expected = _run_ort(node, {"x": x}, initializers)[0].transpose(1, 2, 0)
    src, dst = scratchpad.put(x[0].transpose(1, 2, 0)), scratchpad.reserve(expected.size)
    pool = AvgPool(
        src=src,
        dst=dst,
        in_h=9,
        in_w=9,
        channels=24,
        kernel_h=3,
        kernel_w=3,
        stride_h=2,
        stride_w=2,
        pad_top=1,
        pad_bottom=1,
        pad_left=1,
        pad_right=1,
        src_zp=int(x_zp),
        dst_zp=int(y_zp),
        scale=x_scale / y_scale,
        count_include_pad=count_include_pad,
    )
    got = scratchpad.read(scratchpad.run(vpu, [pool]), dst, expected.shape, np.int8)
    np.testing.assert_array_equal(got, expected)


def test_qlinearglobalaveragepool_matches_simulator(vpu, scratchpad):
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (1, 64, 7, 7)).astype(np.int8)
    x_scale, x_zp, y_scale, y_zp = _scales(rng)
    node = helper.make_node(
        "QLinearGlobalAveragePool",
        ["x", "xs", "xz", "ys", "yz"],
        ["y"],
        domain="com.microsoft",
        channels_last=0,
    )
    initializers = {"xs": x_scale, "xz": x_zp, "ys": y_scale, "yz": y_zp}
    expected = _run_ort(node, {"x": x}, initializers).reshape(64)
    src, dst = scratchpad.put(x[0].transpose(1, 2, 0)), scratchpad.reserve(64)
    pool = AvgPool(
        src=src,
        dst=dst,
        in_h=7,
        in_w=7,
        channels=64,
        kernel_h=7,
        kernel_w=7,
        src_zp=int(x_zp),
        dst_zp=int(y_zp),
        scale=x_scale / y_scale,
    )
    got = scratchpad.read(scratchpad.run(vpu, [pool]), dst, (64,), np.int8)
    np.testing.assert_array_equal(got, expected)
