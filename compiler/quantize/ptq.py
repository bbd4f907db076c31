"""Post-training quantisation of a float module: partition -> plan -> calibrate -> realise ->
measure.

    optimised float module  ->  QDQ module (VPU ops int8, the rest float) + accuracy report

1. partition_for_vpu on the float module, as the compile will run it (same target, same
   profitability rule, --keep-float blocked): its final placement is what gets quantised
   (plan.py, layers.py)
2. float rewrites, calibration and adaptive rounding (prepare.py)
3. insert quantize/dequantize around the planned composites (realize.py)
4. run both modules on the held-out samples and compare; per-layer sensitivity; the
   accuracy floor (measure.py, floor.py)
5. when the floor keeps layers in float: partition again with them blocked, realise and
   measure the final module
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx
import tvm

from vpuc.compiler.partition import Placement, partition_for_vpu
from vpuc.compiler.partition.macs import model_macs
from vpuc.compiler.quantize.calibration.data import CalibrationData, zero_range_warnings
from vpuc.compiler.quantize.calibration.ranges import DEFAULT_METHOD, DEFAULT_PERCENTILE, METHODS
from vpuc.compiler.quantize.layers import keep_float_bindings, plan_layers
from vpuc.compiler.quantize.measurement.accuracy import exact_accuracy
from vpuc.compiler.quantize.measurement.measure import AccuracyFloorError, Run, floor_message, floor_verdict
from vpuc.compiler.quantize.options import QuantOptions
from vpuc.compiler.quantize.plan import QuantPlan, plan_quantization
from vpuc.compiler.quantize.prepare import prepare
from vpuc.compiler.quantize.transforms.realize import QuantizedTensor, realize
from vpuc.targets import Target


@dataclass
class QuantizeResult:
    """The QDQ module and what the quantiser did."""

    mod: tvm.IRModule  # VPU ops in QDQ form, the rest float
    accuracy: dict[str, Any]  # {"outputs": [...], "layers": [...], "samples", "held_out", ...}
    placement: Placement | None  # the float module's placement that was quantised (None: QDQ input)
    provenance: dict[str, list[str]]  # of the QDQ module's bindings
    tensors: list[QuantizedTensor] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)  # method, calibration source, counts
    kept_float: dict[str, str] = field(default_factory=dict)  # bindings the partitioner must block
    below_floor: str | None = None  # the floor was not reached and not accepted: why

    def to_json(self) -> dict[str, Any]:
        """The report's `quantization` section (the `accuracy` key is separate)."""
        return {**self.summary, "warnings": list(self.warnings)}


