"""Lookup tables for unary activations: the composite's float computation evaluated on all
256 int8 inputs, then quantised to the output.

    table[x + 128] = clamp(rne(f(s_x * (x - z_x)) / s_y) + z_y, -128, 127)

`f` is whatever the composite computes between its dequantize and its quantize (sigmoid,
tanh, leaky relu, GELU, SiLU, or the chains of multiply/add/clip that hard-sigmoid and
hard-swish import as), evaluated here in float64 on the float32 inputs, as the QDQ
reference evaluates it in float32: the two agree to within one output step.
"""

from __future__ import annotations

import math

import numpy as np
from tvm import relax

from vpuc.compiler import compat
from vpuc.compiler.lower.errors import LowerError
from vpuc.compiler.lower.ops import QParams
from vpuc.compiler.lower.reader.composite import ParsedComposite, compat_op_name

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


UNARY = {
    "relax.sigmoid": lambda x, call: 1.0 / (1.0 + np.exp(-x)),
    "relax.tanh": lambda x, call: np.tanh(x),
    "relax.exp": lambda x, call: np.exp(x),
    "relax.erf": lambda x, call: _erf(x),
    "relax.nn.relu": lambda x, call: np.maximum(x, 0.0),
    "relax.nn.silu": lambda x, call: x / (1.0 + np.exp(-x)),
    "relax.nn.gelu": lambda x, call: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "relax.nn.gelu_tanh": lambda x, call: _gelu_tanh(x),
    "relax.nn.leakyrelu": lambda x, call: np.where(x >= 0, x, float(call.attrs.alpha) * x),
    "relax.negative": lambda x, call: -x,
}
BINARY = {
    "relax.add": np.add,
    "relax.subtract": np.subtract,
    "relax.multiply": np.multiply,
    "relax.divide": np.divide,
    "relax.maximum": np.maximum,
    "relax.minimum": np.minimum,
}


def unary_table(parsed: ParsedComposite, input_var: relax.Var, x_q: QParams, y_q: QParams) -> np.ndarray:
    """The 256 int8 outputs of the composite for x = -128..127."""
    codes = np.arange(-128, 128, dtype=np.int32)
    x = (np.float32(x_q.scale) * (codes - x_q.zero_point).astype(np.float32)).astype(np.float64)
    values: dict[relax.Var, np.ndarray] = {input_var: x}
    for var, call in parsed.calls:
        values[var] = _evaluate(call, values, parsed)
    result = values.get(_last_value(parsed))
    if result is None:
        raise LowerError("a lookup-table activation whose result is not computed from its input")
    scaled = np.rint(result.astype(np.float32) / np.float32(y_q.scale))
    return np.clip(scaled + y_q.zero_point, -128, 127).astype(np.int8)


def _last_value(parsed: ParsedComposite) -> relax.Var | None:
    quantized = parsed.values[parsed.output_var]
    source = quantized.args[0]
    return source if isinstance(source, relax.Var) else None


def _operand(expr, values: dict, parsed: ParsedComposite) -> np.ndarray:
    if isinstance(expr, relax.Var) and expr in values:
        return values[expr]
    array = compat.constant_array(expr)
    if array is None:
        scalar = compat.scalar_value(expr)
        if scalar is None:
            raise LowerError(f"a lookup-table activation reading {type(expr).__name__}")
        return np.float64(scalar)
    if array.size != 1:
        raise LowerError("a lookup-table activation with a non-scalar constant")
    return np.float64(array.reshape(-1)[0])


def _evaluate(call: relax.Call, values: dict, parsed: ParsedComposite) -> np.ndarray:
    name = compat_op_name(call)
    if name in UNARY:
        return UNARY[name](_operand(call.args[0], values, parsed), call)
    if name in BINARY:
        a, b = (_operand(arg, values, parsed) for arg in call.args[:2])
        return BINARY[name](a, b)
    if name == "relax.clip":
        x = _operand(call.args[0], values, parsed)
        low, high = compat.scalar_value(call.args[1]), compat.scalar_value(call.args[2])
        return np.clip(x, -math.inf if low is None else low, math.inf if high is None else high)
    if name in ("relax.astype", "relax.reshape"):
        return _operand(call.args[0], values, parsed)
    raise LowerError(f"no lookup-table evaluation for {name}")
