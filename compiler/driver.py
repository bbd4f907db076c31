"""The driver: the whole compile as one flat, named pipeline.

    frontend   ONNX -> Relax (static shapes, shape arithmetic folded)      compiler/frontend
    passes     fold, fuse, layout: the flat named list PIPELINE             compiler/pipeline
    decompose  VPU targets: ops the VPU lacks as ops it has (exact or near)  compiler/partition
    quantize   VPU targets: calibrate and insert Q/DQ around the VPU's ops  compiler/quantize
               (a QDQ model keeps its parameters; its Q/DQ are cleaned up)
    partition  VPU targets: which op runs where, subgraphs, boundaries      compiler/partition
    lower      VPU subgraphs -> int8 instruction streams + weight blobs     compiler/lower
               (the partitioner asked the code generator first, so the layers
               it refuses are already on the CPU, each with its reason)
    host       RunCodegen (VPU calls become external calls), then kernels
               scheduled (tuning records or defaults), relax.build          compiler/host
               (none when every op runs on the VPU: the calls are listed)
    package    manifest + host library + VPU programs + report -> Artifact  runtime/artifact

Each stage's wall time, and each graph pass's, is recorded in the report, with the fusion
audit (report["fusion"]), the layout decision (report["layout"]) and, for VPU targets,
the partition report (report["partition"]) and the code generator's estimate
(report["vpu"]: cycles, MAC utilisation, DRAM bytes, SRAM peak per subgraph and layer).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import onnx
import tvm

from vpuc.compiler.compile_report import compile_report, model_identity, program_entry
from vpuc.compiler.errors import CompileError
from vpuc.compiler.frontend import ImportedModel, import_model
from vpuc.compiler.host.build import build_host_library
from vpuc.compiler.host.calls import vpu_call_plan
from vpuc.compiler.lower import (
    REFERENCE_ENTRY,
    REFERENCE_PREFIX,
    LowerError,
    VpuProgram,
    join_host,
    lower_function,
    lower_partitioned,
    reference_module,
    vpu_functions,
)
from vpuc.compiler.lower.reader.edges import channels_first_inputs
from vpuc.compiler.lower.reader.extract import extract_subgraph
from vpuc.compiler.lower.reader.names import param_names
from vpuc.compiler.partition import DEFAULT_MIN_SUBGRAPH_OPS, PartitionResult, VpuAnswers, partition_for_vpu
from vpuc.compiler.partition.decompose import decompose_for_vpu
from vpuc.compiler.passes import PassOptions
from vpuc.compiler.pipeline import (
    DEFAULT_OPT_LEVEL,
    OptimizeResult,
    PassSelection,
    optimize_imported,
    pass_options,
)
from vpuc.compiler.quantize import (
    DEFAULT_METHOD,
    DEFAULT_PERCENTILE,
    QuantizeResult,
    QuantOptions,
    quantize_for_compile,
)
from vpuc.compiler.summary import network_summary
from vpuc.runtime.artifact import BOUND_INPUTS, Artifact, bound_inputs_npz
from vpuc.targets import Target, resolve_target

VPUC_VERSION = "0.1.0"
MAX_LOWERING_ROUNDS = 64  # each round sends at least one refused layer back to the CPU


@dataclass(frozen=True)
class CompileOptions:
    """What the user chose beyond the model and the target."""

    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    bound_inputs: dict[str, str] = field(default_factory=dict)  # --bind-input NAME=VALUE
    optimize: bool = True  # run the graph passes (compiler/pipeline.py)
    passes: PassOptions | None = None  # their knobs; None: the target's defaults
    opt_level: int = DEFAULT_OPT_LEVEL  # -O0 .. -O3: which groups of graph passes run
    disabled_passes: tuple[str, ...] = ()  # --disable-pass NAME ...
    opt_bisect_limit: int | None = None  # run only the first N selected passes (bisection)
    min_subgraph_ops: int = DEFAULT_MIN_SUBGRAPH_OPS  # smaller VPU subgraphs stay on the CPU
    profitability: bool = True  # judge each VPU subgraph with the cost model
    calib: str | None = None  # .npz of calibration samples per input name
    calib_synthetic: int | None = None  # or N seeded synthetic samples (the default: 32)
    calib_method: str = DEFAULT_METHOD  # minmax, percentile, entropy, mse or auto
    held_out: int | None = None  # --held-out K: samples that measure accuracy (None: data.py's rule)
    # False: a QDQ model's accuracy is not measured (`vpuc partition`: its placement does not
    # depend on it); a float model is calibrated and measured either way (its placement does)
    measure_accuracy: bool = True
    percentile: float = DEFAULT_PERCENTILE
    quantize: bool = True  # VPU targets: quantise (False: partition the float model as is)
    # int8 artifacts, the QDQ reference `vpuc run --check` uses: "deferred" (carried
    # serialised, built by the check), True (built into the host library now), False (none)
    reference: bool | str = "deferred"
    bias_correction: bool = True
    quant_options: QuantOptions = QuantOptions()  # the other methods, --keep-float, --min-sqnr
    tuning_db: str | Path | None = None  # a `vpuc tune` database directory (docs/tuning.md)


@dataclass
class Prepared:
    """The model after every stage before the host build."""

    imported: ImportedModel
    target: Target
    mod: tvm.IRModule  # what the host builds
    optimized: OptimizeResult | None = None
    quantized: QuantizeResult | None = None
    partition: PartitionResult | None = None
    programs: list[VpuProgram] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    decompositions: dict[str, str] = field(default_factory=dict)  # ONNX node -> what it became
    provenance: dict = field(default_factory=dict)  # Relax var -> ONNX nodes, after the front half
    # partitions of the quantised module: 1 when the code generator's refusals were all
    # known before the partition was final (a refusal found only while lowering redoes it)
    lowering_rounds: int = 0

    @property
    def warnings(self) -> list[str]:
        return list(self.quantized.warnings) if self.quantized else []


def _quiet(stage: str) -> None:
    """The default progress callback: says nothing."""


def prepare_model(
    model: str | Path | onnx.ModelProto,
    target: str | Path | Target,
    options: CompileOptions,
    progress: Callable[[str], None] = _quiet,
) -> Prepared:
    """frontend -> passes -> partition (VPU targets): everything but the host build.
    `progress(stage)` is told as each stage starts (the CLI shows it)."""
    prepared = prepare_front(model, target, options, progress)
    if prepared.target.has_vpu:
        partition_and_lower(prepared, options, progress)
    return prepared


def prepare_front(
    model: str | Path | onnx.ModelProto,
    target: str | Path | Target,
    options: CompileOptions,
    progress: Callable[[str], None] = _quiet,
) -> Prepared:
    """The front half: frontend -> passes -> decompose -> quantise (VPU targets), stopping
    before the partition. Of the target it reads only the op list (decompose) and, for a
    float model, what the quantiser's own partition reads (`vpuc sweep` relies on this)."""
    target = resolve_target(target)
    PassSelection(options.opt_level, tuple(options.disabled_passes), options.opt_bisect_limit)  # check early
    start = time.perf_counter()
    progress("importing the ONNX model")
    imported = import_model(model, options.input_shapes, options.bound_inputs)
    prepared = Prepared(imported, target, imported.mod, timings={"frontend_s": time.perf_counter() - start})
    provenance = {var: [node] for var, node in imported.var_to_node.items()}
    if options.optimize:
        progress("graph passes")
        selection = PassSelection(options.opt_level, tuple(options.disabled_passes), options.opt_bisect_limit)
        prepared.optimized = optimize_imported(
            imported, target, options.passes or pass_options(target), selection=selection
        )
        prepared.mod, provenance = prepared.optimized.mod, prepared.optimized.provenance
        prepared.timings.update({f"pass_{k}_s": v for k, v in prepared.optimized.timings.items()})
    if target.has_vpu:
        start = time.perf_counter()
        decomposed = decompose_for_vpu(prepared.mod, target, provenance)
        prepared.mod, provenance = decomposed.mod, decomposed.provenance
        prepared.decompositions = decomposed.notes
        prepared.timings["decompose_s"] = time.perf_counter() - start
    if target.has_vpu and options.quantize:
        start = time.perf_counter()
        progress("quantising to int8 (calibration)")
        prepared.quantized = quantize_for_compile(
            prepared.mod,
            target,
            imported.onnx_model,
            provenance,
            imported.inputs,
            calib_path=options.calib,
            calib_synthetic=options.calib_synthetic,
            method=options.calib_method,
            percentile=options.percentile,
            profitability=options.profitability,
            min_subgraph_ops=options.min_subgraph_ops,
            bias_correction=options.bias_correction,
            options=options.quant_options,
            held_out=options.held_out,
            measure=options.measure_accuracy,
        )
        prepared.mod, provenance = prepared.quantized.mod, prepared.quantized.provenance
        prepared.timings["quantize_s"] = time.perf_counter() - start
    prepared.provenance = provenance
    return prepared