def quantize(
    mod: tvm.IRModule,
    target: Target,
    onnx_model: onnx.ModelProto,
    provenance: dict[str, list[str]],
    calib: CalibrationData,
    method: str = DEFAULT_METHOD,
    percentile: float = DEFAULT_PERCENTILE,
    held_out: CalibrationData | None = None,
    profitability: bool = True,
    min_subgraph_ops: int = 1,
    bias_correction: bool = True,
    options: QuantOptions | None = None,
) -> QuantizeResult:
    """Quantise the ops `target` runs on its VPU; measure accuracy on `held_out` (default:
    the calibration samples themselves, with a warning). `bias_correction` subtracts from
    each conv/dense bias the mean error its int8 weights add; `options` selects the other
    methods, --keep-float and the accuracy floor (docs/quantization.md)."""
    if method not in METHODS:
        raise ValueError(f"unknown calibration method {method!r} (known: {', '.join(METHODS)})")
    options = options or QuantOptions()
    warnings = []
    if held_out is None:
        held_out = calib
        warnings.append("no held-out samples given: accuracy is measured on the calibration samples")
    provenance = onnx_provenance(provenance, onnx_model)
    # only the placements of these partitions are read: a subgraph a lower bound of its
    # cycles sends to the CPU is not planned exactly (exact_figures=False)
    partition = partition_for_vpu(
        mod, target, onnx_model, provenance, min_subgraph_ops, profitability, exact_figures=False
    )
    kept: dict[str, str] = {}
    if options.keep_float:
        kept, notes = keep_float_bindings(options.keep_float, partition.placement, provenance, onnx_model)
        warnings.extend(notes)
        if kept:
            partition = partition_for_vpu(
                mod, target, onnx_model, provenance, min_subgraph_ops, profitability, blocked=kept,
                exact_figures=False,
            )  # fmt: skip
    plan = plan_quantization(mod["main"], partition.placement)
    output_names = [spec.name for spec in onnx_model.graph.output]
    summary = {
        **_summary(method, percentile, calib, held_out, plan),
        "bias_correction": bias_correction,
        "methods": options.methods(),
    }
    if not plan.composites:
        shapes = [_shape(o) for o in onnx_model.graph.output]
        accuracy = exact_accuracy(held_out, output_names, shapes)
        result = QuantizeResult(mod, accuracy, partition.placement, dict(provenance), [], warnings, summary)
        result.kept_float = kept
        return result
    prepared = prepare(mod, plan, calib, options, method, percentile, bias_correction, target.host.llvm)
    labels = {t: _tensor_label(t, provenance) for t in prepared.plan.tensors_to_calibrate()}
    warnings.extend(zero_range_warnings(prepared.stats, labels))
    choice = "percentile" if method == "auto" else method
    realized = realize(
        prepared.mod, prepared.plan, prepared.params(prepared.plan, choice, percentile), provenance,
        prepared.means, prepared.rounded,
    )  # fmt: skip
    run = Run(prepared, realized, provenance, held_out, output_names, target)
    accuracy = run.measure()
    layers = plan_layers(prepared.plan, provenance)
    floor = run.floor(layers, options, model_macs(mod))
    if floor is not None and not floor.reached and not options.accept_below_floor:
        raise AccuracyFloorError(floor_message(floor, options, len(layers), synthetic=held_out.synthetic))
    blocked = {**kept, **prepared.blocked}
    placement = partition.placement
    if floor is not None and floor.kept:
        reason = f"kept in float on the CPU: --min-sqnr {options.min_sqnr_db:g} needs it"
        blocked.update({m: reason for layer in floor.kept for m in layer.members})
        final = partition_for_vpu(
            prepared.mod, target, onnx_model, provenance, min_subgraph_ops, profitability, blocked=blocked,
            exact_figures=False,
        )  # fmt: skip
        placement = final.placement
        final_plan = plan_quantization(prepared.mod["main"], placement)
        realized = realize(
            prepared.mod, final_plan, prepared.params(final_plan, choice, percentile), provenance,
            prepared.means, prepared.rounded,
        )  # fmt: skip
        off = frozenset(layer.root for layer in floor.kept)
        if {c.root for c in final_plan.composites} == {c.root for c in prepared.plan.composites} - off:
            accuracy = run.measure(off, realized)  # the same module as the switchable one with `off` off
        else:  # the partitioner moved more to the CPU: measure the final module itself
            accuracy = Run(prepared, realized, provenance, held_out, output_names, target).measure()
        summary["quantized_ops"] = _summary(method, percentile, calib, held_out, final_plan)["quantized_ops"]
    accuracy.update(run.sensitivity_report(layers, floor, options))
    summary["quantized_tensors"] = len(realized.tensors)
    summary["timings_s"] = {**prepared.report, "measure_seconds": round(run.seconds, 4)}
    result = QuantizeResult(
        realized.mod, accuracy, placement, realized.provenance, realized.tensors, warnings, summary
    )
    result.kept_float = blocked
    floor_verdict(floor, options, accuracy, result.warnings)
    return result


def onnx_provenance(provenance: dict[str, list[str]], onnx_model: onnx.ModelProto) -> dict[str, list[str]]:
    """The provenance with only real ONNX node names (the graph passes also record labels
    such as '(inserted by layout)', which name no node of the model). A binding the passes
    inserted keeps an empty list: it computes no ONNX node, and readers of the provenance
    (the partition report) must not attribute it to one."""
    nodes = {node.name for node in onnx_model.graph.node}
    return {name: [label for label in labels if label in nodes] for name, labels in provenance.items()}


def _summary(
    method: str, percentile: float, calib: CalibrationData, held_out: CalibrationData, plan: QuantPlan
) -> dict:
    return {
        "mode": "calibrated",
        "method": method,
        "percentile": percentile if method in ("percentile", "auto") else None,
        "calibration": {"source": calib.source, "samples": calib.count, "synthetic": calib.synthetic},
        "held_out": {"source": held_out.source, "samples": held_out.count},
        "quantized_ops": [{"composite": c.name, "bindings": list(c.members)} for c in plan.composites],
    }


def _shape(value_info: onnx.ValueInfoProto) -> tuple[int, ...]:
    return tuple(d.dim_value for d in value_info.type.tensor_type.shape.dim)


def _tensor_label(tensor: str, provenance: dict[str, list[str]]) -> str:
    """A calibrated tensor as the user knows it: the ONNX node(s) producing it."""
    nodes = provenance.get(tensor) or []
    return f"'{tensor}' (from ONNX node '{nodes[-1]}')" if nodes else f"'{tensor}'"
