"""The driver: the whole compile as one flat, named pipeline.

    frontend   ONNX -> Relax (static shapes, shape arithmetic folded)      compiler/frontend
    passes     fold, fuse, layout: the flat named list PIPELINE             compiler/pipeline
    quantize   VPU targets: calibrate and insert Q/DQ around the VPU's ops  compiler/quantize
               (a QDQ model keeps its parameters; its Q/DQ are cleaned up)
    partition  VPU targets: which op runs where, subgraphs, boundaries      compiler/partition
    host       relax.build(llvm) of the host graph                          compiler/build
    package    manifest + host library + report -> Artifact                 runtime/artifact

Each stage's wall time, and each graph pass's, is recorded in the report, with the fusion
audit (report["fusion"]), the layout decision (report["layout"]) and, for VPU targets,
the partition report (report["partition"]).

VPU lowering (composites -> instruction streams) is not built yet: for a VPU target the
artifact runs the whole graph on the host, and says so in report["execution"].
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import onnx
import tvm

from vpuc.compiler.build import build_host_library
from vpuc.compiler.frontend import ImportedModel, import_model
from vpuc.compiler.partition import DEFAULT_MIN_SUBGRAPH_OPS, PartitionResult, partition_for_vpu
from vpuc.compiler.passes import PassOptions
from vpuc.compiler.pipeline import OptimizeResult, optimize_imported, pass_options
from vpuc.compiler.quantize import DEFAULT_METHOD, DEFAULT_PERCENTILE, QuantizeResult, quantize_for_compile
from vpuc.runtime.artifact import Artifact
from vpuc.targets import Target, resolve_target

VPUC_VERSION = "0.1.0"
EMULATION_NOTE = (
    "VPU lowering is not built yet: this artifact runs every op on the host CPU, the VPU's "
    "ops in int8 QDQ semantics; the partition report shows where each op would run"
)


@dataclass(frozen=True)
class CompileOptions:
    """What the user chose beyond the model and the target."""

    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    optimize: bool = True  # run the graph passes (compiler/pipeline.py)
    passes: PassOptions | None = None  # their knobs; None: the target's defaults
    min_subgraph_ops: int = DEFAULT_MIN_SUBGRAPH_OPS  # smaller VPU subgraphs stay on the CPU
    profitability: bool = True  # judge each VPU subgraph with the cost model
    calib: str | None = None  # .npz of calibration samples per input name
    calib_synthetic: int | None = None  # or N seeded synthetic samples (the default: 32)
    calib_method: str = DEFAULT_METHOD  # minmax, percentile or entropy
    percentile: float = DEFAULT_PERCENTILE
    quantize: bool = True  # VPU targets: quantise (False: partition the float model as is)


@dataclass
class Prepared:
    """The model after every stage before the host build."""

    imported: ImportedModel
    target: Target
    mod: tvm.IRModule  # what the host builds
    optimized: OptimizeResult | None = None
    quantized: QuantizeResult | None = None
    partition: PartitionResult | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def warnings(self) -> list[str]:
        return list(self.quantized.warnings) if self.quantized else []


def prepare_model(
    model: str | Path | onnx.ModelProto, target: str | Path | Target, options: CompileOptions
) -> Prepared:
    """frontend -> passes -> partition (VPU targets): everything but the host build."""
    target = resolve_target(target)
    start = time.perf_counter()
    imported = import_model(model, options.input_shapes)
    prepared = Prepared(imported, target, imported.mod, timings={"frontend_s": time.perf_counter() - start})
    provenance = {var: [node] for var, node in imported.var_to_node.items()}
    if options.optimize:
        prepared.optimized = optimize_imported(imported, target, options.passes or pass_options(target))
        prepared.mod, provenance = prepared.optimized.mod, prepared.optimized.provenance
        prepared.timings.update({f"pass_{k}_s": v for k, v in prepared.optimized.timings.items()})
    if target.has_vpu and options.quantize:
        start = time.perf_counter()
        prepared.quantized = quantize_for_compile(
            prepared.mod, target, imported.onnx_model, provenance, imported.inputs,
            calib_path=options.calib, calib_synthetic=options.calib_synthetic,
            method=options.calib_method, percentile=options.percentile,
            profitability=options.profitability, min_subgraph_ops=options.min_subgraph_ops,
        )  # fmt: skip
        prepared.mod, provenance = prepared.quantized.mod, prepared.quantized.provenance
        prepared.timings["quantize_s"] = time.perf_counter() - start
    if target.has_vpu:
        start = time.perf_counter()
        prepared.partition = partition_for_vpu(
            prepared.mod, target, imported.onnx_model, provenance,
            min_subgraph_ops=options.min_subgraph_ops, profitability=options.profitability,
        )  # fmt: skip
        prepared.timings["partition_s"] = time.perf_counter() - start
    return prepared


def compile_model(
    model: str | Path | onnx.ModelProto,
    target: str | Path | Target = "cpu",
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    options: CompileOptions | None = None,
    **choices,
) -> Artifact:
    """Compile an ONNX model (path or ModelProto) for a target; returns the Artifact.
    `choices` are CompileOptions fields (calib="x.npz", profitability=False, ...)."""
    options = options or CompileOptions(**choices)
    if input_shapes:
        options = replace(options, input_shapes=dict(input_shapes))
    return build_artifact(model, prepare_model(model, target, options))


def build_artifact(model: str | Path | onnx.ModelProto, prepared: Prepared) -> Artifact:
    """The host build and the packaging of a prepared model."""
    imported = prepared.imported
    start = time.perf_counter()
    host_library = build_host_library(prepared.mod, prepared.target.host.llvm, imported.name)
    prepared.timings["host_build_s"] = time.perf_counter() - start
    report = _report(prepared)
    manifest = {
        "vpuc_version": VPUC_VERSION,
        "target": prepared.target.to_json(),
        "model": _model_identity(model, imported.onnx_model),
        "inputs": [spec.to_json() for spec in imported.inputs],
        "outputs": [spec.to_json() for spec in imported.outputs],
        "host": {"library": "host.so", "entry": "main"},
        "vpu_programs": [],
    }
    if prepared.quantized is not None:
        manifest["numerics"] = "int8"  # outputs carry int8 quantisation error (vpuc run --check)
    members = {"host.so": host_library, "report.json": json.dumps(report, indent=2).encode()}
    return Artifact(manifest=manifest, members=members)


def _model_identity(source, prepared: onnx.ModelProto) -> dict[str, Any]:
    path = None if isinstance(source, onnx.ModelProto) else str(source)
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else None
    return {
        "path": path,
        "sha256": digest,
        "graph": prepared.graph.name,
        "nodes": len(prepared.graph.node),
    }


def _report(prepared: Prepared) -> dict[str, Any]:
    imported, target, optimized = prepared.imported, prepared.target, prepared.optimized
    partition = prepared.partition.report if prepared.partition else None
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
        "layout": None if optimized is None else optimized.layout,
        "partition": partition,
        "accuracy": prepared.quantized.accuracy if prepared.quantized else None,
        "quantization": prepared.quantized.to_json() if prepared.quantized else None,
        "warnings": prepared.warnings,
        "execution": EMULATION_NOTE if partition is not None else None,
        "timings_s": {k: round(v, 4) for k, v in prepared.timings.items()},
    }
