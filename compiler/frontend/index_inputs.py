"""Frontend helper: integer inputs that index a table, and the table's size.

An embedding's ids, a lookup's positions: an integer graph input read as Gather indices
(directly or through Cast, Reshape, Squeeze, ...) must stay within the table, or TVM's
compiled code reads past its end (onnxruntime refuses such indices). The manifest records
the bound for each such input (`index_range`: n, the indices valid in [-n, n)), so that
`vpuc run` draws its default random inputs in [0, n) and refuses user inputs outside it.
"""

from __future__ import annotations

import onnx
from onnx import helper

# Ops that pass index values through unchanged (only their arrangement changes).
PASS_THROUGH = {
    "Cast",
    "Reshape",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "Identity",
    "Transpose",
    "Expand",
    "Tile",
}
INDEXING = {"Gather": (1, 0), "GatherElements": (1, 0)}  # op -> (indices input, data input)


def index_ranges(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...] | None]) -> dict[str, int]:
    """{graph input: table size n} for integer inputs that index a table."""
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in model.graph.node:
        for position, tensor in enumerate(node.input):
            consumers.setdefault(tensor, []).append((node, position))
    found = {}
    for value in model.graph.input:
        if value.type.tensor_type.elem_type not in _INTEGER:
            continue
        bound = _bound(value.name, consumers, shapes, set())
        if bound is not None:
            found[value.name] = bound
    return found


_INTEGER = {
    onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16, onnx.TensorProto.INT8,
    onnx.TensorProto.UINT8, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32,
}  # fmt: skip


def _bound(tensor: str, consumers, shapes, seen: set[str]) -> int | None:
    """The smallest table `tensor` indexes, following pass-through ops."""
    if tensor in seen:
        return None
    seen.add(tensor)
    bounds = []
    for node, position in consumers.get(tensor, []):
        if node.op_type in INDEXING and position == INDEXING[node.op_type][0]:
            data = shapes.get(node.input[INDEXING[node.op_type][1]])
            if data:
                axis = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 0)
                bounds.append(int(data[axis % len(data)]))
        elif node.op_type in PASS_THROUGH and position == 0:
            inner = [_bound(out, consumers, shapes, seen) for out in node.output]
            bounds += [b for b in inner if b is not None]
    return min(bounds) if bounds else None
