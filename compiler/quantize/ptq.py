"""Post-training quantisation of a float module: partition -> plan -> calibrate -> realise ->
measure.

    optimised float module  ->  QDQ module (VPU ops int8, the rest float) + accuracy report

1. partition_for_vpu on the float module, as the compile will run it (same target, same
   profitability rule): its final placement is what gets quantised (plan.py)
2. calibrate the planned tensors on the calibration samples (calibrate.py)
3. insert quantize/dequantize around the planned composites (realize.py)
4. run both modules on the held-out samples and compare (accuracy.py)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx
import tvm

from vpuc.compiler.partition import Placement, partition_for_vpu
from vpuc.compiler.quantize.accuracy import LayerProbe, evaluate, exact_accuracy, layer_name
from vpuc.compiler.quantize.bindings import BindingView, var_names
from vpuc.compiler.quantize.calibrate import channel_mean_axes, choose_params, collect_stats
from vpuc.compiler.quantize.data import CalibrationData
from vpuc.compiler.quantize.observe import Observer
from vpuc.compiler.quantize.plan import QuantPlan, plan_quantization
from vpuc.compiler.quantize.ranges import DEFAULT_METHOD, DEFAULT_PERCENTILE, METHODS
from vpuc.compiler.quantize.realize import QuantizedTensor, Realized, realize
from vpuc.targets import Target


@dataclass
class QuantizeResult:
    """The QDQ module and what the quantiser did."""

    mod: tvm.IRModule  # VPU ops in QDQ form, the rest float
    accuracy: dict[str, Any]  # {"outputs": [...], "layers": [...], "samples", "held_out"}
    placement: Placement | None  # the float module's placement that was quantised (None: QDQ input)
    provenance: dict[str, list[str]]  # of the QDQ module's bindings
    tensors: list[QuantizedTensor] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)  # method, calibration source, counts

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
) -> QuantizeResult:
    """Quantise the ops `target` runs on its VPU; measure accuracy on `held_out` (default:
    the calibration samples themselves, with a warning). `bias_correction` subtracts from
    each conv/dense bias the mean error its int8 weights add (docs/quantization.md)."""
    if method not in METHODS:
        raise ValueError(f"unknown calibration method {method!r} (known: {', '.join(METHODS)})")
    warnings = []
    if held_out is None:
        held_out = calib
        warnings.append("no held-out samples given: accuracy is measured on the calibration samples")
    provenance = onnx_provenance(provenance, onnx_model)
    partition = partition_for_vpu(mod, target, onnx_model, provenance, min_subgraph_ops, profitability)
    plan = plan_quantization(mod["main"], partition.placement)
    output_names = [spec.name for spec in onnx_model.graph.output]
    summary = {**_summary(method, percentile, calib, held_out, plan), "bias_correction": bias_correction}
    if not plan.composites:
        shapes = [_shape(o) for o in onnx_model.graph.output]
        accuracy = exact_accuracy(held_out, output_names, shapes)
        return QuantizeResult(mod, accuracy, partition.placement, dict(provenance), [], warnings, summary)
    calibrated = plan.tensors_to_calibrate()
    reference = Observer(mod, list(dict.fromkeys([*calibrated, *plan.root_of])), target.host.llvm)
    mean_axes = channel_mean_axes(mod["main"], plan) if bias_correction else {}
    stats, means = collect_stats(reference, calibrated, calib, mean_axes)
    realized = realize(mod, plan, choose_params(plan, stats, method, percentile), provenance, means)
    accuracy = _measure(mod, realized, reference, provenance, held_out, output_names, target)
    summary["quantized_tensors"] = len(realized.tensors)
    return QuantizeResult(
        realized.mod, accuracy, partition.placement, realized.provenance, realized.tensors, warnings, summary
    )


def _measure(
    mod, realized: Realized, reference: Observer, provenance, held_out, output_names, target
) -> dict:
    """The accuracy report: the QDQ module against the float one on the held-out samples."""
    sources = _single_sources(mod)
    probes = [_probe(t, provenance, sources) for t in realized.tensors]
    quantized = Observer(realized.mod, [p.quantized for p in probes], target.host.llvm)
    return evaluate(reference, quantized, held_out, output_names, _graph_order(probes, mod))


def _single_sources(mod: tvm.IRModule) -> dict[str, str]:
    """binding -> the one var it reads, for bindings that read exactly one."""
    view = BindingView.of(mod["main"])
    return {name: reads[0] for name, value in view.values.items() if len(reads := var_names(value)) == 1}


def _probe(tensor: QuantizedTensor, provenance: dict[str, list[str]], sources: dict[str, str]) -> LayerProbe:
    name, nodes = layer_name(tensor.tensor, provenance, sources)
    return LayerProbe(name, tensor.tensor, tensor.quantized, tensor.params, nodes)


def onnx_provenance(provenance: dict[str, list[str]], onnx_model: onnx.ModelProto) -> dict[str, list[str]]:
    """The provenance with only real ONNX node names (the graph passes also record labels
    such as '(inserted by layout)', which name no node of the model). A binding the passes
    inserted keeps an empty list: it computes no ONNX node, and readers of the provenance
    (the partition report) must not attribute it to one."""
    nodes = {node.name for node in onnx_model.graph.node}
    return {name: [label for label in labels if label in nodes] for name, labels in provenance.items()}


def _graph_order(probes: list[LayerProbe], mod: tvm.IRModule) -> list[LayerProbe]:
    func = mod["main"]
    order = {p.name: i for i, p in enumerate(func.params)}
    for block in func.body.blocks:
        for binding in block.bindings:
            order[binding.var.name] = len(order)
    return sorted(probes, key=lambda p: order.get(p.float_tensor, len(order)))


def _summary(
    method: str, percentile: float, calib: CalibrationData, held_out: CalibrationData, plan: QuantPlan
) -> dict:
    return {
        "mode": "calibrated",
        "method": method,
        "percentile": percentile if method == "percentile" else None,
        "calibration": {"source": calib.source, "samples": calib.count, "synthetic": calib.synthetic},
        "held_out": {"source": held_out.source, "samples": held_out.count},
        "quantized_ops": [{"composite": c.name, "bindings": list(c.members)} for c in plan.composites],
    }


def _shape(value_info: onnx.ValueInfoProto) -> tuple[int, ...]:
    return tuple(d.dim_value for d in value_info.type.tensor_type.shape.dim)
