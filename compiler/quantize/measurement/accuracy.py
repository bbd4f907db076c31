"""The accuracy report: the quantised module against its float reference on held-out samples.

    float observer + QDQ observer + held-out samples   ->   {"outputs": [...], "layers": [...]}

Both modules run on TVM's VM (the QDQ module with ONNX QDQ semantics: dequantize, float op,
quantize). `outputs` has one row per model output (metrics.py); `layers` has one row per
quantised tensor in graph order: the SQNR of the int8 tensor, dequantised, against the float
tensor it stands for, so the first row where the figure drops is where the error grows.
A layer is named after the ONNX node that produced the tensor (a model input by its name).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from vpuc.compiler.quantize.calibration.data import CalibrationData
from vpuc.compiler.quantize.calibration.observe import Observer
from vpuc.compiler.quantize.measurement.metrics import SQNR_CAP_DB, Figures, is_classifier_output
from vpuc.compiler.quantize.params import QParams


@dataclass(frozen=True)
class LayerProbe:
    """One quantised tensor: where to read it in each module and how to dequantise it."""

    name: str  # what the user reads: the ONNX node (or model input) of the tensor
    float_tensor: str  # binding (or param) in the float reference
    quantized: str  # the int8 binding in the QDQ module
    params: QParams
    nodes: tuple[str, ...] = ()


def evaluate(
    reference: Observer,
    quantized: Observer,
    held_out: CalibrationData,
    output_names: list[str],
    probes: list[LayerProbe],
) -> dict:
    """The `accuracy` section of the compile report."""
    return evaluate_with_reference(reference, quantized, held_out, output_names, probes)[0]


def evaluate_with_reference(
    reference: Observer,
    quantized: Observer,
    held_out: CalibrationData,
    output_names: list[str],
    probes: list[LayerProbe],
    switch_input: tuple[np.ndarray, ...] = (),
    read: Callable[[dict[str, np.ndarray], str], np.ndarray] | None = None,
) -> tuple[dict, list[np.ndarray]]:
    """(the `accuracy` section of the compile report, the float outputs of every held-out
    sample stacked per output). `switch_input` is passed to a switchable module (switch.py);
    `read(values, name)` reads a float tensor from the reference's values (derived.py)."""
    read = read or (lambda values, name: values[name])
    # the float outputs are kept (the floor's search compares with them); the quantised ones
    # are measured as they come (metrics.Figures), one sample's float64 copies at a time
    stacked: list[np.ndarray] = []
    figures: list[Figures] = []
    energies = {probe.quantized: Figures() for probe in probes}
    for i, ((ref_out, ref_values), (test_out, test_values)) in enumerate(zip(
        reference.over(held_out), quantized.over(held_out, switch_input), strict=True
    )):  # fmt: skip
        if i == 0:
            stacked = [np.empty((held_out.count, *np.shape(v)), np.asarray(v).dtype) for v in ref_out]
            figures = [Figures(is_classifier_output(np.shape(v))) for v in ref_out]
        for index in range(len(output_names)):
            stacked[index][i] = ref_out[index]
            figures[index].add(ref_out[index], test_out[index])
        for probe in probes:
            test = probe.params.dequantize(test_values[probe.quantized])
            energies[probe.quantized].add(read(ref_values, probe.float_tensor), test)
    outputs = [figures[i].row(name) for i, name in enumerate(output_names)]
    layers = [_layer_row(probe, energies[probe.quantized]) for probe in probes]
    report = {"samples": held_out.count, "held_out": held_out.source, "outputs": outputs, "layers": layers}
    return report, stacked


def _layer_row(probe: LayerProbe, energy: Figures) -> dict:
    return {
        "name": probe.name,
        "sqnr_db": round(energy.sqnr_db, 3),
        "tensor": probe.float_tensor,
        "nodes": list(probe.nodes),
    }


def exact_accuracy(held_out: CalibrationData, output_names: list[str], output_shapes: list[tuple]) -> dict:
    """The report when nothing was quantised: every output equals the float one."""
    perfect = [
        {
            "name": name,
            "sqnr_db": SQNR_CAP_DB,
            "cosine": 1.0,
            "max_abs_err": 0.0,
            "top1_agreement": 1.0 if len(shape) == 2 and shape[-1] >= 2 else None,
        }
        for name, shape in zip(output_names, output_shapes, strict=True)
    ]
    return {"samples": held_out.count, "held_out": held_out.source, "outputs": perfect, "layers": []}


def layer_name(
    tensor: str, provenance: dict[str, list[str]], sources: dict[str, str] | None = None
) -> tuple[str, tuple[str, ...]]:
    """(the ONNX node that produced `tensor`, all the nodes its binding computes). A binding
    no ONNX node accounts for (a layout transpose of the input) is named after what it reads,
    followed through `sources` (binding -> the var it reads): "input (relaid out)". Total: an
    empty provenance list counts as none (real exports leave some)."""
    nodes = tuple(provenance.get(tensor) or ())
    if nodes:
        return nodes[-1], nodes
    seen, current = [tensor], tensor
    while current in (sources or {}) and not provenance.get(current) and len(seen) < 16:
        current = sources[current]
        seen.append(current)
    if current == tensor:
        return tensor, ()
    found = tuple(provenance.get(current) or ())
    return f"{found[-1] if found else current} (relaid out)", found
