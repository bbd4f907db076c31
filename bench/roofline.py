"""Benchmark: how close the emitted VPU programs come to the roofline.

For every VPU layer of every zoo model and target, compiled as `vpuc compile` does and run
on the simulator: simulated cycles / the roofline bound, and DRAM bytes moved / compulsory
bytes (weights once + the subgraph's inputs + outputs). The bound is a lower bound on this
machine: the busiest of its three units working at its peak on work no program can skip,

    max(MACs / (mac_rows x mac_cols),
        compulsory DRAM bytes / dram_bytes_per_cycle,
        vector work: sum over layers of elements / the target's vector_<kind>_per_cycle)

and on a target whose vector unit multiply-accumulates (vector_mac_per_cycle = v > 0, the
vconv instruction, depthwise only) the MAC term is the two units' together: depthwise MACs
may run on either, so MACs / (mac_rows x mac_cols) becomes
max(other MACs / (rows x cols), (MACs + v x vector work) / (rows x cols + v)) (in T
cycles the array does at most rows x cols x T MACs and the vector unit v x (T - its other
work)).

where a MAC layer's vector work is its outputs at vector_requant_per_cycle (each int32
result is requantised once), an add's, mul's, lookup's or rescale's its outputs at its
kind's rate, a pool's its outputs x window taps at vector_pool_per_cycle, a softmax's its
elements once at each of the clip, lookup and multiply rates (targets/isa/cost.py). A
model's cycles are its programs' total cycles and its bound the sum of its programs'
bounds; a layer's cycles are the busy cycles of its busiest unit (layers overlap in a
pipelined program, so their spans do not add up), its compulsory bytes its own weights
and, where they cross DRAM, its input and output. Goals (issue 21): dense conv nets
(tinyconvnet, resnet_mini) <= 1.25x the bound and <= 1.3x compulsory bytes;
depthwise-heavy mobilenet_mini <= 3x (Vela in Sram_Only: 5.1x on MobileNet-V1 0.25).

    python bench/roofline.py [--targets vpu,vpu-plus,u55-256] [--models a,b]

Prints the per-model table and the worst layers with the reason they are far from the
bound; writes bench/out/roofline.json:
{"models": {name: {"target", "cycles_over_bound", "dram_over_compulsory", "layers": [...]}}}
for the `vpu` target, and the same for every target under "by_target".
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
from _common import write_json
from rich.console import Console
from rich.table import Table

from vpuc.compiler.driver import CompileOptions, prepare_model
from vpuc.examples import zoo
from vpuc.sim import Simulator

GOALS = {"tinyconvnet": (1.25, 1.3), "resnet_mini": (1.25, 1.3), "mobilenet_mini": (3.0, None)}


def simulate(program, target, seed: int = 0):
    rng = np.random.default_rng(seed)
    image = np.zeros(program.dram_bytes, np.uint8)
    image[: len(program.blob)] = np.frombuffer(program.blob, np.uint8)
    for b in program.inputs:
        x = rng.integers(-128, 128, int(np.prod(b.shape))).astype(np.int8)
        image[b.dram_address : b.dram_address + x.size] = x.view(np.uint8)
    return Simulator(target).run(program.program, image)


def layer_rows(program, stats, hw) -> list[dict]:
    """Per layer: simulated span, bound, DRAM bytes, and why it is far from the bound."""
    by_id = {layer.layer: layer for layer in stats.layers}
    rows = []
    for layer in program.layers:
        measured = by_id.get(layer["id"])
        if measured is None:  # a view (reshape, concat): no instruction
            continue
        weights = layer.get("weight_bytes", 0)
        compulsory = weights + layer["boundary_bytes"]
        vector = layer["vector_cycles"]
        depthwise = layer["macs"] if is_depthwise(layer) else 0
        macs = mac_bound(layer["macs"], depthwise, vector, hw)
        bound = max(macs, compulsory / hw.dram_bytes_per_cycle, vector)
        busy = max(measured.busy_cycles.values())
        moved = measured.dram_read_bytes + measured.dram_written_bytes
        rows.append(
            {
                "name": layer["name"],
                "op": layer["op"],
                "span_cycles": measured.end_cycle - measured.start_cycle,
                "cycles": busy,
                "bound": round(max(bound, 1), 1),
                "cycles_over_bound": round(busy / max(bound, 1), 3),
                "macs": layer["macs"],
                "dram_bytes": moved,
                "compulsory_bytes": compulsory,
                "why": reason(layer, measured, hw),
            }
        )
    return rows


def is_depthwise(layer: dict) -> bool:
    """One input and one output channel per group: what vconv computes."""
    shape = layer.get("shape") or {}
    groups = shape.get("groups", 1)
    return groups > 1 and shape.get("cin") == shape.get("cout") == groups


def mac_bound(macs: int, depthwise_macs: int, vector_cycles: float, hw) -> float:
    """Cycles the MAC work needs at least: on the array alone, or, where the vector unit
    multiply-accumulates too, the depthwise part on either unit (the vector unit's time
    less its other work)."""
    alone = macs / hw.macs_per_cycle
    v = hw.vector_mac_per_cycle
    if not v or not depthwise_macs:
        return alone
    together = (macs + v * vector_cycles) / (hw.macs_per_cycle + v)
    return max((macs - depthwise_macs) / hw.macs_per_cycle, together)


def reason(layer: dict, measured, hw) -> str:
    """The main cause of a layer's distance from its bound, from its shape and tiling."""
    shape = layer.get("shape") or {}
    busy = measured.busy_cycles
    if layer["macs"] == 0:
        return f"vector unit ({busy.get('VEC', 0)} busy cycles; no MACs to bound it)"
    cin, cout, groups = shape.get("cin", 0), shape.get("cout", 0), shape.get("groups", 1)
    if groups > 1 and cin // groups == 1:
        used = min(hw.mac_rows, hw.mac_cols)
        vector = f" + the vector unit's {hw.vector_mac_per_cycle:g}" if hw.vector_mac_per_cycle else ""
        return f"depthwise: one array row per column ({used} of {hw.macs_per_cycle} MACs){vector}"
    notes = []
    cin_g = cin // max(groups, 1)
    lowering = (layer.get("tiling") or {}).get("lowering")
    if lowering:  # a gather fills the rows (compiler/lower/codegen/tile_im2col.py)
        notes.append(f"lowered as {lowering}")
    elif cin_g and cin_g % hw.mac_rows:
        used = cin_g % hw.mac_rows if cin_g < hw.mac_rows else hw.mac_rows
        notes.append(
            f"input channels {cin_g} fill {min(used, cin_g)} of {hw.mac_rows} rows in the last block"
        )
    if cout and (cout // max(groups, 1)) % hw.mac_cols:
        notes.append(f"output channels {cout} not a multiple of {hw.mac_cols} columns")
    pixels = shape.get("pixels_per_tile", 0)
    if pixels and pixels < hw.mac_weight_load_cycles:
        notes.append(f"{pixels} pixels per tile < weight load of {hw.mac_weight_load_cycles} cycles")
    if busy.get("DMA", 0) > busy.get("MAC", 0):
        notes.append(f"DMA-bound ({busy.get('DMA', 0)} DMA vs {busy.get('MAC', 0)} MAC cycles)")
    return "; ".join(notes) or "pipeline fill/drain and layer hand-over"


def model_figures(name: str, target_name: str, workdir: Path) -> dict:
    path = workdir / f"{name}.onnx"
    zoo.write_zoo(workdir, [name])
    prepared = prepare_model(path, target_name, CompileOptions(calib_synthetic=8))
    target, hw = prepared.target, prepared.target.hardware
    cycles = bound_sum = moved = compulsory = 0
    layers = []
    for program in prepared.programs:
        annotate_layers(program, prepared)
        stats = simulate(program, target).stats
        macs = sum(layer["macs"] for layer in program.layers)
        vector = sum(layer["vector_cycles"] for layer in program.layers)
        depthwise = sum(layer["macs"] for layer in program.layers if is_depthwise(layer))
        boundary = sum(int(np.prod(b.shape)) for b in program.inputs + program.outputs)
        need = program.estimate["weight_bytes"] + boundary
        cycles += stats.total_cycles
        bound_sum += max(mac_bound(macs, depthwise, vector, hw), need / hw.dram_bytes_per_cycle, vector)
        moved += stats.dram_read_bytes + stats.dram_written_bytes
        compulsory += need
        layers += [{"subgraph": program.index, **row} for row in layer_rows(program, stats, hw)]
    return {
        "target": target_name,
        "cycles": cycles,
        "bound": round(bound_sum, 1),
        "cycles_over_bound": round(cycles / bound_sum, 3) if bound_sum else None,
        "dram_bytes": moved,
        "compulsory_bytes": compulsory,
        "dram_over_compulsory": round(moved / compulsory, 3) if compulsory else None,
        "layers": layers,
    }


def annotate_layers(program, prepared) -> None:
    """Each layer's weight bytes, boundary bytes and MAC shape, from the lowering's plans."""
    from vpuc.compiler.lower import vpu_functions
    from vpuc.compiler.lower.ops import MAC_OPS
    from vpuc.compiler.lower.reader.extract import extract_subgraph

    func = vpu_functions(prepared.partition.mod)[program.index][1]
    subgraph = extract_subgraph(func, program.symbol, prepared.quantized.provenance, program.index)
    boundary = set(subgraph.inputs) | set(subgraph.outputs)
    ops = {op.name: op for op in subgraph.ops}
    for layer in program.layers:
        op = ops.get(layer["name"])
        tensors = (*op.inputs, op.output) if op else ()
        layer["boundary_bytes"] = sum(subgraph.tensors[t].nbytes for t in tensors if t in boundary)
        weights = getattr(op, "weights", None)
        layer["weight_bytes"] = int(weights.size + 8 * weights.shape[0]) if weights is not None else 0
        layer["vector_cycles"] = vector_work(op, subgraph, prepared.target.hardware) if op else 0.0
        if isinstance(op, MAC_OPS) and weights is not None:
            x = subgraph.tensors[op.inputs[0]].nhwc
            y = subgraph.tensors[op.output].nhwc
            rows = layer["tiling"].get("rows_per_tile", y[1])
            layer["shape"] = {"cin": x[3], "cout": y[3], "groups": getattr(op, "groups", 1),
                              "pixels_per_tile": rows * y[2]}  # fmt: skip


def vector_work(op, subgraph, hw) -> float:
    """Cycles the vector unit needs at least for a layer: its elements at its kind's rate."""
    from vpuc.compiler.lower.ops import MAC_OPS

    elements = subgraph.tensors[op.output].nbytes  # int8: one byte an element
    if isinstance(op, MAC_OPS):
        return elements / hw.vector_requant_per_cycle
    if op.kind == "pool":
        return elements * math.prod(op.kernel) / hw.vector_pool_per_cycle
    if op.kind == "softmax":
        rates = (hw.vector_clip_per_cycle, hw.vector_lut_per_cycle, hw.vector_mul_per_cycle)
        return sum(elements / rate for rate in rates)
    rate = {
        "add": hw.vector_add_per_cycle,
        "mul": hw.vector_mul_per_cycle,
        "lut": hw.vector_lut_per_cycle,
        "rescale": hw.vector_requant_per_cycle,
    }.get(op.kind)
    return elements / rate if rate else 0.0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="vpu,vpu-plus,u55-256")
    parser.add_argument("--models", default=",".join(m for m in zoo.MODELS))
    args = parser.parse_args(argv)
    console = Console(width=200 if not sys.stdout.isatty() else None)
    by_target: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for target in args.targets.split(","):
            for name in args.models.split(","):
                by_target.setdefault(target, {})[name] = model_figures(name, target, Path(tmp))
    table = Table(
        title="Roofline: simulated cycles and DRAM bytes against their bounds", title_justify="left"
    )
    for column in (
        "model",
        "target",
        "cycles",
        "bound",
        "cycles/bound",
        "goal",
        "DRAM B",
        "compulsory B",
        "DRAM/compulsory",
        "goal",
    ):
        table.add_column(column, overflow="fold")
    for target, models in by_target.items():
        for name, m in models.items():
            goal = GOALS.get(name, (None, None))
            table.add_row(name, target, str(m["cycles"]), f"{m['bound']:.0f}", f"{m['cycles_over_bound']}",
                          "-" if goal[0] is None else f"<= {goal[0]}", str(m["dram_bytes"]),
                          str(m["compulsory_bytes"]), f"{m['dram_over_compulsory']}",
                          "-" if goal[1] is None else f"<= {goal[1]}")  # fmt: skip
    console.print(table)
    worst = Table(title="Worst layers (vpu)", title_justify="left")
    for column in ("model", "layer", "op", "cycles", "bound", "cycles/bound", "why"):
        worst.add_column(column, overflow="fold")
    rows = [(name, layer) for name, m in by_target.get("vpu", {}).items() for layer in m["layers"]]
    for name, layer in sorted(rows, key=lambda r: -r[1]["cycles_over_bound"])[:10]:
        worst.add_row(name, layer["name"], layer["op"], str(layer["cycles"]), f"{layer['bound']:.0f}",
                      f"{layer['cycles_over_bound']}", layer["why"])  # fmt: skip
    console.print(worst)
    figures = {"models": by_target.get("vpu", {}), "by_target": by_target}
    console.print(f"wrote {write_json('roofline', figures)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
