"""Softmax's integer parameters: the exp table, the output multiplier and the error bound
(docs/softmax.md), read from a `vpu.softmax` composite (dequantize -> softmax -> quantize).

    table[j]   = round(2^T exp(s_x (j - 255)))   j = 0..255, the exps of x - max = -255..0
    T          = 30 - floor(log2(depth))         so that depth * 2^T < 2^31 (an int32 sum)
    1 / s_y    = multiplier * 2^(30 - shift)      multiplier in [2^30, 2^31)
    bound      = (1 / s_y) ((1 + depth) / 2^(T+1) + 2^-29)   LSB, before the final rounding

The VPU's output is within 0.5 + bound LSB of the exact softmax; onnxruntime's float32
softmax is within 0.5 + (its own float32 error) of it, so the two differ by at most 1 LSB
while bound + that error stays below 1. The lowering refuses a layer whose bound passes
MAX_ERROR_BOUND_LSB, which leaves ample room for onnxruntime's float32 error.
"""

from __future__ import annotations

import math

import numpy as np

from vpuc.compiler.lower import ops
from vpuc.compiler.lower.errors import LowerError
from vpuc.compiler.lower.ops import QParams
from vpuc.compiler.lower.reader.composite import ParsedComposite, compat_op_name

MAX_ERROR_BOUND_LSB = 0.5
MAX_DEPTH = 65535  # the instruction's 16-bit depth field


def exp_bits(depth: int) -> int:
    """T: the table's fixed-point bits, the most that keep depth * 2^T below 2^31."""
    return 30 - int(math.floor(math.log2(depth)))


def exp_table(scale: float, depth: int) -> np.ndarray:
    """The 256 int32 entries round(2^T exp(s_x (j - 255))) for j = 0..255."""
    diffs = np.arange(-255, 1, dtype=np.float64)
    values = np.rint(np.exp(float(np.float32(scale)) * diffs) * 2.0 ** exp_bits(depth))
    return values.astype(np.int32)


def output_multiplier(scale: float) -> tuple[int, int]:
    """(multiplier, shift) with multiplier / 2^shift = (1 / s_y) / 2^30, multiplier in
    [2^30, 2^31); LowerError when the shift leaves 1..63."""
    mantissa, exponent = math.frexp(1.0 / float(np.float32(scale)))
    multiplier = round(mantissa * 2.0**31)
    if multiplier == 1 << 31:
        multiplier, exponent = multiplier // 2, exponent + 1
    shift = 61 - exponent
    if not 1 <= shift <= 63:
        raise LowerError(f"a softmax output scale of {scale:g} (the output shift {shift} is outside 1..63)")
    return multiplier, shift


def error_bound_lsb(out_scale: float, depth: int) -> float:
    """The bound of docs/softmax.md, in output LSB, before the final rounding."""
    inverse = 1.0 / float(np.float32(out_scale))
    return inverse * ((1 + depth) / 2.0 ** (exp_bits(depth) + 1) + 2.0**-29)


def lower_softmax(builder, parsed: ParsedComposite, args, out, name, nodes) -> None:
    call = next((c for _, c in parsed.calls if compat_op_name(c) == "relax.nn.softmax"), None)
    if call is None:
        raise LowerError("no softmax in the composite")
    source = parsed.source(call.args[0])
    if getattr(source, "param", None) is None:
        raise LowerError("a softmax whose input is not a dequantized activation")
    x, x_q = args[source.param], source.q
    shape = builder.tensors[out].shape
    rank = max(len(shape), 1)
    if int(call.attrs.axis) % rank != rank - 1:
        raise LowerError(f"a softmax over axis {int(call.attrs.axis)} (the innermost is needed)")
    depth = int(shape[-1]) if shape else 1
    y_q: QParams = parsed.output_q
    bound = error_bound_lsb(y_q.scale, depth)
    if depth > MAX_DEPTH or bound > MAX_ERROR_BOUND_LSB:
        raise LowerError(
            f"a softmax over {depth} elements into scale {y_q.scale:g}: its error bound "
            f"{bound:.2f} LSB exceeds {MAX_ERROR_BOUND_LSB} (docs/softmax.md)"
        )
    multiplier, shift = output_multiplier(y_q.scale)
    builder.ops.append(
        ops.Softmax(
            name,
            nodes,
            (x,),
            out,
            (x_q,),
            y_q,
            table=exp_table(x_q.scale, depth),
            multiplier=multiplier,
            shift=shift,
            error_bound_lsb=bound,
        )
    )
