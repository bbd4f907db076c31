"""Per-layer sensitivity and the accuracy floor, measured on the switchable QDQ module.

    switchable module (switch.py) + held-out samples   ->   per layer: output SQNR when it
                                                             alone is int8
                                                        ->   the layers to keep in float so
                                                             that the output SQNR >= floor

A layer is one VPU composite (a conv with its bias and activation, a dense, an add, ...),
named after the ONNX node of its core op. All figures are output SQNR against the float
model (the minimum over the model's outputs), computed as the accuracy report computes them
(metrics.py): the sensitivity on the first SENSITIVITY_SAMPLES held-out samples (one pass
per layer), the floor's search on all of them.

The floor's search (`search_floor`), when the fully quantised model is below the floor:
1. add layers to the float set, most sensitive first (lowest SQNR alone), until the
   floor holds or the float set reaches `max_float` layers;
2. then try to quantise each kept layer again, least sensitive first, and leave it
   quantised when the floor still holds (so no kept layer is superfluous on its own).
Each step is one pass over the held-out samples on the same executable.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from vpuc.compiler.quantize.calibration.data import CalibrationData
from vpuc.compiler.quantize.calibration.observe import Observer
from vpuc.compiler.quantize.measurement.metrics import Figures
from vpuc.compiler.quantize.measurement.switch import switch_values
from vpuc.compiler.quantize.transforms.realize import Switch

SENSITIVITY_SAMPLES = 4


@dataclass(frozen=True)
class Layer:
    """One quantised VPU composite, as the user reads it."""

    root: str  # its root binding (what switches name)
    name: str  # the ONNX node of its core op
    nodes: tuple[str, ...]  # every ONNX node it computes
    members: tuple[str, ...]  # its bindings (what --keep-float blocks)
    kind: str


@dataclass
class Evaluator:
    """Output SQNR of the switchable module with a chosen set of layers quantised."""

    observer: Observer
    switches: list[Switch]
    held_out: CalibrationData
    reference_outputs: list[np.ndarray]  # per model output, the float values of all samples
    passes: int = 0
    seconds: float = 0.0
    cache: dict[frozenset, float] = field(default_factory=dict)

    def sqnr(self, quantized_layers) -> float:
        key = frozenset(quantized_layers)
        if key not in self.cache:
            start = time.perf_counter()
            flags = switch_values(self.switches, key)
            figures = [Figures() for _ in self.reference_outputs]
            for i, (out, _) in enumerate(self.observer.over(self.held_out, flags, outputs_only=True)):
                for index, value in enumerate(out):
                    figures[index].add(self.reference_outputs[index][i], value)
            self.cache[key] = min(f.sqnr_db for f in figures)
            self.passes += 1
            self.seconds += time.perf_counter() - start
        return self.cache[key]


def sensitivity(evaluator: Evaluator, layers: list[Layer]) -> dict[str, float]:
    """{layer root: output SQNR with only that layer int8}, on the first SENSITIVITY_SAMPLES
    held-out samples (one pass per layer)."""
    count = min(evaluator.held_out.count, SENSITIVITY_SAMPLES)
    subset = Evaluator(
        evaluator.observer,
        evaluator.switches,
        evaluator.held_out.subset(range(0, count), evaluator.held_out.source),
        [reference[:count] for reference in evaluator.reference_outputs],
    )
    figures = {layer.root: subset.sqnr({layer.root}) for layer in layers}
    evaluator.passes += subset.passes
    evaluator.seconds += subset.seconds
    return figures


@dataclass
class FloorResult:
    kept: list[Layer]  # in the order they were chosen
    sqnr_db: float  # with those layers in float (the switchable module's figure)
    reached: bool
    steps: list[dict] = field(default_factory=list)  # the search, for the report


def search_floor(
    evaluator: Evaluator,
    layers: list[Layer],
    alone: dict[str, float],
    floor_db: float,
    max_float: int,
    on_step: Callable[[str], None] | None = None,
) -> FloorResult:
    """The float set (see the module docstring); `alone` is sensitivity()'s result."""
    everything = {layer.root for layer in layers}
    by_sensitivity = sorted(layers, key=lambda layer: (alone.get(layer.root, 0.0), layer.root))
    kept: list[Layer] = []
    figure = evaluator.sqnr(everything)
    steps = [{"kept_float": [], "sqnr_db": round(figure, 3)}]
    for layer in by_sensitivity:
        if figure >= floor_db or len(kept) >= max_float:
            break
        kept.append(layer)
        figure = evaluator.sqnr(everything - {k.root for k in kept})
        steps.append({"kept_float": [k.name for k in kept], "sqnr_db": round(figure, 3)})
        if on_step:
            on_step(f"kept {layer.name} in float: {figure:.1f} dB")
    if figure < floor_db:
        return FloorResult(kept, figure, False, steps)
    for layer in sorted(kept, key=lambda k: -alone.get(k.root, 0.0)):
        trial = [k for k in kept if k is not layer]
        trial_figure = evaluator.sqnr(everything - {k.root for k in trial})
        if trial_figure >= floor_db:
            kept, figure = trial, trial_figure
            steps.append({"kept_float": [k.name for k in kept], "sqnr_db": round(figure, 3)})
    return FloorResult(kept, figure, True, steps)
