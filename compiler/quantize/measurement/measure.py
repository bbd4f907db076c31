"""Measuring a realised QDQ module: accuracy report, per-layer sensitivity, accuracy floor.

    Prepared (reference module) + Realized (QDQ module) + held-out samples
        -> accuracy {"outputs", "layers"}            accuracy.py, on the switchable module
        -> sensitivity: output SQNR per layer alone  floor.py
        -> the floor's float set                     floor.py

One build: the QDQ module made switchable (switch.py) runs every configuration; it is the
build calibration ran (one_build.py) where prepare.py made one.
"""

from __future__ import annotations

import time

import tvm

from vpuc.compiler.errors import CompileError
from vpuc.compiler.quantize.bindings import BindingView, var_names
from vpuc.compiler.quantize.calibration.observe import Observer
from vpuc.compiler.quantize.measurement.accuracy import LayerProbe, evaluate_with_reference, layer_name
from vpuc.compiler.quantize.measurement.floor import (
    SENSITIVITY_SAMPLES,
    Evaluator,
    FloorResult,
    Layer,
    search_floor,
    sensitivity,
)
from vpuc.compiler.quantize.measurement.switch import switch_values, switchable
from vpuc.compiler.quantize.options import QuantOptions
from vpuc.compiler.quantize.transforms.realize import QuantizedTensor, Realized

MAX_FLOAT_SHARE = 0.5  # the floor may keep at most this share of the layers in float
# The per-layer sensitivity by default only where its passes multiply-accumulate at most this
# many in all: the quantiser's build runs about 5e9 a second here (a YOLOv8n at 320 px: 82
# layers x 4 samples x 1.09e9 MACs = 3.6e11, most of its 89 s of CPU), so about 2 s. PaddleOCR's
# direction classifier (3.5e9) and every zoo model (at most 7.5e8) stay measured.
SENSITIVITY_AUTO_MACS = 10**10


class AccuracyFloorError(CompileError):
    """The quantised model stays below --min-sqnr and the user did not accept it."""


class Run:
    """The switchable QDQ module built once, measured on the held-out samples."""

    def __init__(self, prepared, realized: Realized, provenance, held_out, output_names, target) -> None:
        start = time.perf_counter()
        self.prepared, self.realized, self.held_out = prepared, realized, held_out
        self.output_names = output_names
        sources = _single_sources(prepared.mod)
        probes = [_probe(t, provenance, sources) for t in realized.tensors]
        self.probes = _graph_order(probes, prepared.mod)
        shared = prepared.shared.bind(realized) if prepared.shared is not None else None
        if shared is not None:  # the build calibration ran (one_build.py)
            self.observer = shared
        else:
            module = switchable(realized.mod, realized.switches)
            self.observer = Observer(module, [p.quantized for p in self.probes], target.host.llvm)
        self.evaluator: Evaluator | None = None
        self.alone: dict[str, float] = {}
        self.sensitivity_skipped: str | None = None  # why the default did not measure it
        self.build_seconds = time.perf_counter() - start

    @property
    def seconds(self) -> float:
        return self.build_seconds + (self.evaluator.seconds if self.evaluator else 0.0)

    def measure(self, off: frozenset[str] = frozenset(), tensors: Realized | None = None) -> dict:
        """The accuracy report with the layers `off` (roots) in float, over the quantised
        tensors of `tensors` (a realisation of this plan without those layers; default: this
        run's own)."""
        roots = frozenset(s for w in self.realized.switches for s in w.layers) - off
        present = {t.quantized for t in (tensors or self.realized).tensors}
        probes = [p for p in self.probes if p.quantized in present]
        accuracy, reference_outputs = evaluate_with_reference(
            self.prepared.reference, self.observer, self.held_out, self.output_names, probes,
            switch_values(self.realized.switches, roots), self.prepared.read(),
        )  # fmt: skip
        if self.evaluator is None:
            self.evaluator = Evaluator(
                self.observer, self.realized.switches, self.held_out, reference_outputs
            )
        self.evaluator.cache[roots] = min(o["sqnr_db"] for o in accuracy["outputs"])
        return accuracy

    def floor(self, layers: list[Layer], options: QuantOptions, model_macs: int = 0) -> FloorResult | None:
        wanted, self.sensitivity_skipped = sensitivity_wanted(options, len(layers), model_macs)
        everything = frozenset(layer.root for layer in layers)
        below = options.min_sqnr_db is not None and self.evaluator.sqnr(everything) < options.min_sqnr_db
        if wanted or below:  # the floor's search orders the layers by it
            self.alone = sensitivity(self.evaluator, layers)
            self.sensitivity_skipped = None
        if options.min_sqnr_db is None:
            return None
        max_float = max(1, int(len(layers) * MAX_FLOAT_SHARE))
        return search_floor(self.evaluator, layers, self.alone, options.min_sqnr_db, max_float)

    def sensitivity_report(self, layers: list[Layer], floor: FloorResult | None, options) -> dict:
        kept = {layer.root for layer in floor.kept} if floor else set()
        rows = [
            {
                "layer": layer.name,
                "kind": layer.kind,
                "nodes": list(layer.nodes),
                "sqnr_alone_db": round(self.alone[layer.root], 3) if layer.root in self.alone else None,
                "kept_float": layer.root in kept,
            }
            for layer in layers
        ]
        report = {"sensitivity": rows if self.alone else [], "sensitivity_skipped": self.sensitivity_skipped}
        if floor is not None:
            report["floor"] = {
                "min_sqnr_db": options.min_sqnr_db,
                "sqnr_db_all_int8": floor.steps[0]["sqnr_db"],
                "reached": floor.reached,
                "kept_float": [layer.name for layer in floor.kept],
                "search": floor.steps,
                "max_float_layers": max(1, int(len(layers) * MAX_FLOAT_SHARE)),
            }
        report["sensitivity_passes"] = self.evaluator.passes if self.evaluator else 0
        report["timings_s"] = {
            "switchable_build": round(self.build_seconds, 4),
            "passes": round(self.evaluator.seconds, 4) if self.evaluator else 0.0,
        }
        return report


