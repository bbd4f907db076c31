"""layer_norm: the decomposed LayerNorm PyTorch exports becomes nn.layer_norm, with eps,
gamma, beta and the axis read from the graph; and the three near misses that must not
fuse: a mean read elsewhere, a norm over another axis, eps computed at run time."""

from __future__ import annotations

import numpy as np
from pass_testing import assert_rewrites_to, bind, rng_array, run_pass
from tvm.script import ir as I
from tvm.script import relax as R

from vpuc.compiler.passes import layer_norm


@I.ir_module
class Decomposed:
    @R.function
    def main(
        x: R.Tensor((1, 16, 32), "float32"),
        gamma: R.Tensor((32,), "float32"),
        beta: R.Tensor((32,), "float32"),
    ):
        with R.dataflow():
            mean = R.mean(x, axis=[-1], keepdims=True)
            centred = R.subtract(x, mean)
            squared = R.power(centred, R.const(2.0, "float32"))
            variance = R.mean(squared, axis=[-1], keepdims=True)
            shifted = R.add(variance, R.const(1e-5, "float32"))
            std = R.sqrt(shifted)
            normed = R.divide(centred, std)
            scaled = R.multiply(normed, gamma)
            out = R.add(scaled, beta)
            R.output(out)
        return out


@I.ir_module
class Fused:
    @R.function
    def main(
        x: R.Tensor((1, 16, 32), "float32"),
        gamma: R.Tensor((32,), "float32"),
        beta: R.Tensor((32,), "float32"),
    ):
        with R.dataflow():
            out = R.nn.layer_norm(x, gamma, beta, axes=[-1], epsilon=float(np.float32(1e-5)))
            R.output(out)
        return out


def test_pytorch_decomposition_becomes_layer_norm():
    """(x - mean) / sqrt(mean((x - mean)^2) + eps) * gamma + beta is LayerNorm over the last
    axis by definition; eps is the graph's float32 constant, read back exactly."""
    gamma, beta = rng_array(32, low=0.5, high=1.5), rng_array(32, seed=1)
    after, audit = run_pass(layer_norm, bind(Decomposed, gamma=gamma, beta=beta))
    assert_rewrites_to(after, bind(Fused, gamma=gamma, beta=beta))
    (entry,) = audit["fused"]
    assert entry["nodes"] == [
        "mean",
        "centred",
        "squared",
        "variance",
        "shifted",
        "std",
        "normed",
        "scaled",
        "out",
    ]


@I.ir_module
class ReciprocalForm:
    @R.function
    def main(x: R.Tensor((4, 8), "float32")):
        with R.dataflow():
            mean = R.mean(x, axis=[1], keepdims=True)
            centred = R.subtract(x, mean)
            squared = R.multiply(centred, centred)
            variance = R.mean(squared, axis=[1], keepdims=True)
            shifted = R.add(R.const(1e-6, "float32"), variance)
            std = R.sqrt(shifted)
            inverse = R.divide(R.const(1.0, "float32"), std)
            out = R.multiply(centred, inverse)
            R.output(out)
        return out


@I.ir_module
class ReciprocalFused:
    @R.function
    def main(
        x: R.Tensor((4, 8), "float32"), gamma: R.Tensor((8,), "float32"), beta: R.Tensor((8,), "float32")
    ):
        with R.dataflow():
            out = R.nn.layer_norm(x, gamma, beta, axes=[-1], epsilon=float(np.float32(1e-6)))
            R.output(out)
        return out


def test_square_by_multiply_reciprocal_and_no_affine():
    """c * c is c^2 and c * (1 / s) is c / s; with no gamma/beta the norm has gamma 1,
    beta 0; axis 1 of a rank-2 tensor is its last axis."""
    after, _ = run_pass(layer_norm, ReciprocalForm)
    expected = bind(ReciprocalFused, gamma=np.ones(8, "float32"), beta=np.zeros(8, "float32"))
    assert_rewrites_to(after, expected)


