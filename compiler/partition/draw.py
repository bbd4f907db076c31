"""The partition drawing (graphviz): one cluster per VPU subgraph, CPU ops outside in
another colour, model inputs and outputs as ellipses, and every edge that crosses between
devices dashed and labelled with the bytes it carries.

`to_dot(report, onnx_model)` needs only the graphviz Python package; rendering SVG needs
graphviz's `dot` program (`apt-get install graphviz`), and its absence is a clear error.
"""

from __future__ import annotations

import shutil
import zlib
from pathlib import Path
from typing import Any

import graphviz
import onnx

from vpuc.compiler.errors import CompileError

VPU_FILL, CPU_FILL, NONE_FILL = "#cfe8ff", "#ffe0b2", "#eeeeee"


def to_dot(report: dict[str, Any], onnx_model: onnx.ModelProto) -> graphviz.Digraph:
    graph = graphviz.Digraph("partition", graph_attr={"rankdir": "TB", "fontname": "Helvetica"})
    graph.attr("node", shape="box", style="filled,rounded", fontname="Helvetica", fontsize="10")
    rows = {row["name"]: row for row in report["ops"]}
    for subgraph in report["subgraphs"]:
        with graph.subgraph(name=f"cluster_vpu{subgraph['id']}") as cluster:
            cluster.attr(label=f"VPU subgraph {subgraph['id']}", style="rounded", color="#1e88e5")
            for name in subgraph["ops"]:
                cluster.node(_id(name), _label(rows[name]), fillcolor=VPU_FILL)
    for row in report["ops"]:
        if row["device"] != "vpu":
            fill = CPU_FILL if row["device"] == "cpu" else NONE_FILL
            graph.node(_id(row["name"]), _label(row), fillcolor=fill)
    _edges(graph, report, onnx_model, rows)
    return graph


def _label(row: dict[str, Any]) -> str:
    return f"{row['name']}\\n{row['op']} ({row['device']})"


def _id(name: str) -> str:
    """A DOT identifier, stable across runs, unique per name."""
    return "n_" + "".join(c if c.isalnum() else "_" for c in name) + f"_{zlib.crc32(name.encode()):08x}"


def _edges(graph: graphviz.Digraph, report, onnx_model: onnx.ModelProto, rows) -> None:
    # A boundary named "x (transposed)" carries tensor x in the VPU's layout.
    crossing = {(b["tensor"].split(" (")[0], b["direction"]): b["bytes"] for b in report["boundaries"]}
    producer = {out: node.name for node in onnx_model.graph.node for out in node.output}
    for vi in onnx_model.graph.input:
        if vi.name in {i for node in onnx_model.graph.node for i in node.input}:
            graph.node(_id("in:" + vi.name), vi.name, shape="ellipse", fillcolor="white")
            producer[vi.name] = "in:" + vi.name
    device = {name: row["device"] for name, row in rows.items()} | {
        p: "cpu" for p in producer.values() if p.startswith("in:")
    }
    for node in onnx_model.graph.node:
        for tensor in dict.fromkeys(i for i in node.input if i in producer):
            _edge(graph, producer[tensor], node.name, tensor, device, crossing)
    for vi in onnx_model.graph.output:
        graph.node(_id("out:" + vi.name), vi.name, shape="ellipse", fillcolor="white")
        device["out:" + vi.name] = "cpu"
        if vi.name in producer:
            _edge(graph, producer[vi.name], "out:" + vi.name, vi.name, device, crossing)


def _edge(graph, source: str, sink: str, tensor: str, device, crossing) -> None:
    a, b = device.get(source, "cpu"), device.get(sink, "cpu")
    direction = {("cpu", "vpu"): "CPU->VPU", ("vpu", "cpu"): "VPU->CPU"}.get((a, b))
    if direction and (tensor, direction) in crossing:
        graph.edge(
            _id(source),
            _id(sink),
            label=f"{crossing[(tensor, direction)]} B",
            style="dashed",
            color="#d32f2f",
        )
    else:
        graph.edge(_id(source), _id(sink))


def write_drawing(report: dict[str, Any], onnx_model: onnx.ModelProto, path: str | Path, fmt: str) -> Path:
    """Write the drawing as DOT source (`fmt="dot"`) or SVG (`fmt="svg"`, needs `dot`)."""
    path = Path(path)
    source = to_dot(report, onnx_model)
    if fmt == "dot":
        _write_atomic(path, source.source.encode())
        return path
    check_can_render_svg(path)
    _write_atomic(path, source.pipe(format="svg"))
    return path


def check_can_render_svg(path: str | Path) -> None:
    """Refuse --svg before any work when graphviz's `dot` is missing."""
    if shutil.which("dot") is None:
        raise CompileError(
            f"{path}: cannot render SVG: graphviz's 'dot' program is not installed "
            "(apt-get install graphviz), or write DOT source with --dot"
        )


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise CompileError(f"{path}: cannot write: {exc.strerror}") from None