def partition_and_lower(prepared: Prepared, options: CompileOptions, progress=_quiet) -> None:
    """The back half: partition; then (for a quantised module) lower every VPU subgraph. The
    partitioner asks the code generator about the raw cut first (_estimator), so the layers
    it refuses stay on the CPU with its refusal as the reason in the one final cut; a refusal
    found only while lowering the final cut redoes the partition without that layer (counted
    in `lowering_rounds`): the report always describes what the artifact runs."""
    target, onnx_model = prepared.target, prepared.imported.onnx_model
    provenance = prepared.provenance
    # the quantiser's --keep-float / accuracy-floor layers stay on the CPU (it realised them in float)
    refused: dict[str, str] = dict(prepared.quantized.kept_float) if prepared.quantized else {}
    prepared.timings["partition_s"] = prepared.timings["lower_s"] = 0.0
    lowered: dict = {}  # the raw cut's programs, by VPU function: the final cut reuses them
    for rounds in range(1, MAX_LOWERING_ROUNDS + 1):
        prepared.lowering_rounds = rounds
        start = time.perf_counter()
        progress("partitioning for the VPU")
        prepared.partition = partition_for_vpu(
            prepared.mod,
            target,
            onnx_model,
            provenance,
            min_subgraph_ops=options.min_subgraph_ops,
            profitability=options.profitability,
            blocked=refused,
            vpu_estimate=_estimator(target, provenance, lowered) if prepared.quantized is not None else None,
            notes=prepared.decompositions,
        )
        prepared.timings["partition_s"] += time.perf_counter() - start
        if prepared.quantized is None:
            return
        start = time.perf_counter()
        progress("lowering VPU subgraphs to instruction streams")
        try:
            prepared.programs = lower_partitioned(prepared.partition.mod, target, provenance, lowered)
            return
        except LowerError as exc:
            if not exc.members or all(m in refused for m in exc.members):
                raise CompileError(f"VPU lowering failed: {exc}") from None
            reason = f"the VPU code generator cannot lower it: {exc}"
            refused.update(dict.fromkeys(exc.members, reason))
        finally:
            prepared.timings["lower_s"] += time.perf_counter() - start
    raise CompileError("VPU lowering: too many layers refused by the code generator")


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
    prepared = prepare_model(model, target, options)
    return build_artifact(model, prepared, reference=options.reference, tuning_db=options.tuning_db)


