"""Graph pass: scaled-dot-product attention -> one nn.attention.

    s = matmul(Q, K^T) [/ c  or  * c] [+ mask]                Q (B,N,S,H), K^T (B,N,H,T)
    out = matmul(softmax(s, axis=-1), V)                      V (B,N,T,Hv)
        =>  out = permute(nn.attention(permute(Q), permute(K^T), permute(V), mask, scale),
                          [0, 2, 1, 3])                                            attention

nn.attention computes softmax(Q K^T * scale + bias) V in BSNH layout (batch, seq, heads,
head dim), so Q and V are permuted (0, 2, 1, 3), K^T (0, 3, 1, 2), the result back, and the
scale is 1/c for a division, c for a multiplication, 1 without one. An additive mask
becomes the bias (broadcast to (B, N, S, T)). The transposes are glue: exporters split heads
with exactly the inverse permutations, so transpose_cleanup, which runs later, cancels them
and the attention reads the (B, S, N, H) reshape of the projections directly. A rank-3
attention (B, S, H) is the one-head case: reshapes put in and take out the head axis.

Checked from the graph: softmax on the last axis, a scalar constant scale, Q/K/V ranks
3 or 4 with equal batch and head counts (no broadcasting), a mask that broadcasts to the
scores. Near misses name the failing one; intermediates (scores, probabilities) read
elsewhere also stop the fusion.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_op, wildcard

from vpuc.compiler.passes.options import PassOptions
from vpuc.compiler.passes.rewrite import Match, Rule, attrs_of, run_rules

PASS_NAME = "attention"


def _either(op: str, a, b):
    return is_op(op)(a, b) | is_op(op)(b, a)


class _Form:
    """One spelling: with or without the scale, with or without the mask."""

    def __init__(self, scaled: bool, masked: bool) -> None:
        self.q, self.kt, self.v, self.c, self.mask = (wildcard() for _ in range(5))
        self.scores = is_op("relax.matmul")(self.q, self.kt)
        logits = self.scores
        self.divides = is_op("relax.divide")(self.scores, self.c) if scaled else None
        if scaled:
            logits = self.divides | _either("relax.multiply", self.scores, self.c)
        if masked:
            logits = _either("relax.add", logits, self.mask)
        self.softmax = is_op("relax.nn.softmax")(logits)
        self.root = is_op("relax.matmul")(self.softmax, self.v)
        self.scaled, self.masked = scaled, masked

    def scale(self, match: Match) -> float | None:
        if not self.scaled:
            return 1.0
        c = match.view.scalar(match[self.c])
        if c is None or c == 0.0:
            return None
        return 1.0 / c if match.get(self.divides) is not None else c


def _shapes_reason(match: Match, form: _Form) -> str | None:
    view = match.view
    q, kt, v = (view.shape(match[p]) for p in (form.q, form.kt, form.v))
    if not (len(q) == len(kt) == len(v)) or len(q) not in (3, 4):
        return f"shapes do not allow it: ranks {len(q)}, {len(kt)}, {len(v)} (3 or 4 needed)"
    if q[:-2] != kt[:-2] or q[:-2] != v[:-2] or q[-1] != kt[-2] or kt[-1] != v[-2]:
        return f"shapes do not allow it: Q {list(q)}, K^T {list(kt)}, V {list(v)} (broadcast or mismatch)"
    if form.masked:
        scores = (*q[:-1], kt[-1])
        mask = view.shape(match[form.mask])
        if len(mask) > len(scores) or _broadcast(mask, scores) != scores:
            return (
                f"shapes do not allow it: mask {list(mask)} does not broadcast to the scores {list(scores)}"
            )
    return None


def _broadcast(shape, target):
    try:
        return tuple(int(d) for d in np.broadcast_shapes(tuple(shape), tuple(target)))
    except ValueError:
        return None


def _check_for(form: _Form):
    def check(match: Match) -> str | None:
        softmax = match.view.value(match[form.softmax])
        ndim = len(match.view.shape(match[form.softmax]))
        axis = int(attrs_of(softmax)["axis"]) % ndim
        if axis != ndim - 1:
            return f"axis is not the last axis (softmax over axis {axis} of rank {ndim})"
        if form.scale(match) is None:
            return "the scale is not a non-zero scalar constant"
        return _shapes_reason(match, form)

    return check


def _to_bsnh(match: Match, form: _Form):
    """Q, K, V in (B, S, N, H), and the function taking the result back to Q's layout."""
    view = match.view
    q, kt, v = match[form.q], match[form.kt], match[form.v]
    if len(view.shape(q)) == 4:
        permute = relax.op.permute_dims
        back = lambda out: permute(out, [0, 2, 1, 3])  # noqa: E731
        return permute(q, [0, 2, 1, 3]), permute(kt, [0, 3, 1, 2]), permute(v, [0, 2, 1, 3]), back
    (b, s, h), (t, hv) = view.shape(q), view.shape(v)[-2:]
    reshape = relax.op.reshape
    k = reshape(relax.op.permute_dims(kt, [0, 2, 1]), (b, t, 1, h))
    back = lambda out: reshape(out, (b, s, hv))  # noqa: E731
    return reshape(q, (b, s, 1, h)), k, reshape(v, (b, t, 1, hv)), back


def _bias(match: Match, form: _Form):
    """The mask as the 4-D (B, N, S, T)-broadcastable bias nn.attention takes."""
    if not form.masked:
        return None
    mask, view = match[form.mask], match.view
    shape = view.shape(mask)
    if len(view.shape(match[form.q])) == 3:  # (B, S, T) scores: the head axis goes in at 1
        shape = (1,) * (3 - len(shape)) + tuple(shape)
        return relax.op.reshape(mask, (shape[0], 1, shape[1], shape[2]))
    return mask if len(shape) == 4 else relax.op.reshape(mask, (1,) * (4 - len(shape)) + tuple(shape))


def _build_for(form: _Form):
    def build(match: Match):
        q, k, v, back = _to_bsnh(match, form)
        scale = form.scale(match)
        fused = relax.op.nn.attention(q, k, v, _bias(match, form), scale=scale)
        mask = " + mask" if form.masked else ""
        return back(fused), fused, f"nn.attention (BSNH, scale {scale:g}{mask})"

    return build


def _rule(scaled: bool, masked: bool) -> Rule:
    form = _Form(scaled, masked)
    inputs = (form.q, form.kt, form.v, form.c, form.mask)
    return Rule("attention", form.root, inputs, _check_for(form), _build_for(form), anchor=form.softmax)


RULES = tuple(
    _rule(scaled, masked) for scaled, masked in ((True, True), (True, False), (False, True), (False, False))
)


def attention(mod: tvm.IRModule, options: PassOptions) -> tvm.IRModule:
    """matmul(softmax(matmul(Q, K^T) * scale [+ mask]), V) => nn.attention in BSNH."""
    return run_rules(mod, RULES, PASS_NAME)
