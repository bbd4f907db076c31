"""One composite function of a VPU subgraph, read into plain data: which of its bindings
dequantize an input or a constant, which op is its core, its bias, its activation and the
quantisation of its result.

The partitioner's pattern table (compiler/partition/patterns.py) decides what a composite
may contain: [dq] -> core(x, [dq] W) -> [+ bias] -> [relu | clip] -> [q], or a plain op
between dequantize and quantize. extract.py turns a ParsedComposite into VPU ops.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax

from vpuc.compiler import compat
from vpuc.compiler.lower.errors import LowerError
from vpuc.compiler.lower.ops import QParams


@dataclass(frozen=True)
class Dequantized:
    """A dequantize of a composite parameter (`param` index) or of a constant (`array`)."""

    param: int | None
    array: np.ndarray | None
    scale: np.ndarray  # float32, scalar or per channel
    zero_point: np.ndarray  # int, scalar or per channel
    axis: int

    @property
    def q(self) -> QParams:
        if self.scale.size != 1 or self.zero_point.size != 1:
            raise LowerError("a per-channel quantised activation (only weights may be per channel)")
        return QParams(float(self.scale.reshape(-1)[0]), int(self.zero_point.reshape(-1)[0]))


@dataclass
class ParsedComposite:
    """The pieces of one composite; `calls` are its non-Q/DQ op calls in binding order."""

    pattern: str  # the Composite attribute, e.g. "vpu.conv2d_bias_act_q"
    members: tuple[str, ...]  # the "vars" attribute: binding names of the partitioned module
    params: list[relax.Var]
    values: dict[relax.Var, relax.Expr]  # binding var -> value
    dequantized: dict[relax.Var, Dequantized] = field(default_factory=dict)
    calls: list[tuple[relax.Var, relax.Call]] = field(default_factory=list)
    output_q: QParams | None = None
    output_var: relax.Var | None = None

    @property
    def kind(self) -> str:
        """The core kind: "conv2d" of "vpu.conv2d_bias_act_q"."""
        name = self.pattern.removeprefix("vpu.")
        for suffix in ("_q", "_act", "_bias"):
            name = name.removesuffix(suffix)
        return name

    def source(self, expr: relax.Expr) -> Dequantized | np.ndarray | relax.Var | None:
        """What an argument is: a dequantized input/constant, a float constant, or an
        intermediate var of this composite."""
        if isinstance(expr, relax.Var) and expr in self.dequantized:
            return self.dequantized[expr]
        array = compat.constant_array(expr)
        if array is not None:
            return array
        return expr if isinstance(expr, relax.Var) else None


def parse_composite(func: relax.Function) -> ParsedComposite:
    """Read a composite function (its "Composite" and "vars" attributes, its bindings)."""
    attrs = func.attrs
    members = tuple(str(attrs["vars"]).split(",")) if attrs is not None and "vars" in attrs else ()
    parsed = ParsedComposite(str(attrs["Composite"]), members, list(func.params), {})
    param_index = {p: i for i, p in enumerate(func.params)}
    for binding in _bindings(func):
        var, value = binding.var, binding.value
        parsed.values[var] = value
        name = compat_op_name(value)
        if name == "relax.dequantize":
            parsed.dequantized[var] = _dequantized(value, param_index)
        elif name == "relax.quantize":
            parsed.output_q = _quantize_params(value)
            parsed.output_var = var
        elif isinstance(value, relax.Call):
            parsed.calls.append((var, value))
    if parsed.output_q is None:
        raise LowerError(f"composite {parsed.pattern} is not quantised (no quantize at its end)")
    return parsed


def compat_op_name(expr: relax.Expr) -> str | None:
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
        return expr.op.name
    return None


def _bindings(func: relax.Function) -> list[relax.Binding]:
    body = func.body
    if not isinstance(body, relax.SeqExpr):
        return []
    return [b for block in body.blocks for b in block.bindings]


def _dequantized(call: relax.Call, param_index: dict) -> Dequantized:
    source, scale, zero_point = call.args[0], call.args[1], call.args[2]
    axis = int(call.attrs.axis)
    scale_array, zp_array = compat.constant_array(scale), compat.constant_array(zero_point)
    if scale_array is None or zp_array is None:
        raise LowerError("a dequantize whose scale or zero point is not a constant")
    array = compat.constant_array(source)
    param = param_index.get(source) if isinstance(source, relax.Var) else None
    if array is None and param is None:
        raise LowerError("a dequantize of an intermediate value inside a composite")
    return Dequantized(
        param, array, np.asarray(scale_array, np.float32), np.asarray(zp_array, np.int64), axis
    )


def _quantize_params(call: relax.Call) -> QParams:
    scale, zero_point = compat.constant_array(call.args[1]), compat.constant_array(call.args[2])
    if scale is None or zero_point is None or scale.size != 1 or zero_point.size != 1:
        raise LowerError("an output quantised per channel (the VPU's activations are per tensor)")
    if str(call.attrs.out_dtype) != "int8":
        raise LowerError(f"an output quantised to {call.attrs.out_dtype} (the VPU's are int8)")
    return QParams(float(scale.reshape(-1)[0]), int(zero_point.reshape(-1)[0]))
