"""fold_constants: layout ops and arithmetic on constants fold in numpy; the size guard
keeps an Expand of a small constant unfolded and says so in the audit."""

from __future__ import annotations

import numpy as np
from pass_testing import assert_rewrites_to, bind, rng_array, run_pass
from tvm.script import ir as I
from tvm.script import relax as R

from vpuc.compiler.passes import fold_constants


@I.ir_module
class WeightTransposeAndBiasReshape:
    @R.function
    def main(x: R.Tensor((2, 3), "float32"), w: R.Tensor((4, 3), "float32"), b: R.Tensor((4,), "float32")):
        with R.dataflow():
            wt = R.permute_dims(w, axes=[1, 0])
            y = R.matmul(x, wt)
            b2 = R.reshape(b, R.shape([1, 4]))
            out = R.add(y, b2)
            R.output(out)
        return out


@I.ir_module
class WeightTransposeAndBiasReshapeFolded:
    @R.function
    def main(
        x: R.Tensor((2, 3), "float32"), wt: R.Tensor((3, 4), "float32"), b2: R.Tensor((1, 4), "float32")
    ):
        with R.dataflow():
            y = R.matmul(x, wt)
            out = R.add(y, b2)
            R.output(out)
        return out


def test_layout_ops_of_constants_fold_in_numpy():
    """permute_dims(W) and reshape(b) of constants are those constants rearranged: the
    Gemm weight transpose and the conv bias reshape every import has."""
    w, b = rng_array((4, 3)), rng_array(4, seed=1)
    after, audit = run_pass(fold_constants, bind(WeightTransposeAndBiasReshape, w=w, b=b))
    expected = bind(WeightTransposeAndBiasReshapeFolded, wt=w.T.copy(), b2=b.reshape(1, 4))
    assert_rewrites_to(after, expected)
    assert audit == {"fused": [], "not_fused": []}


@I.ir_module
class ExpandOfSmallConstant:
    @R.function
    def main(x: R.Tensor((2, 4, 12, 12), "float32"), s: R.Tensor((1, 4, 1, 1), "float32")):
        with R.dataflow():
            big = R.broadcast_to(s, R.shape([2, 4, 12, 12]))
            out = R.multiply(x, big)
            R.output(out)
        return out


def test_size_guard_keeps_an_expand_of_a_small_constant():
    """Folding would turn 4 floats into 1152 (288x, the guard allows 4x): the broadcast
    stays and the audit names it with the figures."""
    before = bind(ExpandOfSmallConstant, s=rng_array((1, 4, 1, 1)))
    after, audit = run_pass(fold_constants, before)
    assert_rewrites_to(after, before)
    (miss,) = audit["not_fused"]
    assert miss["pattern"] == "constant_fold" and miss["nodes"] == ["big"]
    assert "1152 elements" in miss["reason"] and "288x" in miss["reason"]


def test_size_guard_threshold_is_configurable():
    """With the growth limit raised above 288x the same broadcast folds."""
    s = rng_array((1, 4, 1, 1))
    after, audit = run_pass(fold_constants, bind(ExpandOfSmallConstant, s=s), fold_max_growth=300.0)
    calls = [b.value.op.name for b in after["main"].body.blocks[0].bindings]
    assert calls == ["relax.multiply"] and audit["not_fused"] == []


@I.ir_module
class ArithmeticChain:
    @R.function
    def main(x: R.Tensor((3,), "float32"), a: R.Tensor((3,), "float32")):
        with R.dataflow():
            s = R.sqrt(R.add(a, R.const(1.0, "float32")))
            out = R.multiply(x, s)
            R.output(out)
        return out


def test_chains_of_constant_arithmetic_fold_in_one_sweep():
    """sqrt(a + 1) of a constant a is the constant sqrt(a + 1), computed in float32."""
    a = np.array([0.0, 3.0, 8.0], "float32")
    after, _ = run_pass(fold_constants, bind(ArithmeticChain, a=a))
    (binding,) = after["main"].body.blocks[0].bindings
    np.testing.assert_array_equal(binding.value.args[1].value.numpy(), np.array([1.0, 2.0, 3.0], "float32"))
