"""A plain dataflow view of the main function before partitioning: one `Op` per binding,
with its inputs, its output tensor, its OpView, and the ONNX nodes it computes.

The profitability rule and the report reason on this view (which ops sit where, which
tensors cross between devices), so neither has to read partitioned Relax.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax

from vpuc.compiler import compat
from vpuc.compiler.partition.opview import QDQ_OPS, op_name, op_view, strip_qdq
from vpuc.targets.ops import OpView

HOST = "host"  # the producer of model inputs and the consumer of model outputs


@dataclass
class Op:
    """One binding of main."""

    name: str
    relax_op: str | None
    inputs: list[str]
    shape: tuple[int, ...]
    dtype: str
    view: OpView | None
    onnx_nodes: list[str] = field(default_factory=list)

    @property
    def is_qdq(self) -> bool:
        return self.relax_op in QDQ_OPS

    @property
    def vpu_bytes(self) -> int:
        """Bytes of this tensor on the VPU side: int8 for anything quantizable."""
        count = int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1
        if self.dtype in ("float32", "float16", "int8", "uint8"):
            return count
        return count * np.dtype(self.dtype).itemsize


@dataclass
class Graph:
    ops: dict[str, Op]  # in binding order
    inputs: dict[str, Op]  # model inputs (function params), relax_op None
    outputs: list[str]  # names of the ops (or inputs) the function returns
    consumers: dict[str, list[str]] = field(default_factory=dict)

    def tensor(self, name: str) -> Op:
        return self.ops.get(name) or self.inputs[name]


def infer_layouts(func: relax.Function) -> dict[str, str]:
    """The layout ("NCHW" or "NHWC") of every 4-D tensor of `func`: inputs are NCHW, a conv
    or pool says its output layout, a transpose between the two switches it, and every
    other op keeps the layout of its first 4-D input."""
    layouts = {p.name: "NCHW" for p in func.params}
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            sources = [layouts[n] for n in _input_names(value) if n in layouts]
            layout = _own_layout(value) or (sources[0] if sources else "NCHW")
            layouts[binding.var.name] = layout
    return layouts


def _own_layout(value: relax.Expr) -> str | None:
    attrs = value.attrs if isinstance(value, relax.Call) else None
    for field_ in ("out_layout", "layout", "data_layout"):
        found = getattr(attrs, field_, None) if attrs is not None else None
        if found is not None:
            return str(found)
    if op_name(value) == "relax.permute_dims" and value.attrs.axes is not None:
        axes = [int(a) for a in value.attrs.axes]
        return {(0, 2, 3, 1): "NHWC", (0, 3, 1, 2): "NCHW"}.get(tuple(axes))
    return None


def input_layout(value: relax.Expr, layouts: dict[str, str]) -> str | None:
    """The layout of an op's first activation input."""
    names = _input_names(value)
    return layouts.get(names[0]) if names else None


def build_graph(func: relax.Function, provenance: dict[str, list[str]]) -> Graph:
    """The view of `func` (main), with each binding attributed to its ONNX nodes."""
    inputs = {p.name: _param_op(p) for p in func.params}
    layouts = infer_layouts(func)
    bound = relax.analysis.get_var2val(func)
    ops: dict[str, Op] = {}
    aliases: dict[str, str] = {}
    tuples: dict[str, list[str]] = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            name, value = binding.var.name, binding.value
            if isinstance(value, relax.Var):  # gv = lv: an alias, not an op
                aliases[name] = aliases.get(value.name, value.name)
                continue
            if isinstance(value, relax.Tuple) and all(isinstance(f, relax.Var) for f in value.fields):
                tuples[name] = [aliases.get(f.name, f.name) for f in value.fields]  # gv = (a, b)
                continue
            ops[name] = _op(name, value, aliases, input_layout(value, layouts), bound)
    outputs = [aliases.get(n, n) for n in _returned(func.body.body)]
    outputs = [field_ for n in outputs for field_ in tuples.get(n, [n])]
    graph = Graph(ops, inputs, outputs)
    graph.consumers = _consumers(graph)
    _attribute(graph, provenance)
    return graph


def _param_op(param: relax.Var) -> Op:
    shape, dtype = compat.tensor_type(param) or ((), "unknown")
    return Op(param.name, None, [], shape, dtype, None, [])


