"""The partition report: every ONNX node with its device and reason, the VPU subgraphs,
every boundary with its bytes, and totals for the raw cut and the final decision.

JSON keys (docs/partition.md): `ops` [{name, op, device, subgraph, reason}], `subgraphs`
[{id, ops}], `boundaries` [{direction, tensor, producer, consumer, shape, dtype, bytes}],
`totals` and `raw_totals` {vpu_ops, cpu_ops, subgraphs, boundaries, bytes}, plus
`profitability` (the verdict and figures of every raw subgraph) and `target`.

Ops are ONNX nodes of the prepared model: a Conv and its Relu are two ops even inside one
composite. A node the graph passes removed without replacing (an Identity, a Dropout) has
device "none".
"""

from __future__ import annotations

from typing import Any

import onnx

from vpuc.compiler.partition.annotate import Annotation, not_listed_reason
from vpuc.compiler.partition.cost import op_cpu_cycles
from vpuc.compiler.partition.graph import HOST, Graph
from vpuc.compiler.partition.placement import Boundary, boundaries
from vpuc.targets import Target


def build_report(
    graph: Graph,
    onnx_model: onnx.ModelProto,
    target: Target,
    raw,
    final,
    annotation: Annotation,
    verdicts,
    notes: dict[str, str] | None = None,
) -> dict[str, Any]:
    """`raw` and `final` are partition.Placement objects; `notes` (ONNX node -> text) say
    what the decomposition made of a node, and end its reason."""
    names = _tensor_names(graph, onnx_model)
    ops = _op_rows(graph, onnx_model, target, final, annotation, verdicts)
    for row in ops:
        if row["name"] in (notes or {}):
            row["reason"] = f"{row['reason']} ({notes[row['name']]})"
    subgraphs = _subgraph_rows(graph, onnx_model, final)
    crossings = [_boundary_row(b, graph, names) for b in boundaries(graph, final.subgraph_of)]
    return {
        "target": target.name,
        "ops": ops,
        "subgraphs": subgraphs,
        "boundaries": crossings,
        "totals": _totals(ops, subgraphs, crossings),
        "raw_totals": _raw_totals(graph, onnx_model, raw),
        "profitability": [v.to_json() for v in verdicts],
    }


def _node_devices(graph: Graph, subgraph_of: dict[str, int]) -> dict[str, set]:
    devices: dict[str, set] = {}
    for op in graph.ops.values():
        for node in op.onnx_nodes:
            devices.setdefault(node, set()).add(subgraph_of.get(op.name, "cpu"))
    return devices


def _op_rows(graph, onnx_model, target, final, annotation, verdicts) -> list[dict[str, Any]]:
    devices = _node_devices(graph, final.subgraph_of)
    composite_of = final.composite_of
    rows = []
    for node in onnx_model.graph.node:
        placed = devices.get(node.name)
        if not placed:
            rows.append(_row(node, "none", None, "removed by the graph passes: computes nothing at run time"))
            continue
        vpu = sorted(d for d in placed if d != "cpu")
        if vpu:
            composite = next(
                composite_of[op.name].name for op in _ops_of(graph, node.name) if op.name in composite_of
            )
            row = _row(node, "vpu", vpu[0], f"{composite} in VPU subgraph {vpu[0]}")
            notes = annotation.notes
            split = [notes[op.name] for op in _ops_of(graph, node.name) if op.name in notes]
            if split:  # how the code generator covers it past the op list's limits
                row["reason"] += f" ({split[0]})"
            # a Q or DQ of the node that the cut left on the host still runs there, but for
            # one at a layout edge: the program's DMA may take that tensor as it is (edges.py)
            on_host = [
                op
                for op in _ops_of(graph, node.name)
                if op.name not in final.subgraph_of and not _at_layout_edge(graph, op)
            ]
            if on_host:
                row["host_cycles_modelled"] = sum(op_cpu_cycles(op, target) for op in on_host)
            rows.append(row)
        else:
            row = _row(node, "cpu", None, _cpu_reason(graph, node, target, annotation))
            # the target host's modelled time for it (cost.op_cpu_cycles, [host] figures): what
            # `vpuc run` adds to the end-to-end latency on the target system
            row["host_cycles_modelled"] = sum(op_cpu_cycles(op, target) for op in _ops_of(graph, node.name))
            rows.append(row)
    return rows


def _at_layout_edge(graph: Graph, op) -> bool:
    """Whether a binding is the layout transpose of a model input, or the dequantize or
    quantize around it: the program's DMA may take that input channels-first as it is, and
    the host then runs none of them (edges.py)."""
    near = [op.name, *op.inputs, *graph.consumers.get(op.name, [])]
    return any(_input_transpose(graph, n) for n in near)


def _input_transpose(graph: Graph, name: str) -> bool:
    op = graph.ops.get(name)
    if op is None or op.relax_op != "relax.permute_dims" or not op.inputs:
        return False
    source = graph.ops.get(op.inputs[0])
    return op.inputs[0] in graph.inputs or (
        source is not None and source.is_qdq and bool(source.inputs) and source.inputs[0] in graph.inputs
    )


def _row(node: onnx.NodeProto, device: str, subgraph, reason: str) -> dict[str, Any]:
    return {
        "name": node.name, "op": node.op_type, "device": device, "subgraph": subgraph, "reason": reason,
        "inputs": [name for name in node.input if name], "outputs": list(node.output),
    }  # fmt: skip


def _ops_of(graph: Graph, node_name: str):
    return [op for op in graph.ops.values() if node_name in op.onnx_nodes]


