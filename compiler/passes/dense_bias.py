"""Graph pass: MatMul + Add -> dense with bias.

    matmul(x, W) + b    with W a (K, N) constant, b a constant per output feature
    b + matmul(x, W)    (PyTorch exports Add(bias, MatMul))
        =>  add(matmul(x, W), b[N])                                          dense_bias

Relax has no dense-with-bias op, and the partitioner (FuseOpsByPattern) wants primitive ops
to match, so a dense with bias is this canonical pair: the matmul of a constant 2-D weight,
read only by one add of a 1-D (N,) constant bias (a scalar or (1, ..., 1, N) bias is
reshaped to (N,)). The pass never puts anything between the add and what reads it, so an
activation after the dense stays adjacent for the partitioner to fuse with it.

A matmul whose weight is computed at run time (attention's Q @ K^T) is no dense layer and
no near miss. Near misses: bias not constant, bias varying along another axis than the
output features, the matmul output read elsewhere.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_op, wildcard

from vpuc.compiler.passes.options import PassOptions
from vpuc.compiler.passes.rewrite import Match, Rule, const, run_rules

PASS_NAME = "dense_bias"

_x, _w, _b = wildcard(), wildcard(), wildcard()
_matmul = is_op("relax.matmul")(_x, _w)
_dense_bias = is_op("relax.add")(_matmul, _b) | is_op("relax.add")(_b, _matmul)


def _is_dense(match: Match) -> bool:
    weight = match.view.const(match[_w])
    return weight is not None and weight.ndim == 2


def _bias_vector(match: Match) -> np.ndarray | str:
    """The bias as an (N,) vector, or why it is not one."""
    bias = match.view.const(match[_b])
    if bias is None:
        return "the bias is not a constant"
    features = match.view.const(match[_w]).shape[1]
    out_ndim = len(match.view.shape(match.root))
    if bias.ndim > out_ndim or (bias.size not in (1, features)) or bias.shape[-1:] not in ((1,), (features,)):
        return f"bias of shape {list(bias.shape)} is not one value per output feature ({features})"
    if bias.size == features and any(d != 1 for d in bias.shape[:-1]):
        return f"bias of shape {list(bias.shape)} varies along another axis than the output features"
    return np.broadcast_to(bias.reshape(-1), (features,)).copy()


def _check(match: Match) -> str | None:
    bias = _bias_vector(match)
    return bias if isinstance(bias, str) else None


def _build(match: Match):
    bias = _bias_vector(match)
    weight = match.view.const(match[_w])
    matmul = relax.op.matmul(match[_x], match[_w])
    expr = relax.op.add(matmul, const(bias, str(bias.dtype)))
    return (
        expr,
        None,
        f"dense with bias: matmul by ({weight.shape[0]}, {weight.shape[1]}) + bias[{bias.size}]",
    )


RULES = (Rule("dense_bias", _dense_bias, (_x, _w, _b), _check, _build, applies=_is_dense),)


def dense_bias(mod: tvm.IRModule, options: PassOptions) -> tvm.IRModule:
    """matmul(x, W) + b (either order) => add(matmul(x, W), b[N])."""
    return run_rules(mod, RULES, PASS_NAME)
