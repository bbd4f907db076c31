"""Benchmark: vpuc's u55-256 model against Arm Vela's figures for Ethos-U55-256, per layer.

Compiles the anchors' ONNX QDQ forms (../shared/anchors: resnet8, tinyconv, <m>_int8_qdq.onnx)
for `u55-256` (Vela's default memory mode, Shared_Sram: weights in off-chip flash) and
`u55-256-sram` (Sram_Only), runs every VPU program on the simulator and holds its cycles
against Vela 5.2's for the same model and mode (vela_u55_256_hee_{shared_sram,sram_only}.json).
A layer's vpuc cycles are its span in the simulated timeline (start of its first instruction
to the end of its last: neighbours overlap, so spans add up to more than the total); Vela's
are its per-source-op cycles. Layers match by their TFLite names (tf2onnx keeps them). Ops
vpuc leaves on the CPU are listed as such.

Two vpuc figures per layer and per model. `own`: the like-for-like one, the same partition
lowered with every layer's weight loads (whole weights, a streamed layer's first block) in
the layer itself (prefetch.disabled), so a layer's span holds its own weight loads as Vela's
per-op figure does (an FC's weights read from flash are in Vela's FC row); tables (which
Vela does not count) load as scheduled. It also lowers every conv as a conv
(tile_im2col.CHOOSE = "conv"): no first-layer im2col (a DMA gather of the patches or kernel
rows, or a column window, feeding a 1x1, 1 x kw or kh x 1 conv), which U55 does not do, so
the machine models compare on the same work (a 3-channel 3x3 conv as 9 kernel taps of 3
input channels, as U55 steps it); the im2col's win shows in `schedule`. No layer is
cascaded onto the one before (codegen/cascade.py), so a layer's span is its own. The ratios, class
medians and goals are on it.
`schedule`: the program vpuc emits, where a weight load may run during an earlier layer
(codegen/prefetch.py), its span then that layer's, and a first layer may be an im2col. The
schedule's win (own total / schedule total) is shown apart, not folded into the ratios.
Goals (docs/targets.md): per op class the median of vpuc / Vela within +-20%, per model
total within +-10%, in both memory modes.

    python bench/vs_vela.py [--anchors ../shared/anchors] [--models resnet8,tinyconv]

(--anchors defaults to $VPUC_ANCHORS, else ../shared/anchors beside the checkout.)

Prints per layer, per op class and per model; writes bench/out/vs_vela.json:
{"models": {model: {mode: {"total_ratio", "vpuc_cycles", "vela_cycles", "schedule_cycles",
"schedule_total_ratio", "schedule_win", "bytes", "layers", "classes"}}}}; a layer's
"vpuc_cycles" and "ratio" are its own-loads figures, "schedule_cycles" its span as emitted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from unittest import mock

import numpy as np
from _common import write_json
from rich.console import Console
from rich.table import Table

from vpuc.compiler.driver import CompileOptions, prepare_model
from vpuc.compiler.lower import lower_partitioned
from vpuc.compiler.lower.codegen import cascade, prefetch, tile_im2col
from vpuc.sim import Simulator
from vpuc.targets.isa.formats import Dma

BESIDE_CHECKOUT = Path(__file__).resolve().parents[2] / "shared" / "anchors"
DEFAULT_ANCHORS = Path(os.environ.get("VPUC_ANCHORS", BESIDE_CHECKOUT))
MODES = {"u55-256": "shared_sram", "u55-256-sram": "sram_only"}
CLASSES = {"Conv2D": "conv", "DepthwiseConv2D": "depthwise", "FullyConnected": "fc", "Add": "add",
           "MaxPool": "pool/mean", "AvgPool": "pool/mean", "Mean": "pool/mean",
           "Softmax": "softmax"}  # fmt: skip
GOALS = {"class_median": 0.20, "total": 0.10}
# The loads attributed back to their layer in the like-for-like figures: whole weights. Not
# lookup or softmax tables: Vela counts no table load (its flash reads on resnet8 hold 272
# feature-map bytes, the softmax's scalar constants, and its LUT rows have no cycles).
WEIGHTS = frozenset({"w"})


def key(name: str) -> str:
    """A layer's TFLite name without the suffixes the importer or Vela add."""
    return name.split("_prequant")[0].removesuffix("_intermediate")


