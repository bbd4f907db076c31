"""SmoothQuant (compiler/quantize/transforms/smoothquant.py): the rewrite (Before/Expected), the balance
it promises, and that the float model still computes what onnxruntime computes."""

from __future__ import annotations

import numpy as np
import tvm
from method_models import run_onnx, run_relax
from quantize_testing import optimised_zoo
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from vpuc.compiler.partition import partition_for_vpu
from vpuc.compiler.quantize.bindings import BindingView
from vpuc.compiler.quantize.plan import CompositePlan, QuantPlan, plan_quantization
from vpuc.compiler.quantize.transforms import smoothquant
from vpuc.examples import zoo
from vpuc.targets import load_target

RNG = np.random.default_rng(5)
W = RNG.standard_normal((8, 4)).astype(np.float32)
B = RNG.standard_normal((4,)).astype(np.float32)
ABSMAX = np.array([0.5, 40.0, 1.0, 2.0, 0.1, 8.0, 1.0, 3.0], np.float32)


@I.ir_module
class Before:
    @R.function
    def main(x: R.Tensor((1, 5, 8), "float32"), w: R.Tensor((8, 4), "float32"), b: R.Tensor((4,), "float32")):
        with R.dataflow():
            h = R.exp(x)
            mm = R.matmul(h, w)
            y = R.add(mm, b)
            R.output(y)
        return y


@I.ir_module
class Expected:
    @R.function
    def main(
        x: R.Tensor((1, 5, 8), "float32"),
        inv: R.Tensor((8,), "float32"),
        w: R.Tensor((8, 4), "float32"),
        b: R.Tensor((4,), "float32"),
    ):
        with R.dataflow():
            h = R.exp(x)
            h_smooth = R.multiply(h, inv)
            mm = R.matmul(h_smooth, w)
            y = R.add(mm, b)
            R.output(y)
        return y


PLAN = QuantPlan(
    (
        CompositePlan(
            "vpu.dense_bias", 0, "dense", ("mm", "y"), "mm", "y", None, "y", ("h",), (-np.inf, np.inf)
        ),
    )
)


def _bind(mod, **params):
    return relax.transform.BindParams("main", {k: np.asarray(v, np.float32) for k, v in params.items()})(mod)


def test_dense_input_is_divided_and_the_weight_rows_multiplied():
    """x W = (x / s)(s W), s_j = sqrt(max|x_j| / max|W_j,:|) at alpha 0.5; the multiply sits on
    the CPU side (blocked for the partitioner) and the plan's dense now reads it."""
    before = _bind(Before, w=W, b=B)
    (candidate,) = smoothquant.candidates(before["main"], PLAN)
    assert (candidate.tensor, candidate.cores, candidate.channels) == ("h", ("mm",), 8)
    result = smoothquant.smooth(before, PLAN, [candidate], {"h": ABSMAX}, alpha=0.5)
    s = ABSMAX.astype(np.float64) ** 0.5 / np.abs(W).max(axis=1).astype(np.float64) ** 0.5
    s = s.astype(np.float32)
    expected = _bind(Expected, inv=(1.0 / s).astype(np.float32), w=W * s[:, None], b=B)
    tvm.ir.assert_structural_equal(result.mod["main"], expected["main"], map_free_vars=True)
    assert result.plan.composites[0].inputs == ("h_smooth",)
    assert result.blocked == {"h_smooth": smoothquant.SMOOTH_REASON}


def test_alpha_half_balances_activation_and_weight_ranges():
    """After migration at alpha 0.5 each input channel's activation range equals the range of
    its weight row: max|x_j / s_j| = max|W_j s_j| (read off the rewritten module)."""
    before = _bind(Before, w=W, b=B)
    result = smoothquant.smooth(
        before, PLAN, smoothquant.candidates(before["main"], PLAN), {"h": ABSMAX}, 0.5
    )
    view = BindingView.of(result.mod["main"])
    inverse = view.constant(view.values["h_smooth"].args[1])
    weight = view.constant(view.values["mm"].args[1])
    np.testing.assert_allclose(ABSMAX * inverse, np.abs(weight).max(axis=1), rtol=1e-5)


def test_transformer_encoder_computes_what_onnxruntime_computes():
    """Any positive scales keep the function: the smoothed float module of the zoo's
    transformer (every dense layer the op list takes, some reading LayerNorm outputs)
    against onnxruntime."""
    mod, provenance, imported = optimised_zoo("transformer_encoder")
    target = load_target("vpu")
    # every dense layer the op list takes (on `vpu` the fitted host figures keep them on the
    # host: the profitability rule is not what this test is about)
    placement = partition_for_vpu(mod, target, imported.onnx_model, provenance, profitability=False).placement
    plan = plan_quantization(mod["main"], placement)
    found = smoothquant.candidates(mod["main"], plan)
    assert found and {c.channels for c in found} <= {32, 64}  # d_model and the FFN's width
    absmax = {c.tensor: RNG.uniform(0.1, 30.0, c.channels).astype(np.float32) for c in found}
    result = smoothquant.smooth(mod, plan, found, absmax, alpha=0.5)
    feeds = [
        {"tokens": np.random.default_rng(i).standard_normal((1, 16, 32)).astype(np.float32)} for i in range(2)
    ]
    expected = run_onnx(zoo.build("transformer_encoder"), feeds)
    np.testing.assert_allclose(run_relax(result.mod, feeds), expected, rtol=1e-4, atol=1e-4)
