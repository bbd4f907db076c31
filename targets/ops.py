"""The VPU op kinds a target may list, and `OpView`: what a support check sees of one op.

The compiler turns each graph op into an OpView (no Relax, no ONNX here), so the checks in
constraints.py stay plain functions of data. A target's `[ops.<kind>]` table names a kind
from OP_KINDS; any other name is an error in the target file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class OpKind:
    """One VPU op kind: the ONNX ops it covers, and which unit runs it."""

    name: str
    onnx_ops: tuple[str, ...]
    unit: str  # "mac", "vector", "lut" or "none" (a pure layout change)
    summary: str


OP_KINDS: dict[str, OpKind] = {
    kind.name: kind
    for kind in (
        OpKind("conv2d", ("Conv",), "mac", "2-D convolution, including grouped and depthwise"),
        OpKind("dense", ("Gemm", "MatMul"), "mac", "matrix product with a constant weight, bias fused"),
        OpKind("matmul", ("MatMul",), "mac", "matrix product of two activations"),
        OpKind("relu", ("Relu",), "vector", "max(x, 0), fused into the producer's requantisation"),
        OpKind("clip", ("Clip",), "vector", "clamp to [min, max]; Relu6 is Clip(0, 6)"),
        OpKind("max_pool2d", ("MaxPool",), "vector", "max pooling"),
        OpKind("avg_pool2d", ("AveragePool",), "vector", "average pooling"),
        OpKind("global_avg_pool", ("GlobalAveragePool", "ReduceMean"), "vector", "mean over H and W"),
        OpKind("add", ("Add",), "vector", "elementwise add of two int8 tensors, both rescaled"),
        OpKind("mul", ("Mul",), "vector", "elementwise multiply of two int8 tensors"),
        OpKind("reshape", ("Reshape", "Flatten", "Squeeze", "Unsqueeze"), "none", "a view: no data moves"),
        OpKind("concat", ("Concat",), "vector", "concatenation along one axis"),
        OpKind("sigmoid", ("Sigmoid",), "lut", "sigmoid through the lookup table"),
        OpKind("tanh", ("Tanh",), "lut", "tanh through the lookup table"),
        OpKind("leaky_relu", ("LeakyRelu",), "lut", "leaky relu through the lookup table"),
        OpKind("gelu", ("Gelu",), "lut", "GELU through the lookup table"),
        OpKind("silu", ("Sigmoid", "Mul"), "lut", "x * sigmoid(x) (a Sigmoid feeding a Mul) as one lookup"),
        OpKind(
            "softmax",
            ("Softmax",),
            "lut",
            "softmax over the innermost axis: row max, exp table, int32 sum, reciprocal, requantise",
        ),
    )
}


@dataclass(frozen=True)
class OpView:
    """One op as a support check sees it.

    `inputs`/`output` are (shape, dtype) pairs; dtype is the dtype the op will have on the
    VPU (a float op that the quantiser will turn into int8 is seen as int8, `quantizable`
    says whether it can be). `constant_inputs[i]` tells whether input i is a constant.
    `attrs` holds the kind's attributes in plain Python: strides, padding (top, left,
    bottom, right), dilation, groups, kernel (kh, kw), pool (kh, kw), axis, axes, min, max.
    `activation` is the activation fused after the op ("relu", "relu6", or None).
    """

    kind: str
    name: str
    inputs: tuple[tuple[tuple[int, ...], str], ...]
    output: tuple[tuple[int, ...], str]
    constant_inputs: tuple[bool, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)
    activation: str | None = None
    static: bool = True

    @property
    def output_shape(self) -> tuple[int, ...]:
        return self.output[0]

    def input_shape(self, index: int = 0) -> tuple[int, ...]:
        return self.inputs[index][0]
