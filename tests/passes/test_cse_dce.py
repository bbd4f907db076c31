"""cse and dce: a computation made twice is made once; what nothing reads goes."""

from __future__ import annotations

from pass_testing import assert_rewrites_to, run_pass
from tvm.script import ir as I
from tvm.script import relax as R

from vpuc.compiler.passes import cse, dce


@I.ir_module
class TwoResizes:
    """PyTorch traced F.interpolate(x) twice (torch_upsample_pad)."""

    @R.function
    def main(x: R.Tensor((1, 4, 6, 6), "float32")):
        with R.dataflow():
            a = R.image.resize2d(x, R.shape([12, 12]), method="nearest_neighbor")
            b = R.image.resize2d(x, R.shape([12, 12]), method="nearest_neighbor")
            ra = R.nn.relu(a)
            rb = R.nn.relu(b)
            out = R.add(ra, rb)
            R.output(out)
        return out


@I.ir_module
class OneResize:
    @R.function
    def main(x: R.Tensor((1, 4, 6, 6), "float32")):
        with R.dataflow():
            a = R.image.resize2d(x, R.shape([12, 12]), method="nearest_neighbor")
            ra = R.nn.relu(a)
            out = R.add(ra, ra)
            R.output(out)
        return out


def test_duplicated_chains_merge():
    """b is a, so relu(b) is relu(a): the merge carries down the chain."""
    after, audit = run_pass(cse, TwoResizes)
    assert_rewrites_to(after, OneResize)
    assert [e["nodes"] for e in audit["fused"]] == [["a", "b"], ["ra", "rb"]]


@I.ir_module
class DeadBranch:
    @R.function
    def main(x: R.Tensor((4,), "float32")):
        with R.dataflow():
            unused = R.exp(x)  # noqa: F841
            out = R.nn.relu(x)
            R.output(out)
        return out


@I.ir_module
class LiveOnly:
    @R.function
    def main(x: R.Tensor((4,), "float32")):
        with R.dataflow():
            out = R.nn.relu(x)
            R.output(out)
        return out


def test_dead_bindings_go():
    assert_rewrites_to(run_pass(dce, DeadBranch)[0], LiveOnly)