def _op(name: str, value: relax.Expr, aliases: dict[str, str], layout: str | None, bound) -> Op:
    info = compat.tensor_type(value) or ((), "unknown")
    inputs = [aliases.get(v, v) for v in _input_names(value)]
    relax_op = op_name(value)
    view = None
    if relax_op is not None and relax_op not in QDQ_OPS and isinstance(value, relax.Call):
        view = op_view(value, name, layout=layout, bound=bound)
    return Op(name, relax_op, inputs, info[0], info[1], view)


def _input_names(value: relax.Expr) -> list[str]:
    names: list[str] = []

    def visit(expr):
        if isinstance(expr, relax.Var):
            names.append(expr.name)
        elif isinstance(expr, relax.Tuple):
            for field_ in expr.fields:
                visit(field_)
        elif isinstance(expr, relax.TupleGetItem):
            visit(expr.tuple_value)

    if isinstance(value, relax.Call):
        for arg in value.args:
            visit(arg)
    else:
        visit(value)
    return list(dict.fromkeys(names))


def _returned(body: relax.Expr) -> list[str]:
    if isinstance(body, relax.Tuple):
        return [name for field_ in body.fields for name in _returned(field_)]
    return [body.name] if isinstance(body, relax.Var) else []


def _consumers(graph: Graph) -> dict[str, list[str]]:
    consumers: dict[str, list[str]] = {name: [] for name in [*graph.inputs, *graph.ops]}
    for op in graph.ops.values():
        for source in op.inputs:
            consumers.setdefault(source, []).append(op.name)
    for name in graph.outputs:
        consumers.setdefault(name, []).append(HOST)
    return consumers


def _attribute(graph: Graph, provenance: dict[str, list[str]]) -> None:
    """Named bindings take their ONNX nodes from the provenance; an unnamed helper binding
    (a bias reshape, a weight transpose) belongs to the nodes of its first named consumer."""
    for op in reversed(graph.ops.values()):
        if op.name in provenance:
            op.onnx_nodes = list(provenance[op.name])
            continue
        for consumer in graph.consumers.get(op.name, []):
            if consumer != HOST and graph.ops[consumer].onnx_nodes:
                op.onnx_nodes = list(graph.ops[consumer].onnx_nodes)
                break


@dataclass(frozen=True)
class Composite:
    """One composite function inside a VPU subgraph and the bindings it took over."""

    subgraph: int
    name: str  # e.g. "vpu.conv2d_bias_act"
    members: tuple[str, ...]


def vpu_composites(mod: tvm.IRModule) -> list[Composite]:
    """Every composite of every VPU function; subgraphs numbered in main's call order."""
    order = _vpu_call_order(mod)
    found = []
    for gvar, func in mod.functions.items():
        if not isinstance(func, relax.Function) or func.attrs is None or "Codegen" not in func.attrs:
            continue
        for name, members in _composites(func):
            found.append(Composite(order[gvar.name_hint], name, tuple(members)))
    return sorted(found, key=lambda c: (c.subgraph, c.members))


def _vpu_call_order(mod: tvm.IRModule) -> dict[str, int]:
    order: dict[str, int] = {}
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar):
                if "Codegen" in (mod[value.op].attrs or {}):
                    order.setdefault(value.op.name_hint, len(order))
    return order


def _composites(func: relax.Function) -> list[tuple[str, list[str]]]:
    found = []
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Function) and value.attrs is not None and "Composite" in value.attrs:
                names = str(value.attrs.get("vars", "")).split(",")
                found.append((str(value.attrs["Composite"]), [n for n in names if n]))
    return found


def core_of(graph: Graph, names: list[str]) -> Op | None:
    """The op that does a composite's work: its first op in binding order that is not a
    quantize/dequantize (the bias add, activation and requantisation after it are fused
    into its epilogue)."""
    position = {name: index for index, name in enumerate(graph.ops)}
    ordered = sorted((n for n in names if n in graph.ops), key=position.__getitem__)
    return next((graph.ops[n] for n in ordered if not graph.ops[n].is_qdq), None)


__all__ = ["HOST", "Composite", "Graph", "Op", "build_graph", "core_of", "strip_qdq", "vpu_composites"]
