"""Graph pass: the decomposed LayerNorm -> nn.layer_norm.

    m = mean(x, -1);  c = x - m;  v = mean(c^2, -1)        (c^2: pow(c, 2) or c * c)
    y = c / sqrt(v + eps)                                   (or c * (1 / sqrt(v + eps)),
                                                                c * rsqrt(v + eps))
    y * gamma + beta  =>  nn.layer_norm(x, gamma, beta, axes=[-1], epsilon=eps)   layer_norm

That is LayerNorm's definition term by term, so the rewrite is exact up to float rounding.
eps, gamma, beta and the axis are read from the graph, never assumed: both means must be
over the last axis only (keepdims), the exponent exactly 2, eps a non-negative scalar
constant, gamma and beta constants with one value per normalised feature. Without the
trailing `* gamma` / `+ beta` the longest present form is fused with gamma = 1, beta = 0.

Near misses: the mean (or c, v, ...) read outside the pattern, a norm over another axis,
eps/gamma/beta computed at run time, an exponent other than 2.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_op, wildcard

from vpuc.compiler.passes.options import PassOptions
from vpuc.compiler.passes.rewrite import Match, Rule, attrs_of, const, run_rules

PASS_NAME = "layer_norm"


def _either(op: str, a, b):
    return is_op(op)(a, b) | is_op(op)(b, a)


_x, _two, _eps, _one, _gamma, _beta = (wildcard() for _ in range(6))
_mean = is_op("relax.mean")(_x)
_centred = is_op("relax.subtract")(_x, _mean)
_variance = is_op("relax.mean")(
    is_op("relax.power")(_centred, _two) | is_op("relax.multiply")(_centred, _centred)
)
_shifted_var = _either("relax.add", _variance, _eps)
_std = is_op("relax.sqrt")(_shifted_var)
_normed = (
    is_op("relax.divide")(_centred, _std)
    | _either("relax.multiply", _centred, is_op("relax.divide")(_one, _std))
    | _either("relax.multiply", _centred, is_op("relax.rsqrt")(_shifted_var))
)
_scaled = _either("relax.multiply", _normed, _gamma)
_full = _either("relax.add", _scaled, _beta)


def _mean_axes_reason(match: Match, mean_expr) -> str | None:
    attrs = attrs_of(match.view.value(mean_expr))
    ndim = len(match.view.shape(match[_x]))
    axes = sorted(int(a) % ndim for a in (attrs.get("axis") or range(ndim)))
    if axes != [ndim - 1]:
        return f"axis is not the last axis (mean over axes {axes} of a rank-{ndim} tensor)"
    if not attrs.get("keepdims"):
        return "the mean drops the normalised axis (keepdims=0)"
    return None


def _affine(match: Match, pattern, default: float) -> np.ndarray | str:
    """gamma or beta as a (D,) vector (1 or 0 when absent), or why it cannot be one."""
    name = "gamma" if pattern is _gamma else "beta"
    features = match.view.shape(match[_x])[-1]
    if match.get(pattern) is None:
        return np.full(features, default, dtype=str(match.root.ty.dtype))
    value = match.view.const(match[pattern])
    if value is None:
        return f"{name} is not a constant"
    if value.size not in (1, features) or any(d != 1 for d in value.shape[:-1]):
        return f"{name} of shape {list(value.shape)} is not one value per feature ({features})"
    return np.broadcast_to(value.reshape(-1), (features,)).astype(str(match.root.ty.dtype))


def _check(match: Match) -> str | None:
    view = match.view
    for mean_expr in (match[_mean], match[_variance]):
        reason = _mean_axes_reason(match, mean_expr)
        if reason:
            return reason
    if match.get(_two) is not None and view.scalar(match[_two]) != 2.0:
        return f"attribute out of range: exponent {view.scalar(match[_two])} is not 2"
    if match.get(_one) is not None and view.scalar(match[_one]) != 1.0:
        return "attribute out of range: the reciprocal's numerator is not 1"
    eps = view.scalar(match[_eps])
    if eps is None:
        return "eps is not a constant"
    if eps < 0:
        return f"attribute out of range: eps {eps} is negative"
    for pattern, default in ((_gamma, 1.0), (_beta, 0.0)):
        value = _affine(match, pattern, default)
        if isinstance(value, str):
            return value
    return None


def _build(match: Match):
    view = match.view
    gamma, beta = _affine(match, _gamma, 1.0), _affine(match, _beta, 0.0)
    eps = view.scalar(match[_eps])
    expr = relax.op.nn.layer_norm(
        match[_x], const(gamma, str(gamma.dtype)), const(beta, str(beta.dtype)), axes=[-1], epsilon=eps
    )
    return expr, None, f"nn.layer_norm(axis -1, eps {eps:g})"


RULES = tuple(
    Rule("layer_norm", root, inputs, _check, _build, anchor=_centred)
    for root, inputs in (
        (_full, (_x, _two, _eps, _one, _gamma, _beta)),
        (_scaled, (_x, _two, _eps, _one, _gamma)),
        (_normed, (_x, _two, _eps, _one)),
    )
)


def layer_norm(mod: tvm.IRModule, options: PassOptions) -> tvm.IRModule:
    """mean/sub/pow/mean/add eps/sqrt/div [* gamma] [+ beta] => nn.layer_norm."""
    return run_rules(mod, RULES, PASS_NAME)