def sensitivity_wanted(options: QuantOptions, layers: int, model_macs: int) -> tuple[bool, str | None]:
    """(measure the per-layer sensitivity?, why not when the default decided against it).
    Asked (--sensitivity / --no-sensitivity): as asked. By default: when its passes, one per
    layer on SENSITIVITY_SAMPLES samples, multiply-accumulate at most SENSITIVITY_AUTO_MACS
    in all (layers x samples x the model's MACs)."""
    if options.sensitivity is not None:
        return options.sensitivity, None
    cost = layers * SENSITIVITY_SAMPLES * model_macs
    if cost <= SENSITIVITY_AUTO_MACS:
        return True, None
    return False, (
        f"not measured: {layers} layers x {SENSITIVITY_SAMPLES} samples x {model_macs:,} MACs is "
        f"{cost:.2g} multiply-accumulates, above the {SENSITIVITY_AUTO_MACS:.0e} measured by default; "
        "--sensitivity measures it"
    )


def floor_verdict(
    floor: FloorResult | None, options: QuantOptions, accuracy: dict, warnings: list[str]
) -> None:
    """Warn about the layers kept in float; raise AccuracyFloorError below the floor unless
    the user accepted it."""
    if floor is None:
        return
    final = min(o["sqnr_db"] for o in accuracy["outputs"])
    accuracy["floor"]["sqnr_db"] = final
    names = ", ".join(layer.name for layer in floor.kept)
    before = accuracy["floor"]["sqnr_db_all_int8"]
    if floor.kept and final >= options.min_sqnr_db:
        warnings.append(
            f"output SQNR {before:.1f} dB with every VPU layer in int8 is below --min-sqnr "
            f"{options.min_sqnr_db:g}: kept {len(floor.kept)} layer(s) in float on the CPU ({names}), "
            f"now {final:.1f} dB"
        )
    if final >= options.min_sqnr_db:
        return
    synthetic = str(accuracy.get("held_out", "")).startswith("synthetic")
    message = floor_message(
        floor, options, max_float=accuracy["floor"]["max_float_layers"], figure=final, synthetic=synthetic
    )
    if not options.accept_below_floor:
        raise AccuracyFloorError(message)
    warnings.append(f"{message} (accepted)")


def floor_message(
    floor: FloorResult,
    options: QuantOptions,
    layers: int = 0,
    max_float: int | None = None,
    figure: float | None = None,
    synthetic: bool = False,
) -> str:
    """Why the compile stops: the figure reached, with how many layers in float, and whether
    the samples were synthetic (then --calib is the first thing to try)."""
    max_float = max_float if max_float is not None else max(1, int(layers * MAX_FLOAT_SHARE))
    figure = floor.sqnr_db if figure is None else figure
    names = ", ".join(dict.fromkeys(layer.name for layer in floor.kept))  # each layer once
    kept = f" even with {len(floor.kept)} layer(s) in float ({names})" if floor.kept else ""
    samples = "the held-out samples"
    if synthetic:  # the first thing to try is real data
        samples += " (synthetic random ones: no --calib X.npz was given)"
    return (
        f"output SQNR {figure:.1f} dB on {samples} is below --min-sqnr "
        f"{options.min_sqnr_db:g}{kept}; the floor may keep at most {max_float} layer(s) in "
        "float. Calibrate on real data (--calib), keep layers with --keep-float, lower "
        "--min-sqnr, or give --accept-low-sqnr"
    )


def _single_sources(mod: tvm.IRModule) -> dict[str, str]:
    """binding -> the one var it reads, for bindings that read exactly one."""
    view = BindingView.of(mod["main"])
    return {name: reads[0] for name, value in view.values.items() if len(reads := var_names(value)) == 1}


def _probe(tensor: QuantizedTensor, provenance: dict[str, list[str]], sources: dict[str, str]) -> LayerProbe:
    name, nodes = layer_name(tensor.tensor, provenance, sources)
    return LayerProbe(name, tensor.tensor, tensor.quantized, tensor.params, nodes)


def _graph_order(probes: list[LayerProbe], mod: tvm.IRModule) -> list[LayerProbe]:
    func = mod["main"]
    order = {p.name: i for i, p in enumerate(func.params)}
    for block in func.body.blocks:
        for binding in block.bindings:
            order[binding.var.name] = len(order)
    return sorted(probes, key=lambda p: order.get(p.float_tensor, len(order)))
