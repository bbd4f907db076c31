"""The quantiser's entry point for the compile driver: options and data in, QDQ module out.

    optimised module (float or QDQ) + --calib / --calib-synthetic / --calib-method /
    --percentile + QuantOptions (the other methods, --keep-float, --min-sqnr)
    ->  QuantizeResult(mod, accuracy, provenance, warnings, kept_float, ...)

A float model is calibrated and quantised (ptq.py); a model that already has Q/DQ keeps its
parameters and is only cleaned up and measured (qdq_model.py). Without --calib or
--calib-synthetic the float path calibrates on DEFAULT_SYNTHETIC_SAMPLES synthetic samples,
with a warning. Every bad option or sample is a CompileError (the CLI exits 2).
"""

from __future__ import annotations

from pathlib import Path

import onnx
import tvm

from vpuc.compiler.errors import CompileError
from vpuc.compiler.frontend.qdq_check import check_qdq_onnx
from vpuc.compiler.frontend.shapes import TensorSpec
from vpuc.compiler.quantize.calibration.data import (
    DEFAULT_SYNTHETIC_SAMPLES,
    SplitData,
    check_fits_in_memory,
    check_outputs_fit_in_memory,
    load_calibration,
    split_file_samples,
    synthetic_calibration,
    synthetic_held_out_count,
    synthetic_split,
)
from vpuc.compiler.quantize.calibration.ranges import DEFAULT_METHOD, DEFAULT_PERCENTILE, METHODS
from vpuc.compiler.quantize.options import QuantOptions
from vpuc.compiler.quantize.ptq import QuantizeResult, onnx_provenance, quantize
from vpuc.compiler.quantize.qdq.model import is_qdq_module, quantize_qdq
from vpuc.targets import Target


def quantize_for_compile(
    mod: tvm.IRModule,
    target: Target,
    onnx_model: onnx.ModelProto,
    provenance: dict[str, list[str]],
    input_specs: list[TensorSpec],
    calib_path: str | Path | None = None,
    calib_synthetic: int | None = None,
    method: str = DEFAULT_METHOD,
    percentile: float = DEFAULT_PERCENTILE,
    seed: int = 0,
    profitability: bool = True,
    min_subgraph_ops: int = 1,
    bias_correction: bool = True,
    options: QuantOptions | None = None,
    held_out: int | None = None,
    measure: bool = True,
) -> QuantizeResult:
    """Quantise (or, for a QDQ model, clean up) `mod` for a VPU target; see the module docstring.
    `held_out` (--held-out) is how many samples measure accuracy (default: data.py's rule).
    `measure=False` skips a QDQ model's accuracy measurement (`vpuc partition`: its placement
    does not depend on it); a float model is calibrated and measured whatever it says, since
    the accuracy floor and the calibrated scales decide its placement."""
    if not target.has_vpu:
        raise ValueError(
            f"target '{target.name}' has no VPU: nothing to quantise (call only for VPU targets)"
        )
    options = options or QuantOptions()
    check_options(calib_path, calib_synthetic, method, percentile, options, held_out)
    provenance = onnx_provenance(provenance, onnx_model)
    if is_qdq_module(mod):
        check_qdq_onnx(onnx_model)  # errors in ONNX node names (the driver should call it before import)
        output_names = [o.name for o in onnx_model.graph.output]
        if not measure:
            return quantize_qdq(mod, provenance, None, output_names, target.host.llvm, onnx_model)
        samples, warnings = _qdq_samples(input_specs, calib_path, calib_synthetic, seed, onnx_model, held_out)
        result = quantize_qdq(mod, provenance, samples, output_names, target.host.llvm, onnx_model)
        result.warnings.extend(warnings)
        result.warnings.extend(_qdq_floor_warning(result.accuracy, options))
        return result
    split = _split(input_specs, calib_path, calib_synthetic, seed, onnx_model, held_out)
    result = quantize(
        mod, target, onnx_model, provenance, split.calibration, method, percentile,
        split.held_out, profitability, min_subgraph_ops, bias_correction, options,
    )  # fmt: skip
    result.warnings[:0] = list(split.warnings)
    return result


