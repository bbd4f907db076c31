"""The partition graph's layout, computed here (no graphviz binary): longest-path layering
(each op one row below its deepest producer, a source just above its first reader), then
barycentre ordering (each row sorted by the mean position of its neighbours, a few sweeps
down and up). docs/report.md says why."""

from __future__ import annotations

from dataclasses import dataclass

SWEEPS = 4


@dataclass
class Layout:
    position: dict[str, tuple[int, int]]  # node -> (layer, index in layer)
    edges: list[tuple[str, str, str]]  # (producer, consumer, tensor)
    width: int  # nodes in the widest layer
    depth: int  # layers


def layered_layout(ops: list[dict]) -> Layout:
    """ops: report rows with name, inputs and outputs, in topological order (ONNX's)."""
    producer = {tensor: op["name"] for op in ops for tensor in op.get("outputs", [])}
    edges = [(producer[t], op["name"], t) for op in ops for t in op.get("inputs", []) if t in producer]
    preds: dict[str, list[str]] = {op["name"]: [] for op in ops}
    succs: dict[str, list[str]] = {op["name"]: [] for op in ops}
    for src, dst, _ in edges:
        if src in preds and dst in preds and src != dst:
            preds[dst].append(src)
            succs[src].append(dst)
    layer: dict[str, int] = {}
    for op in ops:  # topological order: every producer already has its layer
        layer[op["name"]] = 1 + max((layer.get(p, -1) for p in preds[op["name"]]), default=-1)
    for op in reversed(ops):  # a source (a weight's dequantise) sits just above its first reader
        name = op["name"]
        if not preds[name] and succs[name]:
            layer[name] = max(0, min(layer[s] for s in succs[name]) - 1)
    rows: dict[int, list[str]] = {}
    for op in ops:
        rows.setdefault(layer[op["name"]], []).append(op["name"])
    order = {name: i for row in rows.values() for i, name in enumerate(row)}
    depth = max(rows, default=-1) + 1
    for sweep in range(SWEEPS):
        down = sweep % 2 == 0
        for index in range(1, depth) if down else range(depth - 2, -1, -1):
            row = rows[index]
            neighbours = preds if down else succs
            row.sort(key=lambda n: _barycentre(n, neighbours[n], order))
            order.update({name: i for i, name in enumerate(row)})
    position = {name: (layer[name], order[name]) for name in layer}
    return Layout(position, edges, max((len(r) for r in rows.values()), default=0), depth)


def _barycentre(name: str, neighbours: list[str], order: dict[str, int]) -> float:
    if not neighbours:
        return float(order[name])
    return sum(order[n] for n in neighbours) / len(neighbours)
