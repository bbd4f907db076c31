"""bn_fold: inference BatchNorm folded into the conv or dense before it, or turned into one
per-channel multiply-add.

    bn(y) = (y - mean) * a + beta,  a = gamma / sqrt(var + eps)
    conv2d(x, W) + b -> bn  =>  conv2d(x, W * a[o]) + (b * a + (beta - mean * a))

The Expected weights below are that algebra in float64, rounded once to float32, as the
pass computes them."""

from __future__ import annotations

import numpy as np
from pass_testing import assert_rewrites_to, bind, rng_array, run_pass
from tvm.script import ir as I
from tvm.script import relax as R

from vpuc.compiler.passes import bn_fold

EPS = 1e-5
C = 4


def _stats(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "gamma": rng.uniform(0.5, 1.5, C).astype("float32"),
        "beta": rng.normal(0, 0.1, C).astype("float32"),
        "mean": rng.normal(0, 0.1, C).astype("float32"),
        "var": rng.uniform(0.5, 1.5, C).astype("float32"),
    }


def _fold(stats, weight, bias, o_axis: int = 0):
    a = stats["gamma"].astype(np.float64) / np.sqrt(stats["var"].astype(np.float64) + EPS)
    shift = stats["beta"].astype(np.float64) - stats["mean"].astype(np.float64) * a
    shape = [1] * weight.ndim
    shape[o_axis] = C
    new_weight = (weight.astype(np.float64) * a.reshape(shape)).astype("float32")
    new_bias = (bias.reshape(C).astype(np.float64) * a + shift).astype("float32")
    return new_weight, new_bias


@I.ir_module
class ConvBiasBn:
    @R.function
    def main(
        x: R.Tensor((1, 3, 8, 8), "float32"), w: R.Tensor((4, 3, 3, 3), "float32"),
        b: R.Tensor((1, 4, 1, 1), "float32"), gamma: R.Tensor((4,), "float32"),
        beta: R.Tensor((4,), "float32"), mean: R.Tensor((4,), "float32"), var: R.Tensor((4,), "float32"),
    ):  # fmt: skip
        with R.dataflow():
            conv = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
            y = R.add(conv, b)
            bn = R.nn.batch_norm(y, gamma, beta, mean, var, axis=1, epsilon=EPS, training=False)
            out = bn[0]
            R.output(out)
        return out


@I.ir_module
class ConvBiasFolded:
    @R.function
    def main(
        x: R.Tensor((1, 3, 8, 8), "float32"), w: R.Tensor((4, 3, 3, 3), "float32"),
        b: R.Tensor((1, 4, 1, 1), "float32"),
    ):  # fmt: skip
        with R.dataflow():
            conv = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
            out = R.add(conv, b)
            R.output(out)
        return out


def test_conv_with_bias_takes_the_batchnorm():
    """The ONNX Conv-with-bias case TVM's FoldBatchnormToConv2D misses."""
    stats, w, b = _stats(), rng_array((C, 3, 3, 3)), rng_array((1, C, 1, 1), seed=2)
    after, audit = run_pass(bn_fold, bind(ConvBiasBn, w=w, b=b, **stats))
    new_w, new_b = _fold(stats, w, b)
    assert_rewrites_to(after, bind(ConvBiasFolded, w=new_w, b=new_b.reshape(1, C, 1, 1)))
    (entry,) = audit["fused"]
    assert entry["pattern"] == "bn_fold" and entry["nodes"] == ["conv", "y", "bn", "out"]


@I.ir_module
class DepthwiseBn:
    @R.function
    def main(
        x: R.Tensor((1, 4, 8, 8), "float32"), w: R.Tensor((4, 1, 3, 3), "float32"),
        gamma: R.Tensor((4,), "float32"), beta: R.Tensor((4,), "float32"),
        mean: R.Tensor((4,), "float32"), var: R.Tensor((4,), "float32"),
    ):  # fmt: skip
        with R.dataflow():
            conv = R.nn.conv2d(x, w, padding=[1, 1, 1, 1], groups=4)
            bn = R.nn.batch_norm(conv, gamma, beta, mean, var, axis=1, epsilon=EPS, training=False)
            out = bn[0]
            R.output(out)
        return out


@I.ir_module
class DepthwiseFolded:
    @R.function
    def main(
        x: R.Tensor((1, 4, 8, 8), "float32"), w: R.Tensor((4, 1, 3, 3), "float32"),
        b: R.Tensor((1, 4, 1, 1), "float32"),
    ):  # fmt: skip
        with R.dataflow():
            conv = R.nn.conv2d(x, w, padding=[1, 1, 1, 1], groups=4)
            out = R.add(conv, b)
            R.output(out)
        return out


