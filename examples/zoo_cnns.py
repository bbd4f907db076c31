"""Convolutional models of the example zoo: tinyconvnet, opzoonet, resnet_mini, mobilenet_mini.

Sits beside `examples/zoo.py`, which registers these builders by name. Each builder
returns a checked opset-17 ONNX model with seeded random weights; the docstrings give
the input and output shapes that `tests/unit/test_zoo.py` checks.
"""

from __future__ import annotations

import numpy as np
import onnx

from vpuc.examples.graph_builder import GraphBuilder

# ---------------------------------------------------------------------------------------
# tinyconvnet


def tinyconvnet() -> onnx.ModelProto:
    """Four conv-bn-relu stages and a linear classifier: the smallest VPU-friendly CNN.

    input "input" 1x3x16x16 -> stage1 (8ch) -> stage2 (16ch) -> maxpool (8x8)
    -> stage3 (32ch) -> stage4 (32ch) -> maxpool: trunk "stage4/pool" 1x32x4x4
    -> GlobalAveragePool -> Flatten -> Gemm -> output "logits" 1x4.
    """
    g = GraphBuilder("tinyconvnet", seed=1)
    x = "input"
    channels = [3, 8, 16, 32, 32]
    for stage in range(1, 5):
        prefix = f"stage{stage}"
        x = g.conv_bn(x, prefix, channels[stage - 1], channels[stage])
        x = g.op("Relu", [x], f"{prefix}/relu")
        if stage in (2, 4):
            x = g.op("MaxPool", [x], f"{prefix}/pool", kernel_shape=[2, 2], strides=[2, 2])
    g.global_pool_classifier(x, channels=32, classes=4)
    return g.model({"input": [1, 3, 16, 16]}, {"logits": [1, 4]}, doc=tinyconvnet.__doc__)


# ---------------------------------------------------------------------------------------
# opzoonet


def _swish(g: GraphBuilder, x: str, prefix: str) -> str:
    # swish(x) = x * sigmoid(x)
    gate = g.op("Sigmoid", [x], f"{prefix}/sigmoid")
    return g.op("Mul", [x, gate], f"{prefix}/swish")


def _squeeze_excite(g: GraphBuilder, x: str, prefix: str) -> str:
    # se(x) = x * sigmoid(mean_hw(x))  (a weightless squeeze-excitation gate)
    mean = g.op("ReduceMean", [x], f"{prefix}/se_mean", axes=[2, 3], keepdims=1)
    gate = g.op("Sigmoid", [mean], f"{prefix}/se_sigmoid")
    return g.op("Mul", [x, gate], f"{prefix}/se_scale")


def opzoonet() -> onnx.ModelProto:
    """The tinyconvnet trunk shape built mostly from ops the VPU does not run natively.

    input "input" 1x3x16x16
    -> stage1 conv-bn-swish (8ch)        -> stage2 conv-bn-leakyrelu (16ch), AveragePool 8x8
    -> stage3 conv-bn-relu, per-channel Mul scale, squeeze-excite (ReduceMean, Sigmoid, Mul)
    -> stage4 conv-bn-leakyrelu (32ch), MaxPool: trunk 1x32x4x4
    -> ReduceMean over H, W (1x32) -> MatMul 32x16 -> Sigmoid -> MatMul 16x4 + Add
    -> Softmax -> output "probs" 1x4.
    """
    g = GraphBuilder("opzoonet", seed=2)
    x = g.conv_bn("input", "stage1", 3, 8)
    x = _swish(g, x, "stage1")
    x = g.conv_bn(x, "stage2", 8, 16)
    x = g.op("LeakyRelu", [x], "stage2/leakyrelu", alpha=0.1)
    x = g.op("AveragePool", [x], "stage2/pool", kernel_shape=[2, 2], strides=[2, 2])
    x = g.conv_bn(x, "stage3", 16, 32)
    x = g.op("Relu", [x], "stage3/relu")
    scale = g.rng.uniform(0.5, 1.5, (1, 32, 1, 1)).astype(np.float32)
    x = g.op("Mul", [x, g.constant("stage3/channel_scale.value", scale)], "stage3/channel_scale")
    x = _squeeze_excite(g, x, "stage3")
    x = g.conv_bn(x, "stage4", 32, 32)
    x = g.op("LeakyRelu", [x], "stage4/leakyrelu", alpha=0.1)
    x = g.op("MaxPool", [x], "stage4/pool", kernel_shape=[2, 2], strides=[2, 2])
    x = g.op("ReduceMean", [x], "head/mean", axes=[2, 3], keepdims=0)
    x = g.op("MatMul", [x, g.he_weight("head/proj.weight", (32, 16), 32)], "head/proj")
    x = g.op("Sigmoid", [x], "head/sigmoid")
    x = g.op("MatMul", [x, g.he_weight("head/fc.weight", (16, 4), 16)], "head/fc")
    x = g.op("Add", [x, g.small_bias("head/fc_bias.value", 4)], "head/fc_bias")
    g.op("Softmax", [x], "head/softmax", output="probs", axis=-1)
    return g.model({"input": [1, 3, 16, 16]}, {"probs": [1, 4]}, doc=opzoonet.__doc__)


