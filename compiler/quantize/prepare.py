"""Between the plan and the realisation: float rewrites, calibration, adaptive rounding.

    float module + QuantPlan + calibration samples + QuantOptions
        1. equalize        cross-layer equalisation (data-free, exact)         equalize.py
        2. observe         build the reference module once (every composite input and root):
                           the plan's switchable QDQ module, all switches off, which the
                           accuracy report then reuses (one_build.py); a float build when
                           SmoothQuant or bias absorption may rewrite the module
        3. pre-pass        per-channel statistics for SmoothQuant (its maxima on the first
                           PREPASS_SAMPLES samples) / bias absorption (its minima on all),
                           then rewrite the module (smoothquant.py, absorb_bias.py)
        4. calibrate       one pass: range statistics, bias-correction means, the layer
                           inputs adaptive rounding and the method choice need
        5. choose          per-tensor ranges (--calib-method; `auto`: method_choice.py)
        6. adaround        int8 weights by adaptive rounding, within its budget
    -> Prepared(mod, plan, reference observer, derived tensors, params, means, weights)

Tensors the rewrites change are read from the reference module through `derived`
(derived.py), so one build serves calibration and the accuracy report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import tvm

from vpuc.compiler.quantize.calibration import method_choice
from vpuc.compiler.quantize.calibration.calibrate import channel_mean_axes, choose_params, collect_stats
from vpuc.compiler.quantize.calibration.data import CalibrationData
from vpuc.compiler.quantize.calibration.histogram import TensorStats
from vpuc.compiler.quantize.calibration.observe import Observer
from vpuc.compiler.quantize.measurement.derived import Derived, reader
from vpuc.compiler.quantize.measurement.one_build import OneBuild
from vpuc.compiler.quantize.options import QuantOptions
from vpuc.compiler.quantize.params import QParams
from vpuc.compiler.quantize.plan import QuantPlan
from vpuc.compiler.quantize.transforms import absorb_bias, adaround, equalize, smoothquant

PREPASS_SAMPLES = 8  # SmoothQuant's per-channel maxima come from the first samples
# One build (one_build.py) for calibration and the accuracy report where no rewrite needs the
# float module apart; False: the float reference and the switchable module built each (the
# path before it, kept for tests/quantize/test_one_build.py and measurements)
ONE_BUILD = True


@dataclass
class Prepared:
    mod: tvm.IRModule  # the rewritten float module (what gets realised)
    plan: QuantPlan
    reference: Observer  # built on the equalised module (or one_build.Bound, all float)
    derived: dict[str, Derived]
    stats: dict[str, TensorStats]
    means: dict[str, np.ndarray]  # bias correction: per-channel input means
    rounded: dict[str, tuple[np.ndarray, QParams]]  # adaptive rounding: core -> weights
    ranges: dict[str, tuple[float, float]]  # method choice: tensor -> range
    blocked: dict[str, str] = field(default_factory=dict)  # bindings the rewrites keep on the CPU
    report: dict = field(default_factory=dict)  # per method: what it did and its seconds
    shared: OneBuild | None = None  # the build `reference` runs, when it serves measure.py too

    def params(self, plan: QuantPlan, method: str, percentile: float) -> dict[str, QParams]:
        return choose_params(plan, self.stats, method, percentile, self.ranges)

    def read(self):
        return reader(self.derived)


def prepare(
    mod: tvm.IRModule,
    plan: QuantPlan,
    calib: CalibrationData,
    options: QuantOptions,
    method: str,
    percentile: float,
    bias_correction: bool,
    llvm: str,
) -> Prepared:
    report: dict = {}
    start = time.perf_counter()
    if options.equalize:
        equalized = equalize.equalize(mod)
        mod = equalized.mod
        report["equalize"] = {**equalized.summary(), "seconds": _since(start)}
    watched = _watched(plan)
    start = time.perf_counter()
    one_build = ONE_BUILD and not _may_rewrite(mod, plan, options)
    shared = OneBuild(mod, plan, watched, llvm) if one_build else None
    reference = shared.float_view() if shared is not None else Observer(mod, watched, llvm)
    report["reference_build_seconds"] = _since(start)
    mod, plan, derived, blocked = _rewrite(mod, plan, reference, calib, options, report)
    start = time.perf_counter()
    mean_axes = channel_mean_axes(mod["main"], plan) if bias_correction else {}
    layer_inputs = adaround.LayerInputs(mod, plan) if options.adaround else None
    chooser = method_choice.Chooser(mod, plan, percentile) if method == "auto" else None
    read = reader(derived)
    hooks = (layer_inputs.observe,) if layer_inputs is not None else ()
    stats, means = collect_stats(reference, _watched(plan), calib, mean_axes, read, hooks)
    report["calibration_seconds"] = _since(start)
    ranges: dict[str, tuple[float, float]] = {}
    if chooser is not None:
        start = time.perf_counter()
        ranges = chooser.choose(stats, reference, calib, read)
        report["auto"] = {**chooser.summary(), "seconds": _since(start)}
    rounded: dict = {}
    if layer_inputs is not None:
        start = time.perf_counter()
        params = choose_params(plan, stats, "percentile" if method == "auto" else method, percentile, ranges)
        rounding = adaround.adaround(mod, plan, layer_inputs, params, options.adaround_budget_s)
        rounded = rounding.weights
        report["adaround"] = {**rounding.summary(), "seconds": _since(start)}
    return Prepared(mod, plan, reference, derived, stats, means, rounded, ranges, blocked, report, shared)


def _may_rewrite(mod: tvm.IRModule, plan: QuantPlan, options: QuantOptions) -> bool:
    """Whether SmoothQuant or bias absorption has candidates (_rewrite)."""
    smooth = options.smoothquant and smoothquant.candidates(mod["main"], plan)
    return bool(smooth or (options.absorb_bias and absorb_bias.candidates(mod["main"], plan)))


def _rewrite(mod, plan: QuantPlan, reference: Observer, calib, options: QuantOptions, report: dict):
    """SmoothQuant and bias absorption: one pre-pass for their statistics, then the rewrites."""
    smooth = smoothquant.candidates(mod["main"], plan) if options.smoothquant else []
    absorb = absorb_bias.candidates(mod["main"], plan) if options.absorb_bias else []
    derived: dict[str, Derived] = {}
    blocked: dict[str, str] = {}
    if not smooth and not absorb:
        return mod, plan, derived, blocked
    start = time.perf_counter()
    absmax = {c.tensor: np.zeros(c.channels, np.float32) for c in smooth}
    minimum = {c.relu: None for c in absorb}
    subset = calib if absorb else calib.subset(range(0, min(calib.count, PREPASS_SAMPLES)), calib.source)
    rows: dict[str, list[np.ndarray]] = {c.tensor: [] for c in smooth}
    rng = np.random.default_rng(0)
    for index, (_, values) in enumerate(reference.over(subset)):
        for c in smooth:
            value = values[c.tensor]
            absmax[c.tensor] = np.maximum(absmax[c.tensor], smoothquant.channel_absmax(value, c.channels))
            if index < PREPASS_SAMPLES:
                flat = value.reshape(-1, c.channels)
                rows[c.tensor].append(flat[rng.permutation(len(flat))[: smoothquant.ROWS_PER_SAMPLE]])
        for c in absorb:
            minimum[c.relu] = absorb_bias.channel_min(values[c.relu], c.axis, minimum[c.relu])
    if absorb:
        absorbed = absorb_bias.absorb(mod, absorb, minimum)
        mod, derived = absorbed.mod, {**derived, **absorbed.derived}
        report["absorb_bias"] = {**absorbed.summary(), "seconds": _since(start)}
        start = time.perf_counter()
    if smooth:
        alphas = options.smoothquant_alpha
        if alphas is None:
            stacked = {t: np.concatenate(r) for t, r in rows.items()}
            alphas = smoothquant.choose_alphas(mod, smooth, absmax, stacked)
            smooth = [c for c in smooth if alphas[c.tensor] is not None]
        if smooth:
            smoothed = smoothquant.smooth(mod, plan, smooth, absmax, alphas)
            mod, plan = smoothed.mod, smoothed.plan
            derived, blocked = {**derived, **smoothed.derived}, smoothed.blocked
        chosen = alphas if isinstance(alphas, dict) else {c.tensor: alphas for c in smooth}
        report["smoothquant"] = {"alpha": chosen, "seconds": _since(start)}
    return mod, plan, derived, blocked


def _watched(plan: QuantPlan) -> list[str]:
    """Every composite input and root: what calibration, the floor's re-plans and the
    rewrites' statistics read from the reference module."""
    return list(dict.fromkeys(n for c in plan.composites for n in (*c.inputs, c.root)))


def _since(start: float) -> float:
    return round(time.perf_counter() - start, 4)
