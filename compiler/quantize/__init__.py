"""The quantiser: between the graph passes and the partitioner (DESIGN.md, Numerics).

    optimised float module --calibrate--> QDQ module: the VPU's ops int8, the rest float
    QDQ input model        --cleanup----> the same parameters, canonical QDQ form

Entry points:
    quantize_for_compile(mod, target, onnx_model, provenance, input_specs, calib_path=..., ...)
                                                   what the compile driver calls (api.py)
    quantize(mod, target, onnx_model, provenance, calib, method, percentile, held_out)
                                                   float module -> QuantizeResult (ptq.py)
    quantize_qdq(mod, provenance, held_out, output_names)   QDQ module -> QuantizeResult
    load_calibration(path, input_specs), synthetic_calibration(input_specs, n, seed)
    check_qdq_onnx(onnx_model)                     QDQ parameter check before the import

Files, in pipeline order: data (samples), options (QuantOptions), plan + layers (which
composites; --keep-float), prepare (the stages before realisation: equalize, observe,
smoothquant + absorb_bias, calibrate with histogram + ranges + method_choice, adaround;
derived reads the tensors the rewrites change), params (scales, zero points, int8/int32
constants), realize (the QDQ insertion pass), measure (switch: one switchable build;
accuracy + metrics; floor: sensitivity and the accuracy floor); for QDQ inputs qdq_onnx,
qdq_params, qdq_uint8, qdq_constants, qdq_pairs, qdq_strip, qdq_model.
docs/quantization.md describes methods, data, numerics and accuracy figures.
"""

from vpuc.compiler.frontend.qdq_check import check_qdq_onnx, is_qdq_onnx
from vpuc.compiler.quantize.api import check_options, quantize_for_compile
from vpuc.compiler.quantize.calibration.data import (
    CalibrationData,
    load_calibration,
    split_file_samples,
    synthetic_calibration,
    synthetic_split,
)
from vpuc.compiler.quantize.calibration.ranges import DEFAULT_METHOD, DEFAULT_PERCENTILE, METHODS
from vpuc.compiler.quantize.errors import CalibrationError, QDQError
from vpuc.compiler.quantize.measurement.measure import AccuracyFloorError
from vpuc.compiler.quantize.measurement.report import accuracy_tables
from vpuc.compiler.quantize.options import DEFAULT_MIN_SQNR_DB, QuantOptions
from vpuc.compiler.quantize.params import QParams
from vpuc.compiler.quantize.ptq import QuantizeResult, onnx_provenance, quantize
from vpuc.compiler.quantize.qdq.model import clean_qdq, is_qdq_module, quantize_qdq

__all__ = [
    "DEFAULT_MIN_SQNR_DB",
    "AccuracyFloorError",
    "QuantOptions",
    "DEFAULT_METHOD",
    "DEFAULT_PERCENTILE",
    "METHODS",
    "CalibrationData",
    "CalibrationError",
    "QDQError",
    "QParams",
    "QuantizeResult",
    "accuracy_tables",
    "check_options",
    "check_qdq_onnx",
    "clean_qdq",
    "is_qdq_module",
    "is_qdq_onnx",
    "load_calibration",
    "onnx_provenance",
    "quantize",
    "quantize_for_compile",
    "quantize_qdq",
    "split_file_samples",
    "synthetic_calibration",
    "synthetic_split",
]
