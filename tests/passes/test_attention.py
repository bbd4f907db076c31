"""attention: MatMul(Q, K^T) scaled, optionally masked, Softmax on the last axis, MatMul with
V -> one nn.attention in BSNH, and the near miss of a softmax over another axis.

nn.attention(q, k, v, bias, scale) = softmax(q k^T * scale + bias) v in (B, S, N, H): Q and V
in (B, N, S, H) are permuted (0, 2, 1, 3), K^T in (B, N, H, T) by (0, 3, 1, 2), the result
back by (0, 2, 1, 3); dividing by c is scaling by 1/c."""

from __future__ import annotations

import numpy as np
import tvm
from pass_testing import assert_rewrites_to, named, rng_array, run_pass
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from vpuc.compiler.passes import PassOptions, attention, strip_audit, transpose_cleanup


@I.ir_module
class ScaledDotProduct:
    @R.function
    def main(
        q: R.Tensor((1, 2, 16, 8), "float32"), kt: R.Tensor((1, 2, 8, 16), "float32"),
        v: R.Tensor((1, 2, 16, 8), "float32"),
    ):  # fmt: skip
        with R.dataflow():
            scores = R.matmul(q, kt)
            scaled = R.divide(scores, R.const(2.0, "float32"))
            probs = R.nn.softmax(scaled, axis=-1)
            out = R.matmul(probs, v)
            R.output(out)
        return out


@I.ir_module
class Fused:
    @R.function
    def main(
        q: R.Tensor((1, 2, 16, 8), "float32"), kt: R.Tensor((1, 2, 8, 16), "float32"),
        v: R.Tensor((1, 2, 16, 8), "float32"),
    ):  # fmt: skip
        with R.dataflow():
            qb = R.permute_dims(q, axes=[0, 2, 1, 3])
            kb = R.permute_dims(kt, axes=[0, 3, 1, 2])
            vb = R.permute_dims(v, axes=[0, 2, 1, 3])
            fused = R.nn.attention(qb, kb, vb, scale=T.float32(0.5))
            out = R.permute_dims(fused, axes=[0, 2, 1, 3])
            R.output(out)
        return out


def test_scaled_dot_product_becomes_one_attention_in_bsnh():
    after, audit = run_pass(attention, ScaledDotProduct)
    assert_rewrites_to(after, Fused)
    assert audit["fused"] == [
        {"pattern": "attention", "nodes": ["scores", "scaled", "probs", "out"],
         "reason": "nn.attention (BSNH, scale 0.5)"},
    ]  # fmt: skip


@I.ir_module
class MaskedHeadSplit:
    """The exporter's head split (reshape + transpose) around a masked attention."""

    @R.function
    def main(
        x: R.Tensor((2, 16, 32), "float32"), y: R.Tensor((2, 16, 32), "float32"),
        mask: R.Tensor((2, 1, 16, 16), "float32"),
    ):  # fmt: skip
        with R.dataflow():
            q = R.permute_dims(R.reshape(x, R.shape([2, 16, 4, 8])), axes=[0, 2, 1, 3])
            kt = R.permute_dims(R.reshape(y, R.shape([2, 16, 4, 8])), axes=[0, 2, 3, 1])
            v = R.permute_dims(R.reshape(y, R.shape([2, 16, 4, 8])), axes=[0, 2, 1, 3])
            scores = R.matmul(q, kt)
            scaled = R.multiply(scores, R.const(0.35, "float32"))
            masked = R.add(scaled, mask)
            probs = R.nn.softmax(masked, axis=3)
            context = R.matmul(probs, v)
            merged = R.reshape(R.permute_dims(context, axes=[0, 2, 1, 3]), R.shape([2, 16, 32]))
            R.output(merged)
        return merged


def _run(mod: tvm.IRModule, *arrays: np.ndarray) -> np.ndarray:
    vm = relax.VirtualMachine(relax.build(mod, target="llvm"), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(a) for a in arrays]).numpy()


def test_masked_attention_matches_the_unfused_graph_and_its_transposes_cancel():
    """Numerics, not just form: the BSNH mapping, the mask as the bias and the multiply
    scale. After transpose_cleanup the attention reads the reshapes directly."""
    fused = attention(named(MaskedHeadSplit), PassOptions())
    cleaned = strip_audit(transpose_cleanup(fused, PassOptions()))
    ops = [b.value.op.name for b in cleaned["main"].body.blocks[0].bindings]
    assert "relax.permute_dims" not in ops and ops.count("relax.nn.attention_bias") == 1  # with a mask
    x, y = rng_array((2, 16, 32)), rng_array((2, 16, 32), seed=1)
    mask = np.where(np.random.default_rng(2).random((2, 1, 16, 16)) < 0.2, -1e4, 0).astype("float32")
    expected = _run(MaskedHeadSplit, x, y, mask)
    np.testing.assert_allclose(_run(cleaned, x, y, mask), expected, rtol=1e-5, atol=1e-6)


@I.ir_module
class SoftmaxOverQueries:
    @R.function
    def main(
        q: R.Tensor((1, 2, 16, 8), "float32"), kt: R.Tensor((1, 2, 8, 16), "float32"),
        v: R.Tensor((1, 2, 16, 8), "float32"),
    ):  # fmt: skip
        with R.dataflow():
            scores = R.matmul(q, kt)
            scaled = R.divide(scores, R.const(2.0, "float32"))
            probs = R.nn.softmax(scaled, axis=2)
            out = R.matmul(probs, v)
            R.output(out)
        return out


def test_softmax_over_another_axis_must_not_fuse():
    after, audit = run_pass(attention, SoftmaxOverQueries)
    assert_rewrites_to(after, SoftmaxOverQueries)
    assert [e["reason"] for e in audit["not_fused"]] == [
        "axis is not the last axis (softmax over axis 2 of rank 4)"
    ]
