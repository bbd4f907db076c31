"""How many compute ops a graph has: one rule, applied to a Relax module and to an ONNX
model alike (the pipeline's report and bench/fusion_vs_ort.py, against onnxruntime).

Not a pass. Every op is one of:

    shape-only   reshape, squeeze, expand_dims, flatten (ONNX: Reshape, Flatten, Squeeze,
                 Unsqueeze, Identity, Constant): they change no element; not counted
    transpose    permute_dims, layout_transform (ONNX: Transpose): counted apart
    compute      everything else, counted as kernels:

A kernel is a compute op plus what every backend runs inside it: an anchor (conv, matmul,
Gemm, ORT's FusedConv/FusedMatMul/FusedGemm) absorbs the add of a constant right after it
(ONNX Conv and Gemm carry their bias; Relax writes conv2d + add) and then one activation
(relu, clip, leaky relu, sigmoid, tanh, hard sigmoid: what ORT's FusedConv takes), each
only when it is the sole reader of the op before. `calls` is the plain count of compute
ops, before that grouping.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx
import tvm
from tvm import relax

from vpuc.compiler import compat

RELAX_SHAPE_ONLY = {"relax.reshape", "relax.squeeze", "relax.expand_dims", "relax.flatten"}
RELAX_TRANSPOSE = {"relax.permute_dims", "relax.layout_transform"}
RELAX_ANCHOR = {"relax.nn.conv2d", "relax.nn.conv1d", "relax.nn.conv2d_transpose", "relax.matmul"}
RELAX_ACTIVATION = {"relax.nn.relu", "relax.clip", "relax.nn.leakyrelu", "relax.sigmoid", "relax.tanh"}

ONNX_SHAPE_ONLY = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Constant"}
ONNX_TRANSPOSE = {"Transpose"}
ONNX_ANCHOR = {"Conv", "ConvTranspose", "MatMul", "Gemm", "FusedConv", "FusedMatMul", "FusedGemm"}
ONNX_ACTIVATION = {"Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid"}


@dataclass
class _Op:
    kind: str  # "anchor", "bias", "activation", "compute", "transpose", "shape"
    readers: list[int] = field(default_factory=list)


def _count(ops: list[_Op]) -> dict[str, int]:
    compute = [i for i, op in enumerate(ops) if op.kind not in ("transpose", "shape")]
    absorbed = 0
    for index in compute:
        if ops[index].kind != "anchor":
            continue
        current = index
        for wanted in ("bias", "activation"):
            readers = ops[current].readers
            if len(readers) == 1 and ops[readers[0]].kind == wanted:
                current, absorbed = readers[0], absorbed + 1
    return {
        "compute": len(compute) - absorbed,
        "calls": len(compute),
        "transposes": sum(op.kind == "transpose" for op in ops),
    }


def count_relax_ops(mod: tvm.IRModule, func_name: str = "main") -> dict[str, int]:
    """Kernels, plain compute calls and transposes of a Relax function."""
    bindings = [b for block in mod[func_name].body.blocks for b in block.bindings]
    index = {b.var: i for i, b in enumerate(bindings) if isinstance(b.value, relax.Call)}
    ops = [_Op("shape") for _ in bindings]
    for i, binding in enumerate(bindings):
        value = binding.value
        if not isinstance(value, relax.Call):
            continue
        ops[i].kind = _relax_kind(value)
        for used in relax.analysis.free_vars(value):
            if used in index:
                ops[index[used]].readers.append(i)
    return _count(ops)


def _relax_kind(call: relax.Call) -> str:
    name = getattr(call.op, "name", "")
    if name in RELAX_SHAPE_ONLY:
        return "shape"
    if name in RELAX_TRANSPOSE:
        return "transpose"
    if name in RELAX_ANCHOR:
        return "anchor"
    if name in RELAX_ACTIVATION:
        return "activation"
    if name == "relax.add" and any(compat.constant_array(a) is not None for a in call.args):
        return "bias"
    return "compute"


def count_onnx_ops(model: onnx.ModelProto) -> dict[str, int]:
    """The same counts for an ONNX graph (onnxruntime's optimised model included)."""
    graph = model.graph
    constants = {t.name for t in graph.initializer}
    constants.update(o for n in graph.node if n.op_type == "Constant" for o in n.output)
    producer = {out: i for i, node in enumerate(graph.node) for out in node.output}
    ops = [_Op(_onnx_kind(node, constants)) for node in graph.node]
    for i, node in enumerate(graph.node):
        for name in dict.fromkeys(node.input):
            if name in producer:
                ops[producer[name]].readers.append(i)
    return _count(ops)


def _onnx_kind(node: onnx.NodeProto, constants: set[str]) -> str:
    op = node.op_type
    if op in ONNX_SHAPE_ONLY:
        return "shape"
    if op in ONNX_TRANSPOSE:
        return "transpose"
    if op in ONNX_ANCHOR:
        return "anchor"
    if op in ONNX_ACTIVATION:
        return "activation"
    if op == "Add" and any(name in constants for name in node.input):
        return "bias"
    return "compute"
