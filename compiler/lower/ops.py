"""The VPU op list: the stable middle layer between the partitioned Relax module and the
code generator (as Vela's api.py sits between its graph and its register emitter).

    extract.py (Relax Codegen="vpu" functions) -> Subgraph of these ops -> schedule.py,
    memory.py, emit.py (which see only these dataclasses and the Target, never Relax)

Every tensor is int8 with per-tensor (scale, zero point); weights are int8, symmetric, per
output channel; biases int32. Each MAC op carries its requantisation as float32
multipliers M[c] = f32(f32(s_x * s_w[c]) / s_y) (targets/isa/params.py encodes them for
the target's `numerics.requant` mode: float32, or int32 multiplier + shift).

Tensors are stored row-major in their Relax shape (NHWC for 4-D). `TensorSpec.nhwc` is
the canonical 4-D view the scheduler tiles: a 2-D (M, K) matrix is (1, M, 1, K), so a
dense layer is a 1x1 convolution over an M x 1 image.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class QParams:
    """Per-tensor quantisation: real = scale * (q - zero_point)."""

    scale: float
    zero_point: int


@dataclass(frozen=True)
class TensorSpec:
    """An int8 tensor of a VPU subgraph, stored row-major in `shape` (the Relax shape).

    `host_layout` is "NCHW" when the host keeps the tensor channels-first and the program's
    DMA transposes it at the subgraph's edge (a model input in NCHW); None otherwise.
    """

    name: str
    shape: tuple[int, ...]
    q: QParams
    host_layout: str | None = None

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) if self.shape else 1

    @property
    def nhwc(self) -> tuple[int, int, int, int]:
        """(N, H, W, C): 4-D as is; (..., M, K) as (1, prod(...) * M, 1, K); (C,) as (1, 1, 1, C)."""
        if len(self.shape) == 4:
            return tuple(self.shape)  # type: ignore[return-value]
        if not self.shape:
            return (1, 1, 1, 1)
        rows = math.prod(self.shape[:-1]) if len(self.shape) > 1 else 1
        return (1, rows, 1, self.shape[-1])


@dataclass(frozen=True)
class Requantize:
    """int32 accumulators -> int8: y = clamp(rne(acc * M[c]) + zero_point, lo, hi)."""

    multipliers: np.ndarray  # float32, one per output channel (or one for all)
    zero_point: int
    clamp: tuple[int, int] = (-128, 127)


@dataclass(frozen=True, eq=False)
class Op:
    """Common to every VPU op: the layer's name (the ONNX node of its core op), every ONNX
    node it computes, its input tensor names and its output tensor name, and the
    quantisation it reads each input with (its own dequantize's) and writes its output with."""

    name: str
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    output: str
    in_q: tuple[QParams, ...]
    out_q: QParams
    members: tuple[str, ...] = ()  # the partitioned module's bindings it was read from
    args: tuple[str, ...] = ()  # the tensors its composite took, in parameter order

    kind = "op"
    unit = "none"  # the unit that computes it: "mac", "vector" or "none" (data movement)


@dataclass(frozen=True, eq=False)
class Conv(Op):
    """2-D convolution (grouped, depthwise with a channel multiplier), bias, requantisation
    and fused activation (in requant.clamp). Weights OHWI (out, kh, kw, in/groups)."""

    weights: np.ndarray = field(repr=False, default=None)  # int8 (O, kh, kw, I/g)
    bias: np.ndarray = field(repr=False, default=None)  # int32 (O,)
    requant: Requantize = None
    strides: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1

    kind = "conv2d"
    unit = "mac"

    @property
    def kernel(self) -> tuple[int, int]:
        return int(self.weights.shape[1]), int(self.weights.shape[2])

    @property
    def out_channels(self) -> int:
        return int(self.weights.shape[0])

    @property
    def is_depthwise(self) -> bool:
        return self.groups > 1 and self.weights.shape[3] == 1


@dataclass(frozen=True, eq=False)
class Dense(Op):
    """Matrix product with constant weights (n, k), bias and requantisation: a 1x1
    convolution over the (1, M, 1, K) view of its input."""

    weights: np.ndarray = field(repr=False, default=None)  # int8 (N, K)
    bias: np.ndarray = field(repr=False, default=None)  # int32 (N,)
    requant: Requantize = None

    kind = "dense"
    unit = "mac"

    @property
    def out_channels(self) -> int:
        return int(self.weights.shape[0])


@dataclass(frozen=True, eq=False)
class Matmul(Op):
    """Matrix product of two activations a (..., M, K) x b (..., K, N), batched over the
    leading dims; per-tensor requantisation."""

    requant: Requantize = None

    kind = "matmul"
    unit = "mac"


@dataclass(frozen=True, eq=False)
class Pool(Op):
    """Max or average pooling over NHWC windows; global average pooling is a window of the
    whole input. Average pooling rescales by `scale` = s_x / s_y."""

    mode: str = "max"  # "max" or "avg"
    kernel: tuple[int, int] = (1, 1)
    strides: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    count_include_pad: bool = False
    scale: float = 1.0
    clamp: tuple[int, int] = (-128, 127)

    kind = "pool"
    unit = "vector"


@dataclass(frozen=True, eq=False)
class Add(Op):
    """a + b, both rescaled to the output: y = rne(Ma (a - za) + Mb (b - zb)) + zy."""

    scale_a: float = 1.0
    scale_b: float = 1.0
    clamp: tuple[int, int] = (-128, 127)

    kind = "add"
    unit = "vector"


@dataclass(frozen=True, eq=False)
class Mul(Op):
    """a * b rescaled: y = rne(M (a - za)(b - zb)) + zy; b may broadcast along channels (or
    be a scalar), and may be a constant of the subgraph (Subgraph.constants)."""

    scale: float = 1.0
    broadcast: bool = False  # b is one row of channels (or a scalar) for every pixel
    clamp: tuple[int, int] = (-128, 127)

    kind = "mul"
    unit = "vector"


@dataclass(frozen=True, eq=False)
class Lut(Op):
    """A unary activation through the 256-entry table: y = table[x + 128]."""

    table: np.ndarray = field(repr=False, default=None)  # int8 (256,)
    function: str = ""

    kind = "lut"
    unit = "vector"


@dataclass(frozen=True, eq=False)
class Softmax(Op):
    """Softmax over the innermost axis (docs/softmax.md): each row's max, exp by a 256-entry
    int32 table, int32 sum, reciprocal, requantisation by `multiplier` / 2^`shift`."""

    table: np.ndarray = field(repr=False, default=None)  # int32 (256,): 2^T exp(s_x (d - 255))
    multiplier: int = 1 << 30
    shift: int = 52
    error_bound_lsb: float = 0.0  # the bound of docs/softmax.md before the final rounding

    kind = "softmax"
    unit = "vector"


@dataclass(frozen=True, eq=False)
class Rescale(Op):
    """Relu, clip, or a reshape whose output has other quantisation parameters:
    y = clamp(rne(M (x - zx)) + zy, lo, hi) (an add whose second term is zero)."""

    multiplier: float = 1.0
    clamp: tuple[int, int] = (-128, 127)

    kind = "rescale"
    unit = "vector"


@dataclass(frozen=True, eq=False)
class Concat(Op):
    """Concatenation along the innermost (channel) axis: each input is a channel slice of
    the output; producers write straight into their slice where they can."""

    axis: int = -1

    kind = "concat"
    unit = "none"


@dataclass(frozen=True, eq=False)
class Reshape(Op):
    """A new shape for the same bytes (row-major throughout): no data moves."""

    kind = "reshape"
    unit = "none"


@dataclass
class Subgraph:
    """One VPU subgraph: its tensors, its ops in a valid order, its inputs and outputs (in
    the order of the Relax function's parameters and results)."""

    symbol: str  # the packed function the host graph calls
    tensors: dict[str, TensorSpec]
    ops: list[Op]
    inputs: list[str]
    outputs: list[str]
    index: int = 0
    constants: dict[str, np.ndarray] = field(default_factory=dict)  # int8 operands in the blob

    def producer(self) -> dict[str, Op]:
        return {op.output: op for op in self.ops}

    def consumers(self) -> dict[str, list[Op]]:
        found: dict[str, list[Op]] = {name: [] for name in self.tensors}
        for op in self.ops:
            for name in op.inputs:
                found[name].append(op)
        return found


MAC_OPS = (Conv, Dense, Matmul)
