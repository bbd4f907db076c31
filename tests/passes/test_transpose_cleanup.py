"""transpose_cleanup: inverse permutations cancel, chains merge, identities and unit-axis
moves become nothing or a reshape, broadcasts into elementwise ops go, and a transpose
moves past an elementwise op towards its inverse."""

from __future__ import annotations

from pass_testing import assert_rewrites_to, bind, rng_array, run_pass
from tvm.script import ir as I
from tvm.script import relax as R

from vpuc.compiler.passes import transpose_cleanup


@I.ir_module
class NhwcRoundTrip:
    """tf2onnx: NHWC input -> NCHW for the conv -> back to NHWC."""

    @R.function
    def main(x: R.Tensor((1, 8, 8, 3), "float32")):
        with R.dataflow():
            nchw = R.permute_dims(x, axes=[0, 3, 1, 2])
            nhwc = R.permute_dims(nchw, axes=[0, 2, 3, 1])
            out = R.nn.relu(nhwc)
            R.output(out)
        return out


@I.ir_module
class NoTransposes:
    @R.function
    def main(x: R.Tensor((1, 8, 8, 3), "float32")):
        with R.dataflow():
            out = R.nn.relu(x)
            R.output(out)
        return out


def test_inverse_permutations_cancel():
    """p = (0 3 1 2), q = (0 2 3 1): p[q] = (0 1 2 3), the identity."""
    after, audit = run_pass(transpose_cleanup, NhwcRoundTrip)
    assert_rewrites_to(after, NoTransposes)
    assert audit["fused"] == [
        {
            "pattern": "transpose_cancel",
            "nodes": ["nchw", "nhwc"],
            "reason": "nothing (inverse permutations cancel)",
        }
    ]


@I.ir_module
class HeadSplitThenKTranspose:
    @R.function
    def main(k: R.Tensor((1, 16, 2, 8), "float32")):
        with R.dataflow():
            heads = R.permute_dims(k, axes=[0, 2, 1, 3])
            kt = R.permute_dims(heads, axes=[0, 1, 3, 2])
            R.output(kt)
        return kt


@I.ir_module
class OneTranspose:
    @R.function
    def main(k: R.Tensor((1, 16, 2, 8), "float32")):
        with R.dataflow():
            kt = R.permute_dims(k, axes=[0, 2, 3, 1])
            R.output(kt)
        return kt


def test_a_chain_merges_into_one_permutation():
    """(0 2 1 3) then (0 1 3 2) is (0 2 3 1): PyTorch's K^T after the head split."""
    after, _ = run_pass(transpose_cleanup, HeadSplitThenKTranspose)
    assert_rewrites_to(after, OneTranspose)


@I.ir_module
class PooledToNchw:
    """After a global pool in NHWC, the transpose back to NCHW moves only unit axes."""

    @R.function
    def main(x: R.Tensor((1, 1, 1, 32), "float32")):
        with R.dataflow():
            nchw = R.permute_dims(x, axes=[0, 3, 1, 2])
            flat = R.reshape(nchw, R.shape([1, 32]))
            R.output(flat)
        return flat


@I.ir_module
class OneReshape:
    @R.function
    def main(x: R.Tensor((1, 1, 1, 32), "float32")):
        with R.dataflow():
            flat = R.reshape(x, R.shape([1, 32]))
            R.output(flat)
        return flat


def test_a_transpose_of_unit_axes_is_a_reshape_and_reshape_chains_merge():
    after, audit = run_pass(transpose_cleanup, PooledToNchw)
    assert_rewrites_to(after, OneReshape)
    assert [e["pattern"] for e in audit["fused"]] == ["transpose_to_reshape", "reshape_cleanup"]


@I.ir_module
class ExpandedScale:
    @R.function
    def main(x: R.Tensor((2, 4, 6, 6), "float32"), s: R.Tensor((1, 4, 1, 1), "float32")):
        with R.dataflow():
            big = R.broadcast_to(s, R.shape([2, 4, 6, 6]))
            out = R.multiply(x, big)
            R.output(out)
        return out


@I.ir_module
class ImplicitBroadcast:
    @R.function
    def main(x: R.Tensor((2, 4, 6, 6), "float32"), s: R.Tensor((1, 4, 1, 1), "float32")):
        with R.dataflow():
            out = R.multiply(x, s)
            R.output(out)
        return out


def test_a_broadcast_into_an_elementwise_op_goes():
    """multiply broadcasts s itself: the explicit broadcast_to adds nothing."""
    s = rng_array((1, 4, 1, 1))
    after, _ = run_pass(transpose_cleanup, bind(ExpandedScale, s=s))
    assert_rewrites_to(after, bind(ImplicitBroadcast, s=s))


@I.ir_module
class TransposeAroundClip:
    """What ConvertLayout leaves around an op it has no layout rule for."""

    @R.function
    def main(x: R.Tensor((1, 8, 8, 4), "float32")):
        with R.dataflow():
            nchw = R.permute_dims(x, axes=[0, 3, 1, 2])
            clipped = R.clip(nchw, 0.0, 6.0)
            nhwc = R.permute_dims(clipped, axes=[0, 2, 3, 1])
            R.output(nhwc)
        return nhwc


@I.ir_module
class ClipInNhwc:
    @R.function
    def main(x: R.Tensor((1, 8, 8, 4), "float32")):
        with R.dataflow():
            nhwc = R.clip(x, 0.0, 6.0)
            R.output(nhwc)
        return nhwc


def test_a_transpose_sinks_past_an_elementwise_op_and_cancels():
    """clip(permute(x)) = permute(clip(x)): the permute then meets its inverse."""
    after, audit = run_pass(transpose_cleanup, TransposeAroundClip)
    assert_rewrites_to(after, ClipInNhwc)
    assert [e["pattern"] for e in audit["fused"]] == ["transpose_sink", "transpose_cancel"]


@I.ir_module
class TransposeAfterDequantize:
    """An int8 NCHW input dequantized, then transposed to NHWC for the conv (layout pass)."""

    @R.function
    def main(x: R.Tensor((1, 3, 8, 8), "int8")):
        with R.dataflow():
            dq = R.dequantize(x, R.const(0.5, "float32"), R.const(3, "int8"), axis=1)
            nhwc = R.permute_dims(dq, axes=[0, 2, 3, 1])
            R.output(nhwc)
        return nhwc


@I.ir_module
class DequantizeAfterTranspose:
    @R.function
    def main(x: R.Tensor((1, 3, 8, 8), "int8")):
        with R.dataflow():
            moved = R.permute_dims(x, axes=[0, 2, 3, 1])
            nhwc = R.dequantize(moved, R.const(0.5, "float32"), R.const(3, "int8"), axis=3)
            R.output(nhwc)
        return nhwc


def test_a_transpose_after_a_dequantize_moves_onto_the_int8_tensor():
    """dequantize is elementwise: permute(dq(q, axis=1), (0 2 3 1)) = dq(permute(q), axis=3)
    (NCHW axis 1 is NHWC axis 3)."""
    after, audit = run_pass(transpose_cleanup, TransposeAfterDequantize)
    assert_rewrites_to(after, DequantizeAfterTranspose)
    assert [e["pattern"] for e in audit["fused"]] == ["transpose_hoist"]
