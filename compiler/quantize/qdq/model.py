"""QDQ input models: keep their quantisation, clean it up, and measure it.

    imported QDQ module  ->  validate -> uint8_to_int8 -> fold_constant_layout -> fold_qdq_pairs
                             -> requantize_layout_ops
    the ONNX model       ->  accuracy against its reference (qdq_reference.py, onnxruntime;
                             strip_fake_quant(cleaned) on the VM where that cannot be built)

A model that already has QuantizeLinear/DequantizeLinear is not re-quantised: its scales
and zero points are the ones the VPU uses. The passes (one per file) only change how the
same numbers are written, so the cleaned module computes bit for bit what onnxruntime
computes on the original with graph optimisations disabled.
"""

from __future__ import annotations

import onnx
import tvm
from tvm import relax

from vpuc.compiler.quantize.bindings import QUANTIZE, BindingView, op_name
from vpuc.compiler.quantize.calibration.data import CalibrationData
from vpuc.compiler.quantize.calibration.observe import Observer
from vpuc.compiler.quantize.measurement.accuracy import LayerProbe, evaluate, layer_name
from vpuc.compiler.quantize.ptq import QuantizeResult
from vpuc.compiler.quantize.qdq.constants import fold_constant_layout
from vpuc.compiler.quantize.qdq.layout_ops import requantize_layout_ops
from vpuc.compiler.quantize.qdq.pairs import fold_qdq_pairs
from vpuc.compiler.quantize.qdq.params import QDQ_OPS, call_params, is_dynamic, validate_qdq
from vpuc.compiler.quantize.qdq.reference import ReferenceUnavailable, qdq_accuracy
from vpuc.compiler.quantize.qdq.strip import strip_fake_quant
from vpuc.compiler.quantize.qdq.uint8 import uint8_to_int8


def is_qdq_module(mod: tvm.IRModule) -> bool:
    """Whether main has any quantize/dequantize (a QDQ model, not a float one) that is not
    dynamic. The binding view (every binding's readers: 0.16 s on tinyconv) is built only
    for a quantize whose scale is a var, the one case is_dynamic must look up."""
    func, view = mod["main"], None
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if op_name(value) not in QDQ_OPS:
                continue
            if not isinstance(value.args[1], relax.Var):
                return True  # a constant scale: not dynamic
            view = view or BindingView.of(func)
            if not is_dynamic(value, view):
                return True
    return False


def clean_qdq(mod: tvm.IRModule, provenance: dict[str, list[str]]) -> tvm.IRModule:
    """Validate the model's parameters (QDQError naming the node), then the cleanup passes.
    `provenance` is updated for the bindings the cleanup merges."""
    validate_qdq(mod, provenance)
    mod = uint8_to_int8(mod)  # first: fold_qdq_pairs compares int8 parameters
    mod = fold_constant_layout(mod, provenance)
    mod = fold_qdq_pairs(mod)
    return requantize_layout_ops(mod, provenance)  # last: after the pairs are folded


def quantize_qdq(
    mod: tvm.IRModule,
    provenance: dict[str, list[str]],
    held_out: CalibrationData | None,
    output_names: list[str],
    llvm_target: str = "llvm",
    onnx_model: onnx.ModelProto | None = None,
) -> QuantizeResult:
    """Clean a QDQ module and report its accuracy against its float reference: measured
    with onnxruntime on `onnx_model` when given (qdq_reference.py), else on the Relax
    modules (both built with LLVM: seconds, not milliseconds). `held_out` None: not
    measured (the accuracy is empty; `vpuc partition` needs only the cleaned module)."""
    provenance = dict(provenance)
    cleaned = clean_qdq(mod, provenance)
    accuracy, probes = None, 0
    if held_out is None:
        accuracy = {"outputs": [], "layers": [], "measured": False}
    elif onnx_model is not None:
        try:
            accuracy = qdq_accuracy(onnx_model, held_out, output_names)
            probes = len(accuracy["layers"])
        except ReferenceUnavailable:
            accuracy = None
    if accuracy is None:  # held_out is given: onnxruntime could not build the reference
        accuracy, probes = _relax_accuracy(cleaned, provenance, held_out, output_names, llvm_target)
    summary = {
        "mode": "qdq model: parameters kept",
        "method": None,
        "percentile": None,
        "calibration": None,
        "held_out": {"source": held_out.source, "samples": held_out.count} if held_out else None,
        "quantized_tensors": probes,
    }
    return QuantizeResult(cleaned, accuracy, None, dict(provenance), [], [], summary)


def _relax_accuracy(cleaned, provenance, held_out, output_names, llvm_target) -> tuple[dict, int]:
    stripped = strip_fake_quant(cleaned)
    probes = _probes(cleaned, stripped.mod, stripped.reference_of, provenance)
    reference = Observer(stripped.mod, [p.float_tensor for p in probes], llvm_target)
    quantized = Observer(cleaned, [p.quantized for p in probes], llvm_target)
    return evaluate(reference, quantized, held_out, output_names, probes), len(probes)


def _probes(cleaned, reference, reference_of: dict[str, str], provenance) -> list[LayerProbe]:
    """One probe per quantize of a float tensor the reference still computes (compared
    with its clamped twin where the quantize's range starts at 0)."""
    view, available = BindingView.of(cleaned["main"]), set(BindingView.of(reference["main"]).vars)
    probes = []
    for name, value in view.values.items():
        if view.op(name) != QUANTIZE or call_params(value) is None:
            continue
        source = getattr(value.args[0], "name", "")
        tensor = reference_of.get(source, source)
        if tensor in available:
            label, nodes = layer_name(source, provenance)
            probes.append(LayerProbe(label, tensor, name, call_params(value), nodes))
    return probes