def simulate(program, target):
    rng = np.random.default_rng(0)
    image = np.zeros(program.dram_bytes, np.uint8)
    image[: len(program.blob)] = np.frombuffer(program.blob, np.uint8)
    for b in program.inputs:
        x = rng.integers(-128, 128, int(np.prod(b.shape))).astype(np.int8)
        image[b.dram_address : b.dram_address + x.size] = x.view(np.uint8)
    return Simulator(target).run(program.program, image)


def convs_as_convs():
    """Every conv lowered as a conv (tile_im2col.CHOOSE = "conv"): no first-layer im2col,
    which U55 (and so Vela's figure) does not do; its win shows in the schedule."""
    return mock.patch.object(tile_im2col, "CHOOSE", "conv")


def one_layer_at_a_time():
    """No layer cascaded onto the one before (cascade.CASCADE off): a layer's span then holds
    its own work, as Vela's per-op figure does; the cascade's win shows in the schedule."""
    return mock.patch.object(cascade, "CASCADE", False)


def vpuc_figures(onnx_path: Path, target_name: str) -> dict:
    """{"own": run figures with every layer's constant loads at its own start, "schedule": the
    emitted program's}; both lower the same partition."""
    prepared = prepare_model(onnx_path, target_name, CompileOptions(calib_synthetic=8))
    with prefetch.disabled(WEIGHTS), convs_as_convs(), one_layer_at_a_time():
        own = lower_partitioned(prepared.partition.mod, prepared.target, prepared.provenance)
    target = prepared.target
    return {"own": run_figures(own, target), "schedule": run_figures(prepared.programs, target)}


def run_figures(programs, target) -> dict:
    spans, kinds, total, estimate = {}, {}, 0, 0
    region_bytes = {"flash": 0, "dram": 0}
    for program in programs:
        stats = simulate(program, target).stats
        total += stats.total_cycles
        estimate += program.estimate["cycles"]
        kind_of = {layer["id"]: layer["op"] for layer in program.layers}
        for layer in stats.layers:
            spans[key(layer.name)] = layer.end_cycle - layer.start_cycle
            kinds[key(layer.name)] = kind_of.get(layer.layer, "")
        for i in program.program.instructions:
            if isinstance(i, Dma):
                region = "flash" if i.region and target.hardware.weights_in == "flash" else "dram"
                region_bytes[region] += i.row_bytes * i.rows * i.planes
    return {"cycles": total, "estimate": estimate, "spans": spans, "kinds": kinds, "bytes": region_bytes}


def compare(anchors: Path, model: str, target_name: str) -> dict:
    vela = json.loads((anchors / model / f"vela_u55_256_hee_{MODES[target_name]}.json").read_text())
    figures = vpuc_figures(anchors / model / f"{model}_int8_qdq.onnx", target_name)
    ours, schedule = figures["own"], figures["schedule"]
    names = match_layers(vela, ours)
    layers, by_class = [], {}
    for op in vela["per_source_op"]:
        found = names.get(op["name"])
        cycles = ours["spans"].get(found) if found else None
        cls = CLASSES.get(op["original_op"], op["original_op"].lower())
        ratio = round(cycles / op["cycles"], 3) if cycles is not None and op["cycles"] else None
        scheduled = schedule["spans"].get(found) if found else None
        layers.append({"name": op["name"], "op": op["original_op"], "class": cls, "vela_cycles": op["cycles"],
                       "vpuc_cycles": cycles, "schedule_cycles": scheduled, "ratio": ratio})  # fmt: skip
        if ratio is not None:
            by_class.setdefault(cls, []).append(ratio)
    classes = {c: {"median": round(statistics.median(r), 3), "layers": len(r),
                   "within_goal": abs(statistics.median(r) - 1) <= GOALS["class_median"]}
               for c, r in by_class.items()}  # fmt: skip
    vela_bytes = {
        region: figures.get("read", 0) + figures.get("write", 0) for region, figures in vela["bytes"].items()
    }
    total_ratio = round(ours["cycles"] / vela["total_cycles"], 3)
    return {
        "vpuc_cycles": ours["cycles"],
        "vpuc_estimate": ours["estimate"],
        "vela_cycles": vela["total_cycles"],
        "total_ratio": total_ratio,
        "total_within_goal": abs(total_ratio - 1) <= GOALS["total"],
        "schedule_cycles": schedule["cycles"],
        "schedule_estimate": schedule["estimate"],
        "schedule_total_ratio": round(schedule["cycles"] / vela["total_cycles"], 3),
        "schedule_win": round(ours["cycles"] / schedule["cycles"], 3),
        "bytes": {"vpuc": schedule["bytes"], "vela": vela_bytes},
        "layers": layers,
        "classes": classes,
    }


