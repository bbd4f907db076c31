"""Cross-layer equalisation (compiler/quantize/transforms/equalize.py): which chains it takes, what it
rewrites (Before/Expected), the balance it promises, and that the float model still computes
what onnxruntime computes on the original ONNX model."""

from __future__ import annotations

import numpy as np
import tvm
from method_models import depthwise_separable_relu, run_onnx, run_relax
from quantize_testing import optimised
from tvm.script import ir as I
from tvm.script import relax as R

from vpuc.compiler.quantize.bindings import BindingView
from vpuc.compiler.quantize.transforms import equalize

RNG = np.random.default_rng(3)
W1 = (RNG.standard_normal((4, 1, 1, 3)) * np.array([0.1, 1.0, 5.0, 0.5])[:, None, None, None]).astype(
    np.float32
)
B1 = RNG.standard_normal((1, 1, 1, 4)).astype(np.float32)
W2 = RNG.standard_normal((6, 3, 3, 4)).astype(np.float32)


@I.ir_module
class Before:
    @R.function
    def main(
        x: R.Tensor((1, 8, 8, 3), "float32"),
        w1: R.Tensor((4, 1, 1, 3), "float32"),
        b1: R.Tensor((1, 1, 1, 4), "float32"),
        w2: R.Tensor((6, 3, 3, 4), "float32"),
    ):
        with R.dataflow():
            conv1 = R.nn.conv2d(x, w1, data_layout="NHWC", kernel_layout="OHWI")
            bias1 = R.add(conv1, b1)
            relu1 = R.nn.relu(bias1)
            pool = R.nn.max_pool2d(relu1, pool_size=[2, 2], strides=[2, 2], layout="NHWC")
            conv2 = R.nn.conv2d(pool, w2, padding=[1, 1, 1, 1], data_layout="NHWC", kernel_layout="OHWI")
            R.output(conv2)
        return conv2


def _bound(w1, b1, w2):
    from tvm import relax

    params = {"w1": w1, "b1": b1, "w2": w2}
    return relax.transform.BindParams("main", {k: np.asarray(v, np.float32) for k, v in params.items()})(
        Before
    )


def test_conv_relu_pool_conv_is_rescaled_per_channel():
    """Only constants change: W1 and b1 divided by s per output channel, W2 multiplied by s per
    input channel, s = sqrt(max|W1[i]| / max|W2[:, :, :, i]|) (one pair: balanced after one round)."""
    result = equalize.equalize(_bound(W1, B1, W2))
    r1 = np.abs(W1.astype(np.float64)).reshape(4, -1).max(axis=1)  # the pass works in float64
    r2 = np.abs(W2.astype(np.float64)).max(axis=(0, 1, 2))
    s = np.sqrt(r1 / r2)
    expected = _bound(W1 / s[:, None, None, None], B1 / s, W2 * s)
    tvm.ir.assert_structural_equal(result.mod["main"], expected["main"], map_free_vars=True)
    assert [(p.first, p.first_bias, p.second, p.through) for p in result.pairs] == [
        ("conv1", "bias1", "conv2", ("relu1", "pool"))
    ]


def _weights(mod, name):
    view = BindingView.of(mod["main"])
    return view.constant(view.values[name].args[1])


def test_equalised_ranges_match():
    """The promise of equalisation, checked on the result alone: output channel i of the first
    conv and input channel i of the second have the same weight range."""
    mod = equalize.equalize(_bound(W1, B1, W2)).mod
    first, second = _weights(mod, "conv1"), _weights(mod, "conv2")
    np.testing.assert_allclose(
        np.abs(first).reshape(4, -1).max(axis=1), np.abs(second).max(axis=(0, 1, 2)), rtol=1e-5
    )


def test_relu6_chains_are_not_equalised(zoo_optimised):
    """relu6(z / s) != relu6(z) / s: mobilenet_mini's chains all pass a Clip(0, 6)."""
    mod, _, _ = zoo_optimised("mobilenet_mini")
    assert equalize.pairs(mod["main"]) == []


def test_tinyconvnet_chains_through_max_pooling(zoo_optimised):
    mod, provenance, _ = zoo_optimised("tinyconvnet")
    found = equalize.pairs(mod["main"])
    named = [(provenance[p.first][0], provenance[p.second][0]) for p in found]
    assert named == [
        ("stage1/conv", "stage2/conv"),
        ("stage2/conv", "stage3/conv"),
        ("stage3/conv", "stage4/conv"),
    ]


def test_depthwise_separable_block_computes_what_onnxruntime_computes():
    """stem -> dw -> pw -> pw2 (relu between): three pairs, the depthwise conv in two of
    them; the equalised float module against onnxruntime on the original model."""
    model = depthwise_separable_relu()
    mod, provenance, imported = optimised(model)
    result = equalize.equalize(mod)
    assert [provenance[p.first][0] for p in result.pairs] == ["stem/conv", "dw/conv", "pw/conv"]
    depthwise = result.pairs[1].first
    spread_before = _spread(_weights(mod, depthwise))
    spread_after = _spread(_weights(result.mod, depthwise))
    assert spread_after < spread_before / 4  # the depthwise conv's channel ranges are balanced
    feeds = [
        {"input": np.random.default_rng(i).standard_normal((1, 3, 16, 16)).astype(np.float32)}
        for i in range(3)
    ]
    expected = run_onnx(model, feeds)
    np.testing.assert_allclose(
        run_relax(result.mod, feeds), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max()
    )


def _spread(weight: np.ndarray) -> float:
    ranges = np.abs(weight).reshape(weight.shape[0], -1).max(axis=1)
    return float(ranges.max() / ranges.min())
