"""Small hand-built QDQ ONNX models for the QDQ-input tests: the shapes exporters emit."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def qdq_conv(
    act_scale: float = 0.05,
    act_zero: int = 0,
    weight_scale: np.ndarray | None = None,
    weight_axis: int = 0,
    act_dtype=np.int8,
    requant_scale: float | None = None,
) -> onnx.ModelProto:
    """x -> Q -> DQ -> Conv(DQ(W int8, per-axis), DQ(b int32)) -> Relu -> Q -> DQ [-> Q' -> DQ'] -> y.

    With `requant_scale`, a second Q with other parameters follows the last DQ (a requantise).
    """
    rng = np.random.default_rng(0)
    w_q = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    w_scale = np.full(4, 0.01, np.float32) if weight_scale is None else np.asarray(weight_scale, np.float32)
    b_q = rng.integers(-500, 500, 4).astype(np.int32)
    b_scale = (np.float32(act_scale) * w_scale[: 4 if w_scale.size == 4 else 1]).astype(np.float32)
    zero = np.array(act_zero, act_dtype)
    inits = [
        _init("x_scale", np.array(act_scale, np.float32)),
        _init("x_zero", zero),
        _init("w_q", w_q),
        _init("w_scale", w_scale),
        _init("w_zero", np.zeros(w_scale.shape, np.int8)),
        _init("b_q", b_q),
        _init("b_scale", b_scale if b_scale.size == 4 else np.full(4, b_scale[0], np.float32)),
        _init("b_zero", np.zeros(4, np.int32)),
        _init("y_scale", np.array(0.1, np.float32)),
        _init("y_zero", np.array(-128 if act_dtype == np.int8 else 0, act_dtype)),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"], name="x_quant"),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["x_dq"], name="x_dequant"),
        helper.make_node(
            "DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w"], name="w_dequant", axis=weight_axis
        ),
        helper.make_node("DequantizeLinear", ["b_q", "b_scale", "b_zero"], ["b"], name="b_dequant", axis=0),
        helper.make_node("Conv", ["x_dq", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("QuantizeLinear", ["r", "y_scale", "y_zero"], ["r_q"], name="r_quant"),
        helper.make_node(
            "DequantizeLinear",
            ["r_q", "y_scale", "y_zero"],
            ["y" if requant_scale is None else "r_dq"],
            name="r_dequant",
        ),
    ]
    if requant_scale is not None:
        inits += [
            _init("z_scale", np.array(requant_scale, np.float32)),
            _init("z_zero", np.array(3, act_dtype)),
        ]
        nodes += [
            helper.make_node("QuantizeLinear", ["r_dq", "z_scale", "z_zero"], ["z_q"], name="z_quant"),
            helper.make_node("DequantizeLinear", ["z_q", "z_scale", "z_zero"], ["y"], name="z_dequant"),
        ]
    graph = helper.make_graph(
        nodes,
        "qdq_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
