"""Graph pass: fold inference BatchNorm into the conv or dense before it, or into one
multiply-add when it stands alone.

    bn(y) = (y - mean) * a + beta,   a = gamma / sqrt(var + eps)          (per channel c)

    conv2d(x, W) [+ b]  -> bn   =>  conv2d(x, W * a[o]) + ((b - mean) * a + beta)    bn_fold
    matmul(x, W) [+ b]  -> bn   =>  matmul(x, W * a[n]) + ((b - mean) * a + beta)    bn_fold
    bn(x)                       =>  x * a + (beta - mean * a)                        bn_affine

a scales the output channel of the weight (axis O of OIHW/OHWI: grouped and depthwise convs
included, their O axis is still one filter per output channel; the last axis of a (K, N)
dense weight). The fold is computed in float64 and rounded once to float32. TVM's
FoldBatchnormToConv2D only sees conv2d -> batch_norm, so it misses every ONNX Conv with a
bias (the importer writes conv2d + add); these rules take both.

Near misses: BatchNorm statistics or the weight not constant, the conv/dense output read
elsewhere, a BN axis that is not the conv's channel axis or the dense's output axis, a
bias that is not per-channel.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_op, is_tuple_get_item, wildcard

from vpuc.compiler.passes.options import PassOptions
from vpuc.compiler.passes.rewrite import Match, Rule, attrs_of, const, run_rules

PASS_NAME = "bn_fold"


class _Parts:
    """Sub-patterns of one rule; each rule gets its own (dpl memoises per pattern object)."""

    def __init__(self, anchor_op: str | None, with_bias: bool) -> None:
        self.x, self.w, self.b = wildcard(), wildcard(), wildcard()
        self.stats = [wildcard() for _ in range(4)]  # gamma, beta, moving mean, moving var
        if anchor_op is None:
            self.anchor = None
            producer = self.x
        else:
            self.anchor = is_op(anchor_op)(self.x, self.w)
            producer = self.anchor
            if with_bias:
                producer = is_op("relax.add")(self.anchor, self.b) | is_op("relax.add")(self.b, self.anchor)
        self.bn = is_op("relax.nn.batch_norm")(producer, *self.stats)
        self.root = is_tuple_get_item(self.bn, 0)
        self.with_bias = with_bias

    @property
    def inputs(self):
        return (self.x, self.w, self.b, *self.stats)


def _bn_scale_shift(match: Match, parts: _Parts):
    """(a, shift) in float64 with bn(y) = y * a + shift, or the reason they are unknown."""
    view = match.view
    gamma, beta, mean, var = (view.dequantized_const(match[p]) for p in parts.stats)
    if any(v is None for v in (gamma, beta, mean, var)):
        return "BatchNorm statistics are not constants"
    attrs = attrs_of(view.value(match[parts.bn]))
    if attrs.get("training"):
        return "BatchNorm in training mode"
    eps = float(attrs["epsilon"])
    a = (gamma if attrs.get("scale", True) else np.ones_like(gamma)).astype(np.float64)
    a = a / np.sqrt(var.astype(np.float64) + eps)
    offset = beta.astype(np.float64) if attrs.get("center", True) else 0.0
    return a, offset - mean.astype(np.float64) * a


def _bn_axis(match: Match, parts: _Parts) -> int:
    bn = match.view.value(match[parts.bn])
    ndim = len(match.view.shape(match.root))
    return int(attrs_of(bn)["axis"]) % ndim


def _per_channel_shape(ndim: int, axis: int, channels: int) -> tuple[int, ...]:
    return tuple(channels if i == axis else 1 for i in range(ndim))


def _bias(match: Match, parts: _Parts, ndim: int, axis: int, channels: int):
    """The anchor's bias as a (channels,) float64 vector, zeros without one, or a reason."""
    if not parts.with_bias:
        return np.zeros(channels)
    bias = match.view.const(match[parts.b])
    if bias is None:
        return "the bias is not a constant"
    wanted = _per_channel_shape(ndim, axis, channels)
    if bias.ndim > ndim or np.broadcast_shapes(bias.shape, wanted) != wanted:
        return f"bias of shape {list(bias.shape)} is not per output channel"
    return np.broadcast_to(bias, wanted).reshape(channels).astype(np.float64)


# -- conv2d -> [add bias] -> batch_norm ------------------------------------------------------


def _conv_layout(match: Match, parts: _Parts):
    conv = match.view.value(match[parts.anchor])
    attrs = attrs_of(conv)
    return conv, str(attrs["out_layout"] or attrs["data_layout"]), str(attrs["kernel_layout"])


