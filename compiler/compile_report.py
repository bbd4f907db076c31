"""The compile's report (report.json) and the manifest's per-program records: what
`vpuc compile` writes about a prepared model (compiler/driver.py packages it)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx

from vpuc.compiler.lower import VpuProgram, reference_layer_name
from vpuc.compiler.summary import mac_share

if TYPE_CHECKING:  # the driver imports this module
    from vpuc.compiler.driver import Prepared

FLOAT_PARTITION_NOTE = (
    "not quantised: the partition shows where each op would run once quantised; every op runs on the host CPU"
)


def program_entry(program: VpuProgram, members: dict[str, bytes], model: onnx.ModelProto) -> dict[str, Any]:
    """The manifest's record of one VPU program; its binary and blob become members. Each
    output also carries `onnx_tensor`, the ONNX tensor it holds: the output of the node
    of the layer writing it that no other node of the layer reads (its QuantizeLinear when
    it has one)."""
    stem = f"vpu/sg{program.index}"
    members[f"{stem}.bin"] = program.program.to_bytes()
    members[f"{stem}.weights"] = program.blob
    return {
        "subgraph": program.index,
        "symbol": program.symbol,
        "program": f"{stem}.bin",
        "weights": f"{stem}.weights",
        "instructions": len(program.program),
        "dram_bytes": program.dram_bytes,
        "inputs": [b.to_json() for b in program.inputs],
        "outputs": [
            {**b.to_json(), "onnx_tensor": _onnx_tensor(program, b.name, model)} for b in program.outputs
        ],
        "layers": [{k: layer[k] for k in ("id", "name", "op", "nodes")} for layer in program.layers],
        "dram_map": program.dram_map,
        "checkpoints": _checkpoints(program, model),
    }


def _checkpoints(program: VpuProgram, model: onnx.ModelProto) -> dict[str, Any]:
    """Where `vpuc run --check` reads each layer's operands and result (emit.py), each judged
    layer with its QDQ reference function and the ONNX tensor it writes."""
    layers = []
    for layer in program.checkpoints["layers"]:
        entry = {k: layer[k] for k in ("id", "name", "args", "output")}
        if layer["judged"]:
            entry["reference"] = reference_layer_name(program.index, layer["id"])
            entry["onnx_tensor"] = _onnx_tensor(program, layer["output"], model)
        layers.append(entry)
    return {"tensors": program.checkpoints["tensors"], "layers": layers}


def _onnx_tensor(program: VpuProgram, name: str, model: onnx.ModelProto) -> str | None:
    layer = next((layer for layer in program.layers if layer.get("output") == name), None)
    by_name = {node.name: node for node in model.graph.node}
    group = [by_name[n] for n in (layer or {}).get("nodes", []) if n in by_name and by_name[n].output]
    read = {tensor for node in group for tensor in node.input}
    sinks = [node for node in group if node.output[0] not in read]  # what the group hands on
    quantized = [node for node in sinks if node.op_type == "QuantizeLinear"]
    return (quantized or sinks or [None])[-1].output[0] if sinks else None


def model_identity(source, prepared: onnx.ModelProto) -> dict[str, Any]:
    path = None if isinstance(source, onnx.ModelProto) else str(source)
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else None
    return {
        "path": path,
        "sha256": digest,
        "graph": prepared.graph.name,
        "nodes": len(prepared.graph.node),
    }


def compile_report(prepared: Prepared) -> dict[str, Any]:
    imported, target, optimized = prepared.imported, prepared.target, prepared.optimized
    partition = prepared.partition.report if prepared.partition else None
    if partition is not None:  # the same figures `vpuc partition` prints
        partition = {**partition, "macs": mac_share(partition, imported.onnx_model)}
    if partition is not None:
        ops = partition["ops"]
    else:
        reason = f"target '{target.name}' has no VPU"
        ops = [
            {"name": n.name, "op": n.op_type, "device": "cpu", "subgraph": None, "reason": reason}
            for n in imported.onnx_model.graph.node
        ]
    return {
        "model": imported.name,
        "target": target.name,
        "folded_shape_nodes": [{"name": n, "op": op} for n, op in imported.folded_nodes],
        "ops": ops,
        "totals": {
            "nodes": len(ops),
            "cpu_ops": sum(op["device"] == "cpu" for op in ops),
            "vpu_ops": sum(op["device"] == "vpu" for op in ops),
        },
        "fusion": {"fused": [], "not_fused": []} if optimized is None else optimized.audit,
        "passes": {"opt_level": 0, "ran": []} if optimized is None else optimized.selection.to_json(),
        "layout": None if optimized is None else optimized.layout,
        "partition": partition,
        "accuracy": prepared.quantized.accuracy if prepared.quantized else None,
        "quantization": prepared.quantized.to_json() if prepared.quantized else None,
        "warnings": prepared.warnings,
        "execution": _execution_note(prepared),
        "vpu": _vpu_report(prepared) if prepared.programs else None,
        "lowering_rounds": prepared.lowering_rounds,
        "timings_s": {k: round(v, 4) for k, v in prepared.timings.items()},
    }


def _execution_note(prepared: Prepared) -> str | None:
    if prepared.partition is None:
        return None
    if prepared.quantized is None:
        return FLOAT_PARTITION_NOTE
    count = len(prepared.programs)
    return f"{count} VPU subgraph(s) run as VPU programs (simulated by `vpuc run`); the rest on the host CPU"


def _vpu_report(prepared: Prepared) -> dict[str, Any]:
    """The code generator's compile-time estimate (docs/metrics.md), per subgraph and layer."""
    subgraphs = [
        {"id": p.index, "symbol": p.symbol, "instructions": len(p.program), **p.estimate}
        for p in prepared.programs
    ]
    layers = [{"subgraph": p.index, **layer} for p in prepared.programs for layer in p.layers]
    total = {
        "cycles": sum(s["cycles"] for s in subgraphs),
        "macs": sum(s["macs"] for s in subgraphs),
        "dram_read_bytes": sum(s["dram_read_bytes"] for s in subgraphs),
        "dram_write_bytes": sum(s["dram_write_bytes"] for s in subgraphs),
        "weight_bytes": sum(s["weight_bytes"] for s in subgraphs),
        "sram_peak_bytes": max((s["sram_peak_bytes"] for s in subgraphs), default=0),
    }
    hw = prepared.target.hardware
    total["mac_utilization"] = total["macs"] / max(1, total["cycles"] * hw.mac_rows * hw.mac_cols)
    return {"total": total, "subgraphs": subgraphs, "layers": layers}
