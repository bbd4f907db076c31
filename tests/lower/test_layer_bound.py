"""A layer's lower bound without planning it (oracle.least, layer_bound.py) is at most the
cycles the planner's answer estimates (oracle.answer: the layer tiled, emitted and
estimated alone), on a spread of layers and the three VPU targets: the profitability rule
sends a subgraph to the CPU on it without asking for the answer, which is only right if no
answer is ever below it. It is also a bound worth having: not far below the answers."""

from __future__ import annotations

import pytest

from vpuc.compiler.lower.codegen import oracle
from vpuc.targets import load_target
from vpuc.targets.ops import OpView


def _conv(cin, h, w, cout, k=(3, 3), s=(1, 1), pads=(1, 1, 1, 1), dil=(1, 1), groups=1, n=1):
    oh = (h + pads[0] + pads[2] - dil[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (w + pads[1] + pads[3] - dil[1] * (k[1] - 1) - 1) // s[1] + 1
    attrs = {"kernel": k, "strides": s, "padding": pads, "dilation": dil, "groups": groups,
             "in_channels": cin, "out_channels": cout}  # fmt: skip
    weights = ((cout, cin // groups, *k), "int8")
    return OpView("conv2d", "conv", (((n, cin, h, w), "int8"), weights), ((n, cout, oh, ow), "int8"),
                  (False, True), attrs)  # fmt: skip


def _pool(kind, c, h, w, k, s, pads=(0, 0, 0, 0)):
    oh, ow = (h + pads[0] + pads[2] - k) // s + 1, (w + pads[1] + pads[3] - k) // s + 1
    attrs = {"pool": (k, k), "strides": (s, s), "padding": pads, "dilation": (1, 1)}
    return OpView(kind, kind, (((1, c, h, w), "int8"),), ((1, c, oh, ow), "int8"), (False,), attrs)


def _elementwise(kind, shape, second=None):
    inputs = ((shape, "int8"),) if second is None else ((shape, "int8"), (second, "int8"))
    return OpView(kind, kind, inputs, (shape, "int8"), (False,) * len(inputs))


LAYERS = {
    "conv 3x3": _conv(16, 12, 12, 16),
    "conv 3x3 stride 2": _conv(24, 15, 13, 40, s=(2, 2)),
    "first conv, 3 channels (im2col)": _conv(3, 48, 64, 8, s=(2, 2)),
    "pointwise": _conv(32, 10, 10, 64, k=(1, 1), pads=(0, 0, 0, 0)),
    "pointwise, batch 2": _conv(32, 6, 6, 48, k=(1, 1), pads=(0, 0, 0, 0), n=2),
    "depthwise": _conv(40, 9, 9, 40, groups=40),
    "depthwise stride 2": _conv(32, 12, 12, 32, s=(2, 2), groups=32),
    "depthwise as a global pool": _conv(32, 4, 4, 32, k=(4, 4), pads=(0, 0, 0, 0), groups=32),
    "dilated": _conv(16, 11, 9, 24, dil=(2, 2), pads=(2, 2, 2, 2)),
    "grouped": _conv(16, 8, 8, 32, groups=4, s=(1, 2)),
    "wide padding (staged)": _conv(8, 20, 20, 8, k=(1, 15), pads=(0, 7, 0, 7)),
    "big kernel (sub-kernels)": _conv(8, 16, 16, 8, k=(9, 9), pads=(4, 4, 4, 4)),
    "deep": _conv(300, 6, 6, 20, k=(1, 1), pads=(0, 0, 0, 0)),
    "dense": OpView(
        "dense",
        "fc",
        (((1, 200), "int8"), ((200, 10), "int8")),
        ((1, 10), "int8"),
        (False, True),
        {"in_channels": 200, "out_channels": 10},
    ),  # fmt: skip
    "max pool": _pool("max_pool2d", 16, 12, 12, 2, 2),
    "avg pool 3x3": _pool("avg_pool2d", 24, 10, 10, 3, 1, (1, 1, 1, 1)),
    "global avg pool": OpView("global_avg_pool", "gap", (((1, 32, 7, 7), "int8"),), ((1, 32, 1, 1), "int8")),
    "add": _elementwise("add", (1, 16, 8, 8), (1, 16, 8, 8)),
    "relu": _elementwise("relu", (1, 16, 24, 24)),
    "clip": _elementwise("clip", (1, 8, 6, 96)),
    "mul, broadcast": _elementwise("mul", (1, 16, 8, 8), (1, 16, 1, 1)),
    "sigmoid": _elementwise("sigmoid", (1, 16, 8, 8)),
    "softmax": _elementwise("softmax", (1, 1000)),
}


@pytest.mark.parametrize("target_name", ["vpu", "vpu-plus", "u55-256"])
def test_no_answer_is_below_the_bound(target_name):
    target = load_target(target_name)
    bounds, answers = {}, {}
    for name, view in LAYERS.items():
        answer = oracle.answer(view, target)
        assert answer.fits, (name, answer.reason)
        bounds[name], answers[name] = oracle.least(view, target), answer.cycles
    below = {name: (bounds[name], answers[name]) for name in LAYERS if bounds[name] > answers[name]}
    assert not below, below
    assert all(bounds[name] > 0 for name in LAYERS), bounds  # every one of these moves bytes
    # worth having: a conv's or dense layer's a third of its answer or more (the MAC array's
    # and DMA's terms; a vector layer's is its transfers' alone), half of them all told
    macs = [name for name, view in LAYERS.items() if view.kind in ("conv2d", "dense")]
    assert all(3 * bounds[name] >= answers[name] for name in macs), (bounds, answers)
    assert 2 * sum(bounds.values()) >= sum(answers.values()), (bounds, answers)


def test_a_layer_no_tiling_fits_is_bounded_by_nothing():
    """The planner refuses a layer no tiling of fits SRAM, and its answer has no cycles: the
    bound is 0 too (a bound above 0 would price it above what the exact rule does)."""
    target = load_target("vpu")
    huge = _elementwise("add", (1, 64, 512, 2048), (1, 64, 512, 2048))
    assert not oracle.answer(huge, target).fits
    assert oracle.least(huge, target) == 0