# ---------------------------------------------------------------------------------------
# resnet_mini


def _basic_block(g: GraphBuilder, x: str, prefix: str, in_ch: int, out_ch: int, stride: int) -> str:
    """conv-bn-relu-conv-bn + skip, then Relu; a 1x1 conv-bn projects the skip if needed."""
    y = g.conv_bn(x, f"{prefix}/conv1", in_ch, out_ch, stride=stride)
    y = g.op("Relu", [y], f"{prefix}/relu1")
    y = g.conv_bn(y, f"{prefix}/conv2", out_ch, out_ch)
    skip = x
    if stride != 1 or in_ch != out_ch:
        skip = g.conv_bn(x, f"{prefix}/downsample", in_ch, out_ch, kernel=1, stride=stride)
    y = g.op("Add", [y, skip], f"{prefix}/add")
    return g.op("Relu", [y], f"{prefix}/relu2")


def resnet_mini() -> onnx.ModelProto:
    """A three-block ResNet: residual Adds and strided 1x1 projections on the skip.

    input "input" 1x3x32x32 -> stem conv-bn-relu (16ch, 32x32)
    -> block1 16->16 stride 1 (identity skip) -> block2 16->32 stride 2 (projection, 16x16)
    -> block3 32->64 stride 2 (projection, 8x8)
    -> GlobalAveragePool -> Flatten -> Gemm -> output "logits" 1x10.
    """
    g = GraphBuilder("resnet_mini", seed=3)
    x = g.conv_bn("input", "stem", 3, 16)
    x = g.op("Relu", [x], "stem/relu")
    x = _basic_block(g, x, "block1", 16, 16, stride=1)
    x = _basic_block(g, x, "block2", 16, 32, stride=2)
    x = _basic_block(g, x, "block3", 32, 64, stride=2)
    g.global_pool_classifier(x, channels=64, classes=10)
    return g.model({"input": [1, 3, 32, 32]}, {"logits": [1, 10]}, doc=resnet_mini.__doc__)


# ---------------------------------------------------------------------------------------
# mobilenet_mini


def _relu6(g: GraphBuilder, x: str, prefix: str) -> str:
    # Relu6 as PyTorch exports it at opset >= 11: Clip(x, min=0, max=6) with input bounds.
    return g.op("Clip", [x, "relu6.min", "relu6.max"], f"{prefix}/relu6")


def _depthwise_separable(g: GraphBuilder, x: str, prefix: str, in_ch: int, out_ch: int, stride: int) -> str:
    """MobileNet-v1 block: depthwise 3x3 conv-bn-relu6, then pointwise 1x1 conv-bn-relu6."""
    x = g.conv_bn(x, f"{prefix}/dw", in_ch, in_ch, kernel=3, stride=stride, group=in_ch)
    x = _relu6(g, x, f"{prefix}/dw")
    x = g.conv_bn(x, f"{prefix}/pw", in_ch, out_ch, kernel=1)
    return _relu6(g, x, f"{prefix}/pw")


def _inverted_residual(g: GraphBuilder, x: str, prefix: str, channels: int, expansion: int) -> str:
    """MobileNet-v2 block: 1x1 expand, depthwise 3x3, linear 1x1 project, Add the input."""
    hidden = channels * expansion
    y = g.conv_bn(x, f"{prefix}/expand", channels, hidden, kernel=1)
    y = _relu6(g, y, f"{prefix}/expand")
    y = g.conv_bn(y, f"{prefix}/dw", hidden, hidden, kernel=3, group=hidden)
    y = _relu6(g, y, f"{prefix}/dw")
    y = g.conv_bn(y, f"{prefix}/project", hidden, channels, kernel=1)
    return g.op("Add", [x, y], f"{prefix}/add")


def mobilenet_mini() -> onnx.ModelProto:
    """A MobileNet-style net: depthwise convs, Clip-as-Relu6 and an inverted residual.

    input "input" 1x3x32x32 -> stem conv 3x3 stride 2 -bn-relu6 (16ch, 16x16)
    -> block1 depthwise-separable 16->32 -> block2 inverted residual (32->64->32, Add)
    -> block3 depthwise-separable 32->64 stride 2 (8x8)
    -> GlobalAveragePool -> Flatten -> Gemm -> output "logits" 1x10.
    """
    g = GraphBuilder("mobilenet_mini", seed=4)
    g.constant("relu6.min", np.array(0.0, dtype=np.float32))
    g.constant("relu6.max", np.array(6.0, dtype=np.float32))
    x = g.conv_bn("input", "stem", 3, 16, stride=2)
    x = _relu6(g, x, "stem")
    x = _depthwise_separable(g, x, "block1", 16, 32, stride=1)
    x = _inverted_residual(g, x, "block2", 32, expansion=2)
    x = _depthwise_separable(g, x, "block3", 32, 64, stride=2)
    g.global_pool_classifier(x, channels=64, classes=10)
    return g.model({"input": [1, 3, 32, 32]}, {"logits": [1, 10]}, doc=mobilenet_mini.__doc__)
