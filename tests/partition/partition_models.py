"""Small ONNX models of the shapes the partition tests need, built with onnx.helper."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Builder:
    """Appends nodes and seeded weights; `model()` closes the graph."""

    def __init__(self, input_shape, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.input_shape = list(input_shape)
        self.last = "input"

    def weight(self, name: str, shape, scale: float = 0.2) -> str:
        self.inits.append(
            numpy_helper.from_array((self.rng.standard_normal(shape) * scale).astype(np.float32), name)
        )
        return name

    def node(self, op: str, name: str, inputs=None, **attrs) -> str:
        inputs = [self.last] if inputs is None else inputs
        self.nodes.append(helper.make_node(op, inputs, [name + ":0"], name=name, **attrs))
        self.last = name + ":0"
        return self.last

    def conv(self, name, cin, cout, k=3, stride=1, pad=1, group=1):
        w = self.weight(name + ".w", (cout, cin // group, k, k))
        b = self.weight(name + ".b", (cout,))
        return self.node("Conv", name, [self.last, w, b], pads=[pad] * 4, strides=[stride] * 2, group=group)

    def model(self, output_shape) -> onnx.ModelProto:
        self.nodes[-1].output[0] = "output"
        graph = helper.make_graph(
            self.nodes,
            "g",
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, self.input_shape)],
            [helper.make_tensor_value_info("output", TensorProto.FLOAT, list(output_shape))],
            self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        onnx.checker.check_model(model, full_check=True)
        return model


def tiny_trunk(b: Builder) -> None:
    """Four conv+relu stages, max pooling 16 -> 8 -> 4: the trunk ends at 1x32x4x4."""
    for index, (cin, cout) in enumerate([(3, 8), (8, 16), (16, 32), (32, 32)], start=1):
        b.conv(f"stage{index}/conv", cin, cout)
        b.node("Relu", f"stage{index}/relu")
        if index in (2, 4):
            b.node("MaxPool", f"stage{index}/pool", kernel_shape=[2, 2], strides=[2, 2])


def tinyconvnet_shaped() -> onnx.ModelProto:
    """Only the global average pool is off the vpu op list."""
    b = Builder([1, 3, 16, 16])
    tiny_trunk(b)
    b.node("GlobalAveragePool", "head/gap")
    b.node("Flatten", "head/flatten")
    fc = b.weight("head/fc.w", (4, 32))
    b.node("Gemm", "head/fc", [b.last, fc, b.weight("head/fc.b", (4,))], transB=1)
    return b.model([1, 4])


def opzoonet_shaped() -> onnx.ModelProto:
    """A trunk interleaved with ops the vpu lacks: over half the ops fall back."""
    b = Builder([1, 3, 16, 16])
    b.conv("c1", 3, 8)
    b.node("Sigmoid", "sig1")
    b.conv("c2", 8, 8)
    b.node("LeakyRelu", "leaky1", alpha=0.1)
    b.node("AveragePool", "avg1", kernel_shape=[2, 2], strides=[2, 2])
    b.conv("c3", 8, 16)
    gate = b.node("Sigmoid", "sig2")
    b.node("Mul", "mul1", [gate, "c3:0"])
    b.node("ReduceMean", "mean1", axes=[2, 3], keepdims=1)
    b.node("Flatten", "flat")
    b.node("MatMul", "mm1", [b.last, b.weight("mm1.w", (16, 8))])
    b.node("Tanh", "tanh1")
    b.node("MatMul", "mm2", [b.last, b.weight("mm2.w", (8, 4))])
    b.node("Softmax", "softmax", axis=-1)
    return b.model([1, 4])


def strided_conv_model(stride: int) -> onnx.ModelProto:
    b = Builder([1, 8, 16, 16])
    b.conv("conv", 8, 8, k=3, stride=stride, pad=1)
    b.node("Relu", "relu")
    out = (16 + 2 - 3) // stride + 1
    return b.model([1, 8, out, out])
