"""Reading the parameters of quantize/dequantize calls, and checking them (QDQ input models).

A QDQ model (onnxruntime's quantiser, a PyTorch or tf2onnx export) brings its own scales and
zero points; the VPU honours them, so before anything else they must make sense:

    scale       a constant, finite and > 0 everywhere, a scalar or one value per channel
    zero point  a constant of the same shape (int8, uint8, or int32 for a bias)
    per-axis    `axis` names a dim of the input whose size is the number of values

A violation is a QDQError naming the ONNX node (via the provenance) and what was found.
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from vpuc.compiler import compat
from vpuc.compiler.frontend.qdq_check import param_problem
from vpuc.compiler.quantize.bindings import DEQUANTIZE, QUANTIZE, BindingView
from vpuc.compiler.quantize.errors import QDQError
from vpuc.compiler.quantize.params import QParams

QDQ_OPS = (QUANTIZE, DEQUANTIZE)


def call_params(call: relax.Call) -> QParams | None:
    """The QParams of a quantize/dequantize call with constant parameters, else None."""
    scale, zero = compat.constant_array(call.args[1]), compat.constant_array(call.args[2])
    if scale is None or zero is None:
        return None
    dtype = str(call.attrs.out_dtype) if _op(call) == QUANTIZE else str(zero.dtype)
    return QParams(scale.astype(np.float32), zero, int(call.attrs.axis), dtype)


def _op(call) -> str:
    return call.op.name


def node_label(name: str, provenance: dict[str, list[str]]) -> str:
    labels = provenance.get(name)
    return labels[-1] if labels else name


def validate_qdq(mod, provenance: dict[str, list[str]]) -> None:
    """Raise QDQError for the first quantize/dequantize whose parameters are unusable."""
    view = BindingView.of(mod["main"])
    for name, value in view.values.items():
        if view.op(name) in QDQ_OPS and not is_dynamic(value, view):
            problem = _problem(value)
            if problem:
                kind = "QuantizeLinear" if view.op(name) == QUANTIZE else "DequantizeLinear"
                raise QDQError(f"{kind} node '{node_label(name, provenance)}': {problem}")


def is_dynamic(call: relax.Call, view: BindingView) -> bool:
    """A quantize/dequantize whose scale is computed at run time (DynamicQuantizeLinear):
    a host computation of a dynamically quantised model, not a parameter of the VPU's."""
    return isinstance(call.args[1], relax.Var) and view.constant(call.args[1]) is None


def _problem(call: relax.Call) -> str | None:
    scale, zero = compat.constant_array(call.args[1]), compat.constant_array(call.args[2])
    found = compat.tensor_type(call.args[0])
    return param_problem(scale, zero, int(call.attrs.axis), found[0] if found else None)