def check_options(
    calib_path,
    calib_synthetic: int | None,
    method: str,
    percentile: float,
    options: QuantOptions | None = None,
    held_out: int | None = None,
) -> None:
    if calib_path is not None and calib_synthetic is not None:
        raise CompileError("--calib and --calib-synthetic exclude each other: give one")
    if calib_synthetic is not None and calib_synthetic < 1:
        raise CompileError(f"--calib-synthetic {calib_synthetic}: need at least 1 sample")
    if held_out is not None and held_out < 1:
        raise CompileError(f"--held-out {held_out}: need at least 1 sample")
    if method not in METHODS:
        raise CompileError(f"--calib-method '{method}': known methods are {', '.join(METHODS)}")
    if not 0.0 < percentile <= 100.0:
        raise CompileError(f"--percentile {percentile:g}: must be in (0, 100]")
    options = options or QuantOptions()
    if options.smoothquant_alpha is not None and not 0.0 < options.smoothquant_alpha < 1.0:
        raise CompileError(f"--smoothquant-alpha {options.smoothquant_alpha:g}: must be in (0, 1)")
    if not options.adaround_budget_s > 0.0:
        raise CompileError(f"--adaround-budget {options.adaround_budget_s:g}: must be more than 0 seconds")
    if options.min_sqnr_db is not None and not -50.0 <= options.min_sqnr_db <= 150.0:
        raise CompileError(f"--min-sqnr {options.min_sqnr_db:g}: must be between -50 and 150 dB (or 'off')")


def _qdq_floor_warning(accuracy: dict, options: QuantOptions) -> list[str]:
    """A QDQ model keeps its own quantisation: below the floor is a warning, not an error."""
    if options.min_sqnr_db is None or not accuracy.get("outputs"):
        return []
    figure = min(o["sqnr_db"] for o in accuracy["outputs"])
    if figure >= options.min_sqnr_db:
        return []
    return [
        f"the QDQ model's output SQNR {figure:.1f} dB (its int8 model against the same graph "
        f"without rounding) is below --min-sqnr {options.min_sqnr_db:g}: vpuc keeps a QDQ "
        "model's own quantisation and keeps no layer in float for it"
    ]


def _split(
    specs: list[TensorSpec], calib_path, calib_synthetic: int | None, seed: int, onnx_model, held: int | None
) -> SplitData:
    if calib_path is not None:
        return split_file_samples(load_calibration(calib_path, specs), held)
    return synthetic_split(specs, calib_synthetic or DEFAULT_SYNTHETIC_SAMPLES, seed, onnx_model, held)


def _qdq_samples(specs, calib_path, calib_synthetic: int | None, seed: int, onnx_model, held: int | None):
    """A QDQ model needs no calibration: every given sample measures accuracy (the last
    `held` of a file's with --held-out)."""
    if calib_path is not None:
        data = load_calibration(calib_path, specs)
        if held is not None and held < data.count:
            data = data.subset(range(data.count - held, data.count), f"{data.source} [{data.count - held}:]")
        return data, []
    count = synthetic_held_out_count(calib_synthetic or DEFAULT_SYNTHETIC_SAMPLES, held)
    what = (
        f"--held-out {count}" if held is not None
        else f"--calib-synthetic {calib_synthetic}" if calib_synthetic is not None
        else f"{count} samples"
    )  # fmt: skip
    check_fits_in_memory(specs, count, what)
    check_outputs_fit_in_memory(onnx_model, count, what)
    data = synthetic_calibration(specs, count, seed, stream=1, onnx_model=onnx_model)
    warning = (
        f"measuring the QDQ model's accuracy on synthetic data ({data.source}): "
        "give --calib X.npz for figures that mean something"
    )
    return data, [warning]


__all__ = ["DEFAULT_METHOD", "DEFAULT_PERCENTILE", "quantize_for_compile"]
