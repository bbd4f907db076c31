"""The network summary `vpuc compile` ends with (as Vela ends with one), and the per-layer
CSV of `--per-layer-csv` (compile: the estimate; `vpuc run`: the simulation).

The summary reads the compile report (partition, VPU estimate, timings) and counts the
model's MACs itself from the ONNX graph (shape inference), so the MAC share on the VPU is
not the partitioner's own arithmetic: MACs of Conv, ConvTranspose, Gemm and MatMul nodes
(output elements x input channels per group x kernel size; output elements x the reduced
dimension) placed on the VPU over those of all such nodes. Every figure: docs/metrics.md.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import onnx

MAC_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
CSV_COLUMNS = ("subgraph", "layer", "op", "nodes", "cycles", "overlap_cycles", "macs")


def onnx_macs(model: onnx.ModelProto) -> dict[str, int]:
    """MACs of each MAC node by node name (nodes without a known output shape: left out)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {}
    for value in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in value.type.tensor_type.shape.dim]
        shapes[value.name] = dims
    for init in inferred.graph.initializer:
        shapes[init.name] = list(init.dims)
    found = {}
    for node in inferred.graph.node:
        if node.op_type not in MAC_OPS:
            continue
        out, weight = shapes.get(node.output[0]), shapes.get(node.input[1])
        if not out or not weight or 0 in out or 0 in weight:
            continue
        if node.op_type == "Conv":
            found[node.name] = math.prod(out) * math.prod(weight[1:])
        elif node.op_type == "ConvTranspose":
            found[node.name] = math.prod(shapes.get(node.input[0]) or [0]) * math.prod(weight[1:])
        elif node.op_type == "Gemm":
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            found[node.name] = math.prod(out) * (weight[1] if trans_b else weight[0])
        else:  # MatMul: a 1-D second input is a vector of k (numpy's matmul; a fuzzer finding)
            found[node.name] = math.prod(out) * (weight[-2] if len(weight) >= 2 else weight[0])
    return found


def mac_share(partition: dict[str, Any], model: onnx.ModelProto) -> dict[str, Any]:
    """{total, vpu, vpu_share}: the model's MACs (onnx_macs) and those of nodes on the VPU."""
    devices = {op["name"]: op.get("device") for op in partition.get("ops", [])}
    macs = onnx_macs(model)
    total = sum(macs.values())
    vpu = sum(m for name, m in macs.items() if devices.get(name) == "vpu")
    return {"total": total, "vpu": vpu, "vpu_share": vpu / total if total else None}


def network_summary(report: dict[str, Any], target, model: onnx.ModelProto) -> dict[str, Any]:
    partition = report.get("partition") or {"ops": report.get("ops", [])}
    share = mac_share(partition, model)
    total_macs, vpu_macs = share["total"], share["vpu"]
    vpu = (report.get("vpu") or {}).get("total") or {}
    totals = partition.get("totals") or report.get("totals") or {}
    clock = target.hardware.clock_mhz if target.has_vpu else None
    cycles = vpu.get("cycles", 0)
    timings = report.get("timings_s") or {}
    return {
        "target": target.name,
        "clock_mhz": clock,
        "vpu_ops": totals.get("vpu_ops", 0),
        "host_ops": totals.get("cpu_ops", 0),
        "vpu_subgraphs": totals.get("subgraphs", 0),
        "macs": total_macs,
        "vpu_macs": vpu_macs,
        "vpu_mac_share": vpu_macs / total_macs if total_macs else None,
        "sram_peak_bytes": vpu.get("sram_peak_bytes", 0),
        "dram_read_bytes": vpu.get("dram_read_bytes", 0),
        "dram_write_bytes": vpu.get("dram_write_bytes", 0),
        "weight_bytes": vpu.get("weight_bytes", 0),
        "link_bytes": totals.get("bytes", 0),
        "vpu_cycles": cycles,
        "vpu_time_us": cycles / clock if clock else None,
        "vpu_inferences_per_s": clock * 1e6 / cycles if clock and cycles else None,
        "mac_utilization": vpu.get("mac_utilization"),
        "compile_s": round(sum(timings.values()), 3),  # the profiled steps (timings_s)
    }


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The summary for people, one figure per line as Vela prints it."""
    share = summary["vpu_mac_share"]

    def row(label: str, value: str) -> str:
        return f"  {label:<34} {value}"

    lines = [
        f"Network summary ({summary['target']}"
        + (f", {summary['clock_mhz']} MHz)" if summary["clock_mhz"] else ")")
    ]
    lines.append(row("ops on the VPU / on the host", f"{summary['vpu_ops']} / {summary['host_ops']}"))
    lines.append(row("VPU subgraphs", str(summary["vpu_subgraphs"])))
    lines.append(row("MACs on the VPU", f"{summary['vpu_macs']:,} of {summary['macs']:,}"
                     + (f" ({share:.1%})" if share is not None else "")))  # fmt: skip
    lines.append(row("SRAM peak", f"{summary['sram_peak_bytes']:,} B"))
    lines.append(
        row("DRAM read / written", f"{summary['dram_read_bytes']:,} / {summary['dram_write_bytes']:,} B")
    )
    lines.append(row("weights (DRAM)", f"{summary['weight_bytes']:,} B"))
    lines.append(row("host <-> VPU link per inference", f"{summary['link_bytes']:,} B"))
    if summary["vpu_time_us"] is not None:
        lines.append(
            row("VPU cycles (estimate)", f"{summary['vpu_cycles']:,} ({summary['vpu_time_us']:.2f} us)")
        )
        if summary["vpu_inferences_per_s"]:
            lines.append(
                row("inferences/s, VPU only", f"{summary['vpu_inferences_per_s']:,.0f} (no link, no host)")
            )
        if summary["mac_utilization"] is not None:
            lines.append(row("MAC utilisation (of all cycles)", f"{summary['mac_utilization']:.1%}"))
    lines.append(row("compile time", f"{summary['compile_s']:.2f} s"))
    return lines


def write_layer_csv(path: str | Path, layers: list[dict[str, Any]], cycles_key: str) -> None:
    """One row per VPU layer; `cycles_key` names the layer's cycles in `layers`."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(CSV_COLUMNS)
        for layer in layers:
            writer.writerow([layer.get("subgraph"), layer.get("name"), layer.get("op"),
                             ";".join(layer.get("nodes") or []), layer.get(cycles_key, 0),
                             layer.get("overlap_cycles", 0), layer.get("macs", 0)])  # fmt: skip
    partial.replace(path)