def test_depthwise_conv_without_bias():
    """A depthwise filter is still one filter per output channel (axis O), and a conv with
    no bias gets one: (0 - mean) * a + beta."""
    stats, w = _stats(1), rng_array((C, 1, 3, 3), seed=3)
    after, _ = run_pass(bn_fold, bind(DepthwiseBn, w=w, **stats))
    new_w, new_b = _fold(stats, w, np.zeros(C, "float32"))
    assert_rewrites_to(after, bind(DepthwiseFolded, w=new_w, b=new_b.reshape(1, C, 1, 1)))


@I.ir_module
class DenseBn:
    @R.function
    def main(
        x: R.Tensor((2, 3), "float32"), w: R.Tensor((3, 4), "float32"), b: R.Tensor((4,), "float32"),
        gamma: R.Tensor((4,), "float32"), beta: R.Tensor((4,), "float32"),
        mean: R.Tensor((4,), "float32"), var: R.Tensor((4,), "float32"),
    ):  # fmt: skip
        with R.dataflow():
            mm = R.matmul(x, w)
            y = R.add(b, mm)
            bn = R.nn.batch_norm(y, gamma, beta, mean, var, axis=1, epsilon=EPS, training=False)
            out = bn[0]
            R.output(out)
        return out


@I.ir_module
class DenseFolded:
    @R.function
    def main(x: R.Tensor((2, 3), "float32"), w: R.Tensor((3, 4), "float32"), b: R.Tensor((4,), "float32")):
        with R.dataflow():
            mm = R.matmul(x, w)
            out = R.add(mm, b)
            R.output(out)
        return out


def test_dense_with_bias_takes_the_batchnorm():
    """BatchNorm1d after Linear: the scale goes on the weight's output axis (the last)."""
    stats, w, b = _stats(2), rng_array((3, C), seed=4), rng_array(C, seed=5)
    after, _ = run_pass(bn_fold, bind(DenseBn, w=w, b=b, **stats))
    new_w, new_b = _fold(stats, w, b, o_axis=1)
    assert_rewrites_to(after, bind(DenseFolded, w=new_w, b=new_b))


@I.ir_module
class ConvReadTwiceBn:
    @R.function
    def main(
        x: R.Tensor((1, 3, 8, 8), "float32"), w: R.Tensor((4, 3, 3, 3), "float32"),
        gamma: R.Tensor((4,), "float32"), beta: R.Tensor((4,), "float32"),
        mean: R.Tensor((4,), "float32"), var: R.Tensor((4,), "float32"),
    ):  # fmt: skip
        with R.dataflow():
            conv = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
            bn = R.nn.batch_norm(conv, gamma, beta, mean, var, axis=1, epsilon=EPS, training=False)
            normed = bn[0]
            out = R.add(normed, conv)
            R.output(out)
        return out


@I.ir_module
class ConvReadTwiceAffine:
    @R.function
    def main(
        x: R.Tensor((1, 3, 8, 8), "float32"), w: R.Tensor((4, 3, 3, 3), "float32"),
        a: R.Tensor((1, 4, 1, 1), "float32"), shift: R.Tensor((1, 4, 1, 1), "float32"),
    ):  # fmt: skip
        with R.dataflow():
            conv = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
            scaled = R.multiply(conv, a)
            normed = R.add(scaled, shift)
            out = R.add(normed, conv)
            R.output(out)
        return out


def test_conv_read_elsewhere_keeps_its_weights_and_the_bn_becomes_a_multiply_add():
    """Folding into the weights would change what the residual add reads: near miss, and
    the BatchNorm alone is x * a + (beta - mean * a)."""
    stats, w = _stats(3), rng_array((C, 3, 3, 3), seed=6)
    after, audit = run_pass(bn_fold, bind(ConvReadTwiceBn, w=w, **stats))
    a = stats["gamma"].astype(np.float64) / np.sqrt(stats["var"].astype(np.float64) + EPS)
    shift = stats["beta"].astype(np.float64) - stats["mean"].astype(np.float64) * a
    expected = bind(
        ConvReadTwiceAffine,
        w=w,
        a=a.reshape(1, C, 1, 1).astype("float32"),
        shift=shift.reshape(1, C, 1, 1).astype("float32"),
    )
    assert_rewrites_to(after, expected)
    assert audit["not_fused"] == [
        {"pattern": "bn_fold", "nodes": ["conv", "bn", "normed"],
         "reason": "intermediate 'conv' has another consumer ('out')"},
    ]  # fmt: skip
    assert [e["pattern"] for e in audit["fused"]] == ["bn_affine"]


def test_statistics_computed_at_run_time_are_a_near_miss():
    """A mean that is an input cannot be folded into weights, nor into constants."""
    stats, w = _stats(4), rng_array((C, 3, 3, 3), seed=7)
    del stats["mean"]
    before = bind(ConvReadTwiceBn, w=w, **stats)
    after, audit = run_pass(bn_fold, before)
    assert_rewrites_to(after, before)
    reasons = {(e["pattern"], e["reason"]) for e in audit["not_fused"]}
    assert ("bn_affine", "BatchNorm statistics are not constants") in reasons
    assert audit["fused"] == []
