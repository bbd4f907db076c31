"""The rewriting context of frontend/fixes: what a fixer sees of the model (static shapes,
element types, constants, which tensors are read) and the helpers that add nodes and
constants under fresh names derived from the node being rewritten."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from vpuc.compiler.frontend.shapes import static_shapes

FLOATS = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16}


@dataclass
class Rewrite:
    """What a fixer sees of the model, and what it adds to it."""

    model: onnx.ModelProto
    shapes: dict[str, tuple[int, ...] | None]
    types: dict[str, int]
    constants: dict[str, onnx.TensorProto]
    used: set[str]
    opset: int
    new_initializers: list[onnx.TensorProto] = field(default_factory=list)
    _names: set[str] = field(default_factory=set)

    def fresh(self, base: str) -> str:
        name, n = base, 1
        while name in self._names:
            n += 1
            name = f"{base}_{n}"
        self._names.add(name)
        return name

    def const(self, array, base: str) -> str:
        name = self.fresh(base)
        self.new_initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def elem_np(self, tensor: str) -> np.dtype:
        return np.dtype(helper.tensor_dtype_to_np_dtype(self.types[tensor]))


Fixer = Callable[[onnx.NodeProto, Rewrite, str], list[onnx.NodeProto] | None]


def context(model: onnx.ModelProto) -> Rewrite:
    """The rewriting context of a model whose shapes are static and inferred."""
    graph = model.graph
    types = {t.name: t.data_type for t in graph.initializer}
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        if vi.type.HasField("tensor_type"):
            types[vi.name] = vi.type.tensor_type.elem_type
    used = {o.name for o in graph.output} | {i for n in graph.node for i in n.input}
    names = {t.name for t in graph.initializer} | {vi.name for vi in graph.input}
    names |= {o for n in graph.node for o in n.output} | {n.name for n in graph.node}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    constants = {t.name: t for t in graph.initializer}
    return Rewrite(model, static_shapes(model), types, constants, used, opset, _names=names)


def attributes(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def make(ctx: Rewrite, label: str, op: str, inputs: list[str], outputs: list[str] | None = None, **attrs):
    """A new node named `<label>/<op>` (fresh), its output `<label>/<op>` unless given."""
    outputs = outputs or [ctx.fresh(f"{label}/{op.lower()}")]
    return helper.make_node(op, inputs, outputs, name=ctx.fresh(f"{label}/{op}"), **attrs)


def remake(node: onnx.NodeProto, inputs: list[str], outputs: list[str], **attrs) -> onnx.NodeProto:
    """The node itself (same op, name) on other inputs/outputs, attributes replaced by `attrs`
    when given."""
    return helper.make_node(node.op_type, inputs, outputs, name=node.name, **(attrs or attributes(node)))


def reduce_mean(ctx: Rewrite, label: str, x: str, axes: list[int]) -> onnx.NodeProto:
    """ReduceMean over `axes`, keepdims, in the model's opset's form."""
    if ctx.opset >= 18:
        return make(ctx, label, "ReduceMean", [x, ctx.const(np.array(axes, np.int64), f"{label}/axes")])
    return make(ctx, label, "ReduceMean", [x], axes=axes, keepdims=1)
