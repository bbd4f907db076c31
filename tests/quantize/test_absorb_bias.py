"""Bias absorption (compiler/quantize/transforms/absorb_bias.py): what it moves (Before/Expected), and
that the float model computes the same on the samples its minima come from."""

from __future__ import annotations

import numpy as np
import tvm
from method_models import run_relax
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from vpuc.compiler.quantize.plan import CompositePlan, QuantPlan
from vpuc.compiler.quantize.transforms import absorb_bias

RNG = np.random.default_rng(11)
W1 = (RNG.standard_normal((6, 4)) * 0.3).astype(np.float32)
B1 = np.array([3.0, 0.1, 5.0, -1.0], np.float32)  # channels 0 and 2 never reach 0
W2 = RNG.standard_normal((4, 3)).astype(np.float32)
B2 = RNG.standard_normal((3,)).astype(np.float32)
INF = float("inf")


@I.ir_module
class Before:
    @R.function
    def main(
        x: R.Tensor((1, 6), "float32"),
        w1: R.Tensor((6, 4), "float32"),
        b1: R.Tensor((4,), "float32"),
        w2: R.Tensor((4, 3), "float32"),
        b2: R.Tensor((3,), "float32"),
    ):
        with R.dataflow():
            mm1 = R.matmul(x, w1)
            add1 = R.add(mm1, b1)
            relu1 = R.nn.relu(add1)
            mm2 = R.matmul(relu1, w2)
            add2 = R.add(mm2, b2)
            R.output(add2)
        return add2


def _bound(b1, b2):
    params = {"w1": W1, "b1": b1, "w2": W2, "b2": b2}
    return relax.transform.BindParams("main", {k: np.asarray(v, np.float32) for k, v in params.items()})(
        Before
    )


PLAN = QuantPlan(
    (
        CompositePlan(
            "vpu.dense_bias_act",
            0,
            "dense",
            ("mm1", "add1", "relu1"),
            "mm1",
            "add1",
            "relu1",
            "relu1",
            ("x",),
            (0.0, INF),
        ),
        CompositePlan(
            "vpu.dense_bias",
            0,
            "dense",
            ("mm2", "add2"),
            "mm2",
            "add2",
            None,
            "add2",
            ("relu1",),
            (-INF, INF),
        ),
    )
)


def test_the_always_present_part_moves_into_the_next_bias():
    """c = max(0, min relu1) per channel; b1 - c and b2 + c W2; relu1 is then read as max(relu1 - c, 0)."""
    mod = _bound(B1, B2)
    (candidate,) = absorb_bias.candidates(mod["main"], PLAN)
    samples = [{"x": RNG.uniform(-1, 1, (1, 6)).astype(np.float32)} for _ in range(16)]
    relu = np.maximum(np.stack([s["x"] @ W1 + B1 for s in samples]), 0.0)  # numpy: relu1 on every sample
    minimum = relu.reshape(-1, 4).min(axis=0).astype(np.float64)
    assert minimum[0] > 0 and minimum[2] > 0 and minimum[1] == minimum[3] == 0
    result = absorb_bias.absorb(mod, [candidate], {"relu1": minimum})
    shift = np.maximum(minimum, 0.0)
    expected = _bound(B1 - shift, B2 + shift @ W2.astype(np.float64))
    tvm.ir.assert_structural_equal(result.mod["main"], expected["main"], map_free_vars=True)
    np.testing.assert_allclose(run_relax(result.mod, samples), run_relax(mod, samples), rtol=1e-5, atol=1e-5)
    derived = result.derived["relu1"]({"relu1": relu[0]})
    np.testing.assert_allclose(derived, np.maximum(relu[0] - shift, 0.0), rtol=1e-6)