def _estimator(target: Target, provenance, lowered: dict):
    """What the code generator says of each raw subgraph, before the partition is final:
    every layer its reader refuses (each with the reason), then, for a subgraph it reads
    whole, its estimated cycles, or the layer its planner refuses. The programs it lowers
    go into `lowered` (by function and edge set), which the final lowering reuses where the
    final cut kept a raw subgraph as it was."""

    def estimate(raw: tvm.IRModule) -> VpuAnswers:
        cycles, refusals = {}, {}
        edges, names = channels_first_inputs(raw), param_names(raw, provenance)
        for index, (gv, func) in enumerate(vpu_functions(raw)):
            found: dict[str, str] = {}
            try:
                extract_subgraph(func, f"vpu_sg{index}", provenance, index, found, names.get(gv))
                if not found:
                    channels_first = edges.get(gv, set())
                    program = lower_function(func, index, channels_first, target, provenance, names.get(gv))
                    lowered[func, frozenset(channels_first), index] = program
                    cycles[index] = program.estimate["cycles"]
            except LowerError as exc:
                if exc.members:
                    found.update(dict.fromkeys(exc.members, f"the VPU code generator cannot lower it: {exc}"))
            refusals.update(found)
        return VpuAnswers(cycles, refusals)

    return estimate


REFERENCE_MODULE = "reference.json"  # the QDQ reference module, tvm.ir.save_json
NO_HOST_CODE = "every op runs on the VPU: the artifact lists the VPU calls instead of a host library"