def _conv_fold(match: Match, parts: _Parts):
    """(new weight, new bias, channel axis) or the reason the conv cannot take the BN."""
    weight = match.view.const(match[parts.w])
    if weight is None:
        return "the conv weight is not a constant"
    _, out_layout, kernel_layout = _conv_layout(match, parts)
    axis, ndim = out_layout.index("C"), len(match.view.shape(match.root))
    if _bn_axis(match, parts) != axis:
        return f"BatchNorm axis {_bn_axis(match, parts)} is not the conv's channel axis {axis}"
    scale_shift = _bn_scale_shift(match, parts)
    if isinstance(scale_shift, str):
        return scale_shift
    a, shift = scale_shift
    bias = _bias(match, parts, ndim, axis, a.size)
    if isinstance(bias, str):
        return bias
    o_axis = kernel_layout.index("O")
    new_weight = weight.astype(np.float64) * a.reshape(_per_channel_shape(weight.ndim, o_axis, a.size))
    new_bias = (bias * a + shift).reshape(_per_channel_shape(ndim, axis, a.size))
    return new_weight.astype(weight.dtype), new_bias.astype(weight.dtype), axis


def _conv_rule(with_bias: bool) -> Rule:
    parts = _Parts("relax.nn.conv2d", with_bias)

    def check(match: Match) -> str | None:
        folded = _conv_fold(match, parts)
        return folded if isinstance(folded, str) else None

    def build(match: Match):
        weight, bias, _ = _conv_fold(match, parts)
        conv = match.view.value(match[parts.anchor])
        new_conv = relax.Call(conv.op, [match[parts.x], const(weight, str(weight.dtype))], conv.attrs)
        expr = relax.op.add(new_conv, const(bias, str(bias.dtype)))
        return expr, None, "nn.conv2d + bias (BatchNorm folded into the weights)"

    return Rule("bn_fold", parts.root, parts.inputs, check, build, anchor=parts.bn)


# -- matmul -> [add bias] -> batch_norm ------------------------------------------------------


def _dense_fold(match: Match, parts: _Parts):
    weight = match.view.const(match[parts.w])
    if weight is None or weight.ndim != 2:
        return "the matmul weight is not a 2-D constant"
    ndim = len(match.view.shape(match.root))
    if _bn_axis(match, parts) != ndim - 1:
        return f"BatchNorm axis {_bn_axis(match, parts)} is not the dense output axis {ndim - 1}"
    scale_shift = _bn_scale_shift(match, parts)
    if isinstance(scale_shift, str):
        return scale_shift
    a, shift = scale_shift
    bias = _bias(match, parts, ndim, ndim - 1, a.size)
    if isinstance(bias, str):
        return bias
    new_weight = (weight.astype(np.float64) * a[None, :]).astype(weight.dtype)
    return new_weight, (bias * a + shift).astype(weight.dtype)


def _dense_rule(with_bias: bool) -> Rule:
    parts = _Parts("relax.matmul", with_bias)

    def check(match: Match) -> str | None:
        folded = _dense_fold(match, parts)
        return folded if isinstance(folded, str) else None

    def build(match: Match):
        weight, bias = _dense_fold(match, parts)
        matmul = relax.op.matmul(match[parts.x], const(weight, str(weight.dtype)))
        expr = relax.op.add(matmul, const(bias, str(bias.dtype)))
        return expr, None, "matmul + bias (BatchNorm folded into the weights)"

    return Rule("bn_fold", parts.root, parts.inputs, check, build, anchor=parts.bn)


# -- a BatchNorm on its own --------------------------------------------------------------------


def _affine_rule() -> Rule:
    parts = _Parts(None, with_bias=False)

    def check(match: Match) -> str | None:
        scale_shift = _bn_scale_shift(match, parts)
        return scale_shift if isinstance(scale_shift, str) else None

    def build(match: Match):
        a, shift = _bn_scale_shift(match, parts)
        ndim, axis = len(match.view.shape(match.root)), _bn_axis(match, parts)
        dtype = str(match.root.ty.dtype)
        shape = _per_channel_shape(ndim, axis, a.size)
        scaled = relax.op.multiply(match[parts.x], const(a.reshape(shape), dtype))
        expr = relax.op.add(scaled, const(shift.reshape(shape), dtype))
        return expr, None, "multiply + add (BatchNorm as one per-channel multiply-add)"

    return Rule("bn_affine", parts.root, parts.inputs, check, build, anchor=parts.bn)


RULES = (_conv_rule(True), _conv_rule(False), _dense_rule(True), _dense_rule(False), _affine_rule())


def bn_fold(mod: tvm.IRModule, options: PassOptions) -> tvm.IRModule:
    """conv2d/matmul [+ bias] -> batch_norm  =>  conv2d/matmul with folded weight + bias."""
    return run_rules(mod, RULES, PASS_NAME)
