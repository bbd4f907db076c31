"""One op (or two) of the VPU op list per composite: each lowering reads a parsed composite
(composite.py) and appends ops.py ops to extract.py's builder, with the int8 parameters,
requantisation and constants the ISA needs.

    LOWERINGS[kind](builder, parsed, args, out, name, nodes)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from tvm import relax

from vpuc.compiler import compat
from vpuc.compiler.lower import ops
from vpuc.compiler.lower.errors import LowerError
from vpuc.compiler.lower.ops import QParams, Requantize
from vpuc.compiler.lower.reader.composite import Dequantized, ParsedComposite, compat_op_name
from vpuc.compiler.lower.reader.lut import unary_table
from vpuc.compiler.lower.reader.softmax import lower_softmax
from vpuc.targets.isa.params import requant_multiplier

ACTIVATIONS = ("relax.nn.relu", "relax.clip")


def core_var(parsed: ParsedComposite) -> relax.Var | None:
    for var, call in parsed.calls:
        if compat_op_name(call) not in ("relax.add", *ACTIVATIONS) or parsed.kind in ("add", "relu", "clip"):
            return var
    return parsed.calls[0][0] if parsed.calls else None


def _core(parsed: ParsedComposite, *op_names: str) -> tuple[relax.Var, relax.Call]:
    for var, call in parsed.calls:
        if compat_op_name(call) in op_names:
            return var, call
    raise LowerError(f"no {' or '.join(op_names)} in the composite")


def _input(parsed: ParsedComposite, expr, args: list[str]) -> tuple[str, QParams]:
    source = parsed.source(expr)
    if not isinstance(source, Dequantized) or source.param is None:
        raise LowerError("an input that is not a dequantized activation")
    return args[source.param], source.q


def _operand(builder, parsed, expr, args, name: str) -> tuple[str, QParams]:
    """An activation input, or a dequantized constant turned into a subgraph constant."""
    source = parsed.source(expr)
    if isinstance(source, Dequantized) and source.array is not None:
        if source.array.dtype != np.int8:
            raise LowerError(f"a constant operand of type {source.array.dtype} (int8 needed)")
        return builder.add_constant(f"{name}.const", source.array, source.q), source.q
    return _input(parsed, expr, args)


# --- MAC ops -------------------------------------------------------------------------------


def _epilogue(parsed: ParsedComposite, core: relax.Var) -> tuple[np.ndarray | None, tuple[int, int]]:
    """The bias (real values) added to `core`, and the activation's clamp in the output's
    quantised domain."""
    bias, value, clamp = None, core, (-128, 127)
    for var, call in parsed.calls:
        name = compat_op_name(call)
        if name == "relax.add" and call.args[0].same_as(value):
            source = parsed.source(call.args[1])
            bias = _real(source)
            value = var
        elif name in ACTIVATIONS and call.args[0].same_as(value):
            clamp = _activation_clamp(call, parsed.output_q)
            value = var
    return bias, clamp


def _real(source) -> np.ndarray:
    if isinstance(source, Dequantized) and source.array is not None:
        axis_shape = [1] * source.array.ndim
        scale, zp = source.scale, source.zero_point
        if scale.size > 1:
            axis_shape[source.axis] = scale.size
        return (source.array.astype(np.float64) - zp.reshape(axis_shape)) * scale.reshape(axis_shape)
    if isinstance(source, np.ndarray):
        return source.astype(np.float64)
    raise LowerError("a bias that is not a constant")


def _activation_clamp(call: relax.Call, q: QParams) -> tuple[int, int]:
    """relu -> [zp, 127]; clip(a, b) -> [zp + rne(a / s), zp + rne(b / s)] within int8."""
    if compat_op_name(call) == "relax.nn.relu":
        low, high = 0.0, None
    else:
        low, high = compat.scalar_value(call.args[1]), compat.scalar_value(call.args[2])
        if low is None or high is None:
            raise LowerError("a clip whose bounds are not constants")
    lo = -128 if low is None or low == -math.inf else _quantized(low, q)
    hi = 127 if high is None or high == math.inf else _quantized(high, q)
    lo, hi = max(-128, min(127, lo)), max(-128, min(127, hi))
    return (lo, max(lo, hi))


def _quantized(value: float, q: QParams) -> int:
    return int(np.rint(np.float32(value) / np.float32(q.scale))) + q.zero_point


def _weights(parsed: ParsedComposite, expr) -> Dequantized:
    source = parsed.source(expr)
    if not isinstance(source, Dequantized) or source.array is None:
        raise LowerError("weights that are not a dequantized constant")
    if source.array.dtype != np.int8:
        raise LowerError(f"weights of type {source.array.dtype} (int8 needed)")
    if np.any(source.zero_point != 0):
        raise LowerError("weights with a non-zero zero point (the MAC array has none)")
    return source


def _requantize(x_q: QParams, w_scale: np.ndarray, out_q: QParams, clamp, channels: int) -> Requantize:
    multipliers = requant_multiplier(x_q.scale, w_scale, out_q.scale).reshape(-1)
    if multipliers.size == 1 and channels > 1:
        multipliers = np.repeat(multipliers, channels)
    return Requantize(multipliers.astype(np.float32), out_q.zero_point, clamp)


def _bias_int32(bias: np.ndarray | None, x_q: QParams, w_scale: np.ndarray, channels: int) -> np.ndarray:
    if bias is None:
        return np.zeros(channels, np.int32)
    accumulator_scale = np.float64(x_q.scale) * np.broadcast_to(w_scale.astype(np.float64), (channels,))
    values = np.rint(bias.reshape(-1)[-channels:] / accumulator_scale)
    return np.clip(values, -(2**31), 2**31 - 1).astype(np.int32)


def _conv(builder, parsed, args, out, name, nodes) -> None:
    var, call = _core(parsed, "relax.nn.conv2d")
    attrs = call.attrs
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout or attrs.data_layout))
    if layouts != ("NHWC", "OHWI", "NHWC"):
        raise LowerError(f"a convolution in layout {'/'.join(layouts)} (the VPU takes NHWC/OHWI)")
    x, x_q = _input(parsed, call.args[0], args)
    weights = _weights(parsed, call.args[1])
    channels = weights.array.shape[0]
    bias, clamp = _epilogue(parsed, var)
    builder.ops.append(
        ops.Conv(
            name,
            nodes,
            (x,),
            out,
            (x_q,),
            parsed.output_q,
            weights=weights.array,
            bias=_bias_int32(bias, x_q, weights.scale, channels),
            requant=_requantize(x_q, weights.scale, parsed.output_q, clamp, channels),
            strides=tuple(int(v) for v in attrs.strides),
            padding=tuple(int(v) for v in attrs.padding),
            dilation=tuple(int(v) for v in attrs.dilation),
            groups=int(attrs.groups),
        )
    )


def _dense(builder, parsed, args, out, name, nodes) -> None:
    var, call = _core(parsed, "relax.matmul")
    x, x_q = _input(parsed, call.args[0], args)
    weights = _weights(parsed, call.args[1])
    if weights.array.ndim != 2:
        raise LowerError(f"dense weights of rank {weights.array.ndim} (a K x N matrix is needed)")
    if weights.scale.size > 1 and weights.axis % 2 != 1:
        raise LowerError("dense weights quantised per input channel (per output channel is needed)")
    channels = weights.array.shape[1]
    bias, clamp = _epilogue(parsed, var)
    builder.ops.append(
        ops.Dense(
            name,
            nodes,
            (x,),
            out,
            (x_q,),
            parsed.output_q,
            weights=np.ascontiguousarray(weights.array.T),
            bias=_bias_int32(bias, x_q, weights.scale, channels),
            requant=_requantize(x_q, weights.scale, parsed.output_q, clamp, channels),
        )
    )


def _matmul(builder, parsed, args, out, name, nodes) -> None:
    var, call = _core(parsed, "relax.matmul")
    a, a_q = _input(parsed, call.args[0], args)
    b, b_q = _input(parsed, call.args[1], args)
    a_shape, b_shape = builder.tensors[a].shape, builder.tensors[b].shape
    if len(a_shape) < 2 or len(b_shape) < 2 or a_shape[:-2] != b_shape[:-2]:
        raise LowerError(
            f"a matrix product of shapes {list(a_shape)} and {list(b_shape)} (equal batch dims needed)"
        )
    _, clamp = _epilogue(parsed, var)
    scale = np.float32(a_q.scale) * np.float32(b_q.scale)
    requant = _requantize(QParams(float(scale), 0), np.ones(1, np.float32), parsed.output_q, clamp, 1)
    builder.ops.append(ops.Matmul(name, nodes, (a, b), out, (a_q, b_q), parsed.output_q, requant=requant))


# --- vector ops ----------------------------------------------------------------------------


def _add(builder, parsed, args, out, name, nodes) -> None:
    var, call = _core(parsed, "relax.add")
    a, a_q = _operand(builder, parsed, call.args[0], args, name)
    b, b_q = _operand(builder, parsed, call.args[1], args, name)
    if builder.tensors[a].shape != builder.tensors[b].shape:
        raise LowerError("an add of two shapes (the VPU adds equal shapes)")
    _, clamp = _epilogue(parsed, var)
    y = parsed.output_q
    builder.ops.append(
        ops.Add(
            name,
            nodes,
            (a, b),
            out,
            (a_q, b_q),
            y,
            scale_a=float(np.float32(a_q.scale) / np.float32(y.scale)),
            scale_b=float(np.float32(b_q.scale) / np.float32(y.scale)),
            clamp=clamp,
        )
    )


def _mul(builder, parsed, args, out, name, nodes) -> None:
    var, call = _core(parsed, "relax.multiply")
    a, a_q = _operand(builder, parsed, call.args[0], args, name)
    b, b_q = _operand(builder, parsed, call.args[1], args, name)
    a_shape, b_shape = builder.tensors[a].shape, builder.tensors[b].shape
    if math.prod(a_shape) < math.prod(b_shape):
        (a, a_q, a_shape), (b, b_q, b_shape) = (b, b_q, b_shape), (a, a_q, a_shape)
    broadcast = a_shape != b_shape
    channels = a_shape[-1] if a_shape else 1
    if broadcast:
        if math.prod(b_shape) == 1 and b in builder.constants:
            b = builder.add_constant(
                f"{name}.const", np.full(channels, builder.constants[b].item(), np.int8), b_q
            )
        elif not (b_shape and b_shape[-1] == channels and math.prod(b_shape) == channels):
            raise LowerError(f"a multiply broadcasting {list(b_shape)} over {list(a_shape)} (channels only)")
    _, clamp = _epilogue(parsed, var)
    y = parsed.output_q
    scale = float(np.float32(np.float32(a_q.scale) * np.float32(b_q.scale)) / np.float32(y.scale))
    builder.ops.append(
        ops.Mul(name, nodes, (a, b), out, (a_q, b_q), y, scale=scale, broadcast=broadcast, clamp=clamp)
    )


def _pool(builder, parsed, args, out, name, nodes) -> None:
    var, call = _core(parsed, "relax.nn.max_pool2d", "relax.nn.avg_pool2d")
    attrs = call.attrs
    if str(attrs.layout) != "NHWC":
        raise LowerError(f"a pool in layout {attrs.layout} (the VPU takes NHWC)")
    if any(int(d) != 1 for d in attrs.dilation):
        raise LowerError("a dilated pool")
    x, x_q = _input(parsed, call.args[0], args)
    kernel = tuple(int(v) for v in attrs.pool_size)
    strides = tuple(int(v) for v in attrs.strides)
    padding = list(int(v) for v in attrs.padding)
    (_, h, w, _), (_, out_h, out_w, _) = builder.tensors[x].shape, builder.tensors[out].shape
    padding[2] += max(0, (out_h - 1) * strides[0] + kernel[0] - h - padding[0] - padding[2])  # ceil_mode
    padding[3] += max(0, (out_w - 1) * strides[1] + kernel[1] - w - padding[1] - padding[3])
    mode = "max" if compat_op_name(call) == "relax.nn.max_pool2d" else "avg"
    include_pad = bool(attrs.count_include_pad) and mode == "avg"
    if include_pad and bool(attrs.ceil_mode):
        raise LowerError("average pooling with ceil_mode and count_include_pad")
    _append_pool(
        builder, parsed, name, nodes, x, x_q, out, mode, kernel, strides, tuple(padding), include_pad
    )


def _global_pool(builder, parsed, args, out, name, nodes) -> None:
    var, call = _core(parsed, "relax.mean", "relax.nn.adaptive_avg_pool2d")
    x, x_q = _input(parsed, call.args[0], args)
    shape = builder.tensors[x].shape
    if compat_op_name(call) == "relax.mean":
        axes = sorted(int(a) % len(shape) for a in call.attrs.axis)
        if len(shape) != 4 or axes != [1, 2]:
            raise LowerError(
                f"a mean over axes {axes} of a rank-{len(shape)} tensor (H and W of NHWC needed)"
            )
    elif str(call.attrs.layout) != "NHWC" or [int(v) for v in call.attrs.output_size] not in ([1, 1], [1]):
        raise LowerError("an adaptive pool that is not a global average pool in NHWC")
    kernel = (shape[1], shape[2])
    _append_pool(builder, parsed, name, nodes, x, x_q, out, "avg", kernel, (1, 1), (0, 0, 0, 0), False)


def _append_pool(builder, parsed, name, nodes, x, x_q, out, mode, kernel, strides, padding, include_pad):
    y = parsed.output_q
    if mode == "max" and x_q != y:
        raise LowerError("a max pool whose output is quantised differently from its input")
    scale = float(np.float32(x_q.scale) / np.float32(y.scale))
    builder.ops.append(
        ops.Pool(
            name,
            nodes,
            (x,),
            out,
            (x_q,),
            y,
            mode=mode,
            kernel=kernel,
            strides=strides,
            padding=padding,
            count_include_pad=include_pad,
            scale=scale,
        )
    )


def _rescale_op(builder, name, nodes, x, x_q, out, y: QParams, clamp=(-128, 127)) -> None:
    multiplier = float(np.float32(x_q.scale) / np.float32(y.scale))
    builder.ops.append(ops.Rescale(name, nodes, (x,), out, (x_q,), y, multiplier=multiplier, clamp=clamp))


def _activation(builder, parsed, args, out, name, nodes) -> None:
    var, call = _core(parsed, *ACTIVATIONS)
    x, x_q = _input(parsed, call.args[0], args)
    _rescale_op(builder, name, nodes, x, x_q, out, parsed.output_q, _activation_clamp(call, parsed.output_q))


VIEW_OPS = ("relax.reshape", "relax.flatten", "relax.squeeze", "relax.expand_dims")


def _reshape(builder, parsed, args, out, name, nodes) -> None:
    var, call = _core(parsed, *VIEW_OPS)
    x, x_q = _input(parsed, call.args[0], args)
    y = parsed.output_q
    if x_q != y:
        rescaled = builder.add_tensor(f"{out}.rescaled", builder.tensors[x].shape, y)
        _rescale_op(builder, name, nodes, x, x_q, rescaled, y)
        x = rescaled
    builder.ops.append(ops.Reshape(name, nodes, (x,), out, (y,), y))


def _concat(builder, parsed, args, out, name, nodes) -> None:
    var, call = _core(parsed, "relax.concat")
    rank = len(builder.tensors[out].shape)
    if int(call.attrs.axis) % rank != rank - 1:
        raise LowerError(f"a concatenation along axis {int(call.attrs.axis)} (the innermost is needed)")
    fields = call.args[0].fields if isinstance(call.args[0], relax.Tuple) else None
    if fields is None:
        raise LowerError("a concatenation of a tuple built elsewhere")
    y = parsed.output_q
    inputs = []
    for field in fields:
        x, x_q = _input(parsed, field, args)
        if x_q != y:
            rescaled = builder.add_tensor(f"{out}.in{len(inputs)}", builder.tensors[x].shape, y)
            _rescale_op(builder, name, nodes, x, x_q, rescaled, y)
            x = rescaled
        inputs.append(x)
    builder.ops.append(ops.Concat(name, nodes, tuple(inputs), out, (y,) * len(inputs), y, axis=-1))


LUT_KINDS = ("sigmoid", "tanh", "leaky_relu", "gelu", "silu")


def lower_lut(builder, parsed, args, out, name, nodes) -> None:
    (dq_var, source), *others = [(v, d) for v, d in parsed.dequantized.items() if d.param is not None]
    if others:
        raise LowerError("a lookup-table activation with more than one input")
    table = unary_table(parsed, dq_var, source.q, parsed.output_q)
    x = args[source.param]
    builder.ops.append(
        ops.Lut(name, nodes, (x,), out, (source.q,), parsed.output_q, table=table, function=parsed.kind)
    )


LOWERINGS: dict[str, Callable] = {
    "conv2d": _conv,
    "dense": _dense,
    "matmul": _matmul,
    "add": _add,
    "mul": _mul,
    "max_pool2d": _pool,
    "avg_pool2d": _pool,
    "global_avg_pool": _global_pool,
    "relu": _activation,
    "clip": _activation,
    "reshape": _reshape,
    "concat": _concat,
    "softmax": lower_softmax,
}
