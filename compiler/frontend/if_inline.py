"""Frontend fold step helper: an `If` whose condition is a constant is the branch it takes.

    If(cond = constant) {then: T, else: E}   ->   the nodes of T (or E), inlined

Exporters write `If` for choices the deployment fixes: a voice-activity model branches on
its sample-rate input (`--bind-input sr=16000`), a model on a shape (`Shape(x)[2] > 64`,
which static input shapes decide). Once the condition folds to a constant, the branch taken
replaces the node: its tensors and nodes are renamed `<If node>/<name>` (unique in the
graph), its outputs become the If's outputs, and names it reads from the enclosing graph
stay as they are (ONNX's scoping). Nested subgraphs are renamed the same way.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper


def inline_if(
    node: onnx.NodeProto, condition: onnx.TensorProto, taken: set[str]
) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """(the nodes replacing `node`, the branch's initializers renamed); `taken` is updated."""
    value = numpy_helper.to_array(condition)
    branch_name = "then_branch" if bool(np.asarray(value).reshape(-1)[0]) else "else_branch"
    branch = next(helper.get_attribute_value(a) for a in node.attribute if a.name == branch_name)
    prefix = node.name or node.output[0]
    by_nodes = {o for n in branch.node for o in n.output if o}
    produced = by_nodes | {t.name for t in branch.initializer}
    rename = {t: _fresh(taken, f"{prefix}/{t}") for t in produced}
    outputs = [o.name for o in branch.output]
    direct = {}  # an inner tensor produced once and returned once: written straight to the If's output
    for inner, outer in zip(outputs, node.output, strict=True):
        if inner in by_nodes and outputs.count(inner) == 1:
            direct[inner] = outer
    rename.update(direct)
    nodes = [
        _renamed(n, rename, f"{prefix}/{n.name or f'{n.op_type}_{i}'}") for i, n in enumerate(branch.node)
    ]
    for inner, outer in zip(outputs, node.output, strict=True):
        if inner not in direct:
            nodes.append(
                helper.make_node(
                    "Identity", [rename.get(inner, inner)], [outer], name=_fresh(taken, f"{prefix}/{outer}")
                )
            )
    constants = []
    for tensor in branch.initializer:
        copy = onnx.TensorProto()
        copy.CopyFrom(tensor)
        copy.name = rename[tensor.name]
        constants.append(copy)
    return nodes, constants


def _fresh(taken: set[str], base: str) -> str:
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def _renamed(node: onnx.NodeProto, rename: dict[str, str], name: str | None = None) -> onnx.NodeProto:
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    if name is not None:
        copy.name = name
    copy.input[:] = [rename.get(i, i) for i in node.input]
    copy.output[:] = [rename.get(o, o) for o in node.output]
    for attr in copy.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            _rename_graph(attr.g, rename)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for graph in attr.graphs:
                _rename_graph(graph, rename)
    return copy


def _rename_graph(graph: onnx.GraphProto, rename: dict[str, str]) -> None:
    """Outer names a nested graph reads, renamed (its own names shadow them)."""
    own = {o for n in graph.node for o in n.output} | {t.name for t in graph.initializer}
    own |= {i.name for i in graph.input}
    visible = {k: v for k, v in rename.items() if k not in own}
    for index, inner in enumerate(list(graph.node)):
        graph.node[index].CopyFrom(_renamed(inner, visible))
    for output in graph.output:
        output.name = visible.get(output.name, output.name)