def build_artifact(
    model: str | Path | onnx.ModelProto,
    prepared: Prepared,
    reference: bool | str = "deferred",
    progress: Callable[[str], None] = _quiet,
    tuning_db: str | Path | None = None,
) -> Artifact:
    """The host build and the packaging of a prepared model. `reference`: the QDQ reference
    of the VPU subgraphs (for `vpuc run --check`) carried serialised for the check to build
    ("deferred"), built into the host library now (True), or left out (False).
    `tuning_db` is a `vpuc tune` database whose records schedule the host kernels."""
    built = reference is True and bool(prepared.programs)
    progress("building the host graph with LLVM" + (" (and the QDQ reference)" if built else ""))
    imported = prepared.imported
    start = time.perf_counter()
    host_mod = prepared.mod
    deferred = None
    if prepared.programs:
        host_mod = join_host(prepared.partition.mod, prepared.programs, reference=built)
        if reference == "deferred":
            deferred = tvm.ir.save_json(reference_module(prepared.partition.mod, prepared.programs))
    calls = vpu_call_plan(host_mod) if prepared.programs and not built else None
    host = None if calls else build_host_library(host_mod, prepared.target, imported.name, tuning_db)
    prepared.timings["host_build_s"] = time.perf_counter() - start
    report = compile_report(prepared)
    report["host_build"] = host.report if host else {"skipped": NO_HOST_CODE}
    report["summary"] = network_summary(report, prepared.target, imported.onnx_model)
    report["warnings"] += host.warnings if host else []
    members = {"report.json": json.dumps(report, indent=2).encode()}
    manifest = {
        "vpuc_version": VPUC_VERSION,
        "target": prepared.target.to_json(),
        "model": model_identity(model, imported.onnx_model),
        "inputs": [spec.to_json() for spec in imported.inputs],
        "outputs": [spec.to_json() for spec in imported.outputs],
        "host": {"library": "host.so", "entry": "main"} if host else {"entry": "main", **calls},
        "vpu_programs": [program_entry(p, members, imported.onnx_model) for p in prepared.programs],
    }
    if host:  # `vpuc run` checks the CPU against host_target
        members["host.so"] = host.library
        manifest["host_target"] = host.host.to_json()
    if imported.bound_inputs:  # `vpuc run --check` feeds them to the reference model
        members[BOUND_INPUTS] = bound_inputs_npz(imported.bound_inputs)
        manifest["bound_inputs"] = {"member": BOUND_INPUTS, "names": sorted(imported.bound_inputs)}
    if prepared.quantized is not None:
        manifest["numerics"] = "int8"  # outputs carry int8 quantisation error (vpuc run --check)
    if built or deferred is not None:
        functions = [f"{REFERENCE_PREFIX}{p.index}" for p in prepared.programs]
        manifest["reference"] = {"entry": REFERENCE_ENTRY, "subgraphs": functions}
    if deferred is not None:  # runtime/reference.py builds it, cached beside the artifact
        members[REFERENCE_MODULE] = deferred.encode()
        digest = hashlib.sha256(members[REFERENCE_MODULE]).hexdigest()
        manifest["reference"].update(module=REFERENCE_MODULE, sha256=digest)
    return Artifact(manifest=manifest, members=members)