def match_layers(vela: dict, ours: dict) -> dict[str, str]:
    """Vela's source-op name -> vpuc's layer key: by TFLite name, else the first unmatched
    layer whose name it begins (the importer shortens some), else (a Softmax, which tf2onnx
    names by its output) the unmatched softmax layer."""
    exact = {key(op["name"]) for op in vela["per_source_op"]}
    unmatched = [k for k in ours["spans"] if k not in exact]
    names = {}
    for op in vela["per_source_op"]:
        name = key(op["name"])
        found = name if name in ours["spans"] else None
        if found is None:
            found = next((k for k in unmatched if name.startswith(k) or k.startswith(name)), None)
            if found is None and op["original_op"] == "Softmax":
                found = next((k for k in unmatched if ours["kinds"].get(k) == "softmax"), None)
            unmatched = [k for k in unmatched if k != found]
        if found is not None:
            names[op["name"]] = found
    return names


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--anchors", type=Path, default=DEFAULT_ANCHORS)
    parser.add_argument("--models", default="resnet8,tinyconv")
    args = parser.parse_args(argv)
    if not (args.anchors / "vela_ethos_u55_256.json").is_file():
        print(f"{args.anchors}: no anchors here (vela_ethos_u55_256.json missing)", file=sys.stderr)
        return 2
    console = Console(width=140)
    results: dict = {}
    for model in args.models.split(","):
        for target_name, mode in MODES.items():
            figures = compare(args.anchors, model, target_name)
            results.setdefault(model, {})[mode] = {"target": target_name, **figures}
            table = Table(title=f"{model} on {target_name} vs Vela {mode}: total {figures['vpuc_cycles']} / "
                          f"{figures['vela_cycles']} = {figures['total_ratio']}x (own loads)")  # fmt: skip
            for column in ("layer", "op", "vpuc own", "vpuc schedule", "Vela", "own/Vela"):
                table.add_column(column)
            for layer in figures["layers"]:
                own, scheduled = (
                    "cpu" if layer[k] is None else str(layer[k]) for k in ("vpuc_cycles", "schedule_cycles")
                )
                table.add_row(layer["name"][:48], layer["op"], own, scheduled, str(layer["vela_cycles"]),
                              str(layer["ratio"]))  # fmt: skip
            console.print(table)
            classes = ", ".join(f"{c} {v['median']}x ({v['layers']})" for c, v in figures["classes"].items())
            console.print(f"per class median vpuc own / Vela: {classes}")
            console.print(
                f"schedule: {figures['schedule_cycles']} cycles = {figures['schedule_total_ratio']}x Vela; "
                f"its prefetches save {figures['schedule_win']}x (own / schedule)"
            )
            regions = figures["bytes"]
            console.print(f"bytes by region (schedule): vpuc {regions['vpuc']}, Vela {regions['vela']}")
    path = write_json("vs_vela", {"models": results, "goals": GOALS})
    console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
