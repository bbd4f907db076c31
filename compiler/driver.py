"""The driver: the whole compile as one flat, named pipeline.

    frontend   ONNX -> Relax (static shapes, shape arithmetic folded)      compiler/frontend
    passes     fold, fuse, layout: the flat named list PIPELINE             compiler/pipeline
    host       relax.build(llvm) of the host graph                          compiler/build
    package    manifest + host library + report -> Artifact                 runtime/artifact

Quantisation and VPU partitioning slot in between passes and host as those stages land;
each stage's wall time, and each graph pass's, is recorded in the report, with the fusion
audit (report["fusion"]) and the layout decision (report["layout"]).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from vpuc.compiler.build import build_host_library
from vpuc.compiler.errors import CompileError
from vpuc.compiler.frontend import import_model
from vpuc.compiler.passes import PassOptions
from vpuc.compiler.pipeline import OptimizeResult, optimize_imported, pass_options
from vpuc.runtime.artifact import Artifact
from vpuc.targets import Target, TargetError, load_target

VPUC_VERSION = "0.1.0"


@dataclass(frozen=True)
class CompileOptions:
    """What the user chose beyond the model and the target."""

    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    optimize: bool = True  # run the graph passes (compiler/pipeline.py)
    passes: PassOptions | None = None  # their knobs; None: the target's defaults


def compile_model(
    model: str | Path | onnx.ModelProto,
    target: str | Path | Target = "cpu",
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    *,
    optimize: bool = True,
    passes: PassOptions | None = None,
) -> Artifact:
    """Compile an ONNX model (path or ModelProto) for a target; returns the Artifact."""
    target = _as_target(target)
    options = CompileOptions(input_shapes=dict(input_shapes or {}), optimize=optimize, passes=passes)
    timings: dict[str, float] = {}

    start = time.perf_counter()
    imported = import_model(model, options.input_shapes)
    timings["frontend_s"] = time.perf_counter() - start

    if target.has_vpu:
        raise CompileError(
            f"target '{target.name}': VPU partitioning is not available in this build yet; "
            "compile with --target cpu"
        )

    mod, optimized = imported.mod, None
    if options.optimize:
        optimized = optimize_imported(imported, target, options.passes or pass_options(target))
        mod = optimized.mod
        timings.update({f"pass_{name}_s": seconds for name, seconds in optimized.timings.items()})

    start = time.perf_counter()
    host_library = build_host_library(mod, target.host.llvm, imported.name)
    timings["host_build_s"] = time.perf_counter() - start

    report = _report(imported, target, timings, optimized)
    manifest = {
        "vpuc_version": VPUC_VERSION,
        "target": target.to_json(),
        "model": _model_identity(model, imported.onnx_model),
        "inputs": [spec.to_json() for spec in imported.inputs],
        "outputs": [spec.to_json() for spec in imported.outputs],
        "host": {"library": "host.so", "entry": "main"},
        "vpu_programs": [],
    }
    members = {"host.so": host_library, "report.json": json.dumps(report, indent=2).encode()}
    return Artifact(manifest=manifest, members=members)


def _as_target(target: str | Path | Target) -> Target:
    if isinstance(target, Target):
        return target
    try:
        return load_target(target)
    except TargetError as exc:
        raise CompileError(str(exc)) from None


def _model_identity(source, prepared: onnx.ModelProto) -> dict[str, Any]:
    path = None if isinstance(source, onnx.ModelProto) else str(source)
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else None
    return {
        "path": path,
        "sha256": digest,
        "graph": prepared.graph.name,
        "nodes": len(prepared.graph.node),
    }


def _report(
    imported, target: Target, timings: dict[str, float], optimized: OptimizeResult | None
) -> dict[str, Any]:
    ops = [
        {
            "name": node.name,
            "op": node.op_type,
            "device": "cpu",
            "reason": f"target '{target.name}' has no VPU",
        }
        for node in imported.onnx_model.graph.node
    ]
    return {
        "model": imported.name,
        "target": target.name,
        "folded_shape_nodes": [{"name": n, "op": op} for n, op in imported.folded_nodes],
        "ops": ops,
        "totals": {"nodes": len(ops), "cpu_ops": len(ops), "vpu_ops": 0},
        "fusion": {"fused": [], "not_fused": []} if optimized is None else optimized.audit,
        "layout": None if optimized is None else optimized.layout,
        "timings_s": {k: round(v, 4) for k, v in timings.items()},
    }
