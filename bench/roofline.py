"""Benchmark: how close the emitted VPU programs come to the roofline.

For every VPU layer of every zoo model and target, compiled as `vpuc compile` does and run
on the simulator: simulated cycles / the roofline bound, and DRAM bytes moved / compulsory
bytes (weights once + the subgraph's inputs + outputs). The bound is a lower bound on this
machine (targets/roofline.py defines it, docs/metrics.md; a layer's is report.json's
`vpu.layers[].roofline`, the figure the HTML report shows): the busiest of its three units
working at its peak on work no program can skip, its MACs, its weights once and the tensors
that cross DRAM, its vector work at the target's per-kind rates. A model's cycles are its
programs' total cycles and its bound the sum of its programs' bounds; a layer's cycles are
the busy cycles of its busiest unit (layers overlap in a pipelined program, so their spans
do not add up). Goals (issue 21): dense conv nets
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
    """Per layer: simulated span, bound (the report's, targets/roofline.py), DRAM bytes, and
    why it is far from the bound."""
    by_id = {layer.layer: layer for layer in stats.layers}
    rows = []
    for layer in program.layers:
        measured = by_id.get(layer["id"])
        if measured is None:  # a view (reshape, concat): no instruction
            continue
        bound = layer["roofline"]["bound_cycles"]
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
                "compulsory_bytes": layer["roofline"]["compulsory_bytes"],
                "why": reason(layer, measured, hw),
            }
        )
    return rows


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
    packed = "output columns a pixel" in (lowering or "")  # its P x cout outputs fill the columns
    if cout and (cout // max(groups, 1)) % hw.mac_cols and not packed:
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
        bound = program.estimate["roofline"]  # the compiler's (compiler/lower/codegen/emit.py)
        cycles += stats.total_cycles
        bound_sum += bound["bound_cycles"]
        moved += stats.dram_read_bytes + stats.dram_written_bytes
        compulsory += bound["compulsory_bytes"]
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
    """Each MAC layer's shape (for the reason it is far from the bound), from the subgraph."""
    from vpuc.compiler.lower import vpu_functions
    from vpuc.compiler.lower.ops import MAC_OPS
    from vpuc.compiler.lower.reader.extract import extract_subgraph

    func = vpu_functions(prepared.partition.mod)[program.index][1]
    subgraph = extract_subgraph(func, program.symbol, prepared.quantized.provenance, program.index)
    ops = {op.name: op for op in subgraph.ops}
    for layer in program.layers:
        op = ops.get(layer["name"])
        if isinstance(op, MAC_OPS) and getattr(op, "weights", None) is not None:
            x = subgraph.tensors[op.inputs[0]].nhwc
            y = subgraph.tensors[op.output].nhwc
            rows = layer["tiling"].get("rows_per_tile", y[1])
            layer["shape"] = {"cin": x[3], "cout": y[3], "groups": getattr(op, "groups", 1),
                              "pixels_per_tile": rows * y[2]}  # fmt: skip


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