def _cpu_reason(graph: Graph, node: onnx.NodeProto, target: Target, annotation: Annotation) -> str:
    ops = _ops_of(graph, node.name)
    for op in ops:  # binding order: the node's core op (a Conv's conv2d) before its bias add
        if op.name in annotation.refusals:
            return "; ".join(annotation.refusals[op.name])
    for op in reversed(ops):
        if op.view is not None and op.view.kind != "unknown" and not target.supports(op.view.kind):
            return not_listed_reason(op.view.kind, target)
    computing = [op for op in ops if op.relax_op is not None and not op.is_qdq]
    if computing:
        last = computing[-1]
        how = "fused by the graph passes into" if len(last.onnx_nodes) > 1 else "imported as"
        return f"no VPU op covers {node.op_type} ({how} Relax {last.relax_op})"
    return f"no VPU op covers {node.op_type}"


def _subgraph_rows(graph, onnx_model, placement) -> list[dict[str, Any]]:
    rows: dict[int, list[str]] = {}
    order = [n.name for n in onnx_model.graph.node]
    for name, subgraph in placement.subgraph_of.items():
        rows.setdefault(subgraph, []).extend(graph.ops[name].onnx_nodes)
    return [
        {"id": subgraph, "ops": sorted(set(nodes), key=order.index)}
        for subgraph, nodes in sorted(rows.items())
    ]


def _glue(op) -> bool:
    """A binding that computes no op of its own for the report: a quantize or dequantize
    around a tensor, or a layout copy the passes inserted."""
    return op.is_qdq or not op.onnx_nodes


def _tensor_names(graph: Graph, onnx_model: onnx.ModelProto) -> dict[str, str]:
    """Binding or input name -> how the report names its tensor: the ONNX tensor it holds
    (its last node's first output); a quantize/dequantize holds its input's tensor; a
    binding the passes inserted (a layout transpose) is the tensor it transforms, marked."""
    outputs = {node.name: node.output[0] for node in onnx_model.graph.node if node.output}
    names = {name: name for name in graph.inputs}
    for op in graph.ops.values():
        source = names.get(op.inputs[0]) if op.inputs else None
        if op.is_qdq and source:
            names[op.name] = source
        elif op.onnx_nodes:
            names[op.name] = outputs.get(op.onnx_nodes[-1], op.name)
        elif source:
            names[op.name] = f"{source} ({_what(op)})"
        else:
            names[op.name] = op.name
    return names


def _what(op) -> str:
    return {"relax.permute_dims": "transposed", "relax.reshape": "reshaped"}.get(
        op.relax_op, op.relax_op or "copy"
    )


def _source(graph: Graph, name: str) -> str:
    """Follow glue bindings back to the op or model input that produced the tensor."""
    while name in graph.ops and _glue(graph.ops[name]) and graph.ops[name].inputs:
        name = graph.ops[name].inputs[0]
    return name


def _readers(graph: Graph, name: str) -> list[str]:
    """The ops (or HOST) that read a binding, looking through glue bindings."""
    if name == HOST or not _glue(graph.ops[name]):
        return [name]
    found = [r for consumer in graph.consumers.get(name, []) for r in _readers(graph, consumer)]
    return found or [name]


def _endpoint(graph: Graph, name: str, side: str, names: dict[str, str], tensor: str) -> str:
    """How a boundary's end reads in the report: an ONNX node, `input:x` or `output:y`."""
    if name == HOST:
        return f"output:{names.get(tensor, tensor)}"
    if side == "producer":
        name = _source(graph, name)
    if name in graph.inputs:
        return f"input:{name}"
    op = graph.ops[name]
    return op.onnx_nodes[-1 if side == "producer" else 0] if op.onnx_nodes else name


def _boundary_row(boundary: Boundary, graph: Graph, names: dict[str, str]) -> dict[str, Any]:
    readers = [
        r
        for c in boundary.consumers
        for r in (_readers(graph, c) if boundary.direction == "VPU->CPU" else [c])
    ]
    ends = [_endpoint(graph, c, "consumer", names, boundary.tensor) for c in readers]
    return {
        "direction": boundary.direction,
        "tensor": names.get(boundary.tensor, boundary.tensor),
        "producer": _endpoint(graph, boundary.tensor, "producer", names, boundary.tensor),
        "consumer": ", ".join(dict.fromkeys(ends)),
        "shape": list(boundary.shape),
        "dtype": "int8",
        "bytes": boundary.nbytes,
    }


def _totals(ops, subgraphs, crossings) -> dict[str, int]:
    return {
        "vpu_ops": sum(1 for op in ops if op["device"] == "vpu"),
        "cpu_ops": sum(1 for op in ops if op["device"] == "cpu"),
        "subgraphs": len(subgraphs),
        "boundaries": len(crossings),
        "bytes": sum(b["bytes"] for b in crossings),
    }


def _raw_totals(graph, onnx_model, raw) -> dict[str, int]:
    devices = _node_devices(graph, raw.subgraph_of)
    vpu = sum(1 for node in onnx_model.graph.node if any(d != "cpu" for d in devices.get(node.name, ())))
    cpu = sum(
        1
        for node in onnx_model.graph.node
        if devices.get(node.name) and all(d == "cpu" for d in devices[node.name])
    )
    found = boundaries(graph, raw.subgraph_of)
    return {
        "vpu_ops": vpu,
        "cpu_ops": cpu,
        "subgraphs": len(set(raw.subgraph_of.values())),
        "boundaries": len(found),
        "bytes": sum(b.nbytes for b in found),
    }
