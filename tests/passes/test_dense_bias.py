"""dense_bias: MatMul by a constant weight + Add of a per-feature constant bias is a dense
with bias, written canonically as add(matmul(x, W), b[N])."""

from __future__ import annotations

from pass_testing import assert_rewrites_to, bind, rng_array, run_pass
from tvm.script import ir as I
from tvm.script import relax as R

from vpuc.compiler.passes import dense_bias


@I.ir_module
class TorchLinear:
    @R.function
    def main(
        x: R.Tensor((2, 8, 16), "float32"),
        w: R.Tensor((16, 32), "float32"),
        b: R.Tensor((1, 1, 32), "float32"),
    ):
        with R.dataflow():
            mm = R.matmul(x, w)
            y = R.add(b, mm)
            out = R.nn.relu(y)
            R.output(out)
        return out


@I.ir_module
class DenseWithBias:
    @R.function
    def main(
        x: R.Tensor((2, 8, 16), "float32"), w: R.Tensor((16, 32), "float32"), b: R.Tensor((32,), "float32")
    ):
        with R.dataflow():
            mm = R.matmul(x, w)
            y = R.add(mm, b)
            out = R.nn.relu(y)
            R.output(out)
        return out


def test_bias_first_add_becomes_the_canonical_dense_with_bias():
    """b + x @ W = x @ W + b; a (1, 1, N) bias is b[N] broadcast. The relu still reads the
    add directly: adjacent for the partitioner."""
    w, b = rng_array((16, 32)), rng_array((1, 1, 32), seed=1)
    after, audit = run_pass(dense_bias, bind(TorchLinear, w=w, b=b))
    assert_rewrites_to(after, bind(DenseWithBias, w=w, b=b.reshape(32)))
    assert audit["fused"] == [
        {
            "pattern": "dense_bias",
            "nodes": ["mm", "y"],
            "reason": "dense with bias: matmul by (16, 32) + bias[32]",
        }
    ]


@I.ir_module
class BiasAtRunTime:
    @R.function
    def main(x: R.Tensor((2, 16), "float32"), w: R.Tensor((16, 4), "float32"), b: R.Tensor((4,), "float32")):
        with R.dataflow():
            mm = R.matmul(x, w)
            out = R.add(mm, b)
            R.output(out)
        return out


def test_a_bias_computed_at_run_time_is_a_near_miss():
    before = bind(BiasAtRunTime, w=rng_array((16, 4)))
    after, audit = run_pass(dense_bias, before)
    assert_rewrites_to(after, before)
    assert audit["not_fused"] == [
        {"pattern": "dense_bias", "nodes": ["mm", "out"], "reason": "the bias is not a constant"}
    ]


@I.ir_module
class ScoresPlusMask:
    @R.function
    def main(q: R.Tensor((4, 8), "float32"), k: R.Tensor((8, 4), "float32"), m: R.Tensor((4,), "float32")):
        with R.dataflow():
            s = R.matmul(q, k)
            out = R.add(s, m)
            R.output(out)
        return out


def test_a_matmul_of_two_activations_is_no_dense_and_no_near_miss():
    """Q @ K^T + mask: the weight is computed at run time, so this is not a dense layer."""
    before = bind(ScoresPlusMask, m=rng_array(4))
    after, audit = run_pass(dense_bias, before)
    assert_rewrites_to(after, before)
    assert audit == {"fused": [], "not_fused": []}


@I.ir_module
class QdqBetweenMatmulAndBias:
    @R.function
    def main(x: R.Tensor((2, 16), "float32"), w: R.Tensor((16, 4), "float32"), b: R.Tensor((4,), "float32")):
        with R.dataflow():
            mm = R.matmul(x, w)
            q = R.quantize(mm, R.const(0.1, "float32"), R.const(0, "int8"), axis=-1, out_dtype="int8")
            dq = R.dequantize(q, R.const(0.1, "float32"), R.const(0, "int8"), axis=-1, out_dtype="float32")
            out = R.add(dq, b)
            R.output(out)
        return out


def test_qdq_nodes_cutting_the_pattern_are_a_near_miss():
    """A quantised model's Q/DQ pair between the matmul and its bias: fusing would drop
    the rounding the pair stands for, so the audit says what cut the pattern."""
    before = bind(QdqBetweenMatmulAndBias, w=rng_array((16, 4)), b=rng_array(4, seed=1))
    after, audit = run_pass(dense_bias, before)
    assert_rewrites_to(after, before)
    assert audit["not_fused"] == [
        {"pattern": "dense_bias", "nodes": ["mm", "q", "dq", "out"], "reason": "Q/DQ nodes cut the pattern"}
    ]
