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
from vpuc.compiler.quantize.bindings import DEQUANTIZE, QUANTIZE, BindingView
from vpuc.compiler.quantize.errors import QDQError
from vpuc.compiler.quantize.params import QParams

QDQ_OPS = (QUANTIZE, DEQUANTIZE)
ZERO_POINT_DTYPES = ("int8", "uint8", "int32")


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


def param_problem(
    scale: np.ndarray | None, zero: np.ndarray | None, axis: int, input_shape: tuple[int, ...] | None
) -> str | None:
    """What is wrong with one node's parameters, or None (see the module docstring)."""
    if scale is None or zero is None:
        return "scale and zero point must be constants (initializers)"
    if scale.ndim > 1:
        shape = list(scale.shape)
        return f"scale has shape {shape}: only per-tensor and per-axis (1-D) parameters are supported"
    flat = scale.reshape(-1).astype(np.float64)
    bad = flat[~(np.isfinite(flat) & (flat > 0))]
    if bad.size:
        return f"scale must be positive and finite (got {bad[0]:g})"
    if zero.size != scale.size and zero.size != 1:
        return f"zero point has {zero.size} values but scale has {scale.size}"
    if str(zero.dtype) not in ZERO_POINT_DTYPES:
        return f"zero point is {zero.dtype}; int8, uint8 or int32 expected"
    if scale.size == 1 or input_shape is None:
        return None
    return _axis_problem(scale.size, axis, tuple(input_shape))


def _axis_problem(channels: int, axis: int, shape: tuple[int, ...]) -> str | None:
    if not -len(shape) <= axis < len(shape):
        return f"axis {axis} is out of range for an input of rank {len(shape)}"
    if shape[axis] == channels:
        return None
    matching = [i for i, d in enumerate(shape) if d == channels]
    hint = f"; axis {matching[0]} has {channels}" if matching else ""
    return (
        f"per-axis parameters have {channels} values but axis {axis} of the input {list(shape)} "
        f"has {shape[axis]}{hint}"
    )