@I.ir_module
class MeanReadTwice:
    @R.function
    def main(x: R.Tensor((1, 16, 32), "float32")):
        with R.dataflow():
            mean = R.mean(x, axis=[-1], keepdims=True)
            centred = R.subtract(x, mean)
            squared = R.power(centred, R.const(2.0, "float32"))
            variance = R.mean(squared, axis=[-1], keepdims=True)
            shifted = R.add(variance, R.const(1e-5, "float32"))
            std = R.sqrt(shifted)
            normed = R.divide(centred, std)
            out = R.add(normed, mean)
            R.output(out)
        return out


def test_mean_read_outside_the_pattern_must_not_fuse():
    """The add needs the mean after the norm: fusing would compute it twice (or lose it)."""
    after, audit = run_pass(layer_norm, MeanReadTwice)
    assert_rewrites_to(after, MeanReadTwice)
    assert audit["fused"] == []
    assert audit["not_fused"] == [
        {"pattern": "layer_norm", "nodes": ["mean", "centred", "squared", "variance", "shifted", "std", "normed"],
         "reason": "intermediate 'mean' has another consumer ('out')"},
    ]  # fmt: skip


@I.ir_module
class ChannelNorm:
    @R.function
    def main(x: R.Tensor((1, 8, 16), "float32")):
        with R.dataflow():
            mean = R.mean(x, axis=[1], keepdims=True)
            centred = R.subtract(x, mean)
            squared = R.power(centred, R.const(2.0, "float32"))
            variance = R.mean(squared, axis=[1], keepdims=True)
            shifted = R.add(variance, R.const(1e-5, "float32"))
            std = R.sqrt(shifted)
            out = R.divide(centred, std)
            R.output(out)
        return out


def test_norm_over_a_non_last_axis_must_not_fuse():
    after, audit = run_pass(layer_norm, ChannelNorm)
    assert_rewrites_to(after, ChannelNorm)
    (miss,) = audit["not_fused"]
    assert miss["reason"] == "axis is not the last axis (mean over axes [1] of a rank-3 tensor)"


@I.ir_module
class EpsAtRunTime:
    @R.function
    def main(x: R.Tensor((1, 16, 32), "float32"), eps: R.Tensor((), "float32")):
        with R.dataflow():
            mean = R.mean(x, axis=[-1], keepdims=True)
            centred = R.subtract(x, mean)
            squared = R.power(centred, R.const(2.0, "float32"))
            variance = R.mean(squared, axis=[-1], keepdims=True)
            shifted = R.add(variance, eps)
            std = R.sqrt(shifted)
            out = R.divide(centred, std)
            R.output(out)
        return out


def test_eps_computed_at_run_time_must_not_fuse():
    """nn.layer_norm's epsilon is an attribute: a run-time eps cannot become one."""
    after, audit = run_pass(layer_norm, EpsAtRunTime)
    assert_rewrites_to(after, EpsAtRunTime)
    (miss,) = audit["not_fused"]
    assert miss == {
        "pattern": "layer_norm",
        "nodes": ["mean", "centred", "squared", "variance", "shifted", "std", "out"],
        "reason": "eps is not a constant",
    }


@I.ir_module
class DynamicTokens:
    @R.function
    def main(x: R.Tensor(("n", 32), "float32")):
        with R.dataflow():
            mean = R.mean(x, axis=[-1], keepdims=True)
            centred = R.subtract(x, mean)
            squared = R.power(centred, R.const(2.0, "float32"))
            variance = R.mean(squared, axis=[-1], keepdims=True)
            shifted = R.add(variance, R.const(1e-5, "float32"))
            std = R.sqrt(shifted)
            out = R.divide(centred, std)
            R.output(out)
        return out


def test_a_dynamic_shape_is_a_near_miss():
    after, audit = run_pass(layer_norm, DynamicTokens)
    assert_rewrites_to(after, DynamicTokens)
    assert audit["not_fused"][0]["reason"] == "dynamic shape ('mean')"
