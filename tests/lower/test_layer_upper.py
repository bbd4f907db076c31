"""A layer's upper bound from its conv's own tiling (oracle.most, layer_bound.most_cycles)
is at least the cycles the planner's answer estimates (oracle.answer: the layer tiled with
its im2cols too, emitted and estimated alone): the partitioner's edge rule keeps a layer on
the VPU on it without asking for the answer (edges.judge_move), which is only right if no
answer is ever above it. On the layers of test_layer_bound.py, random convs (hypothesis)
and the anchors' and tf2onnx models' layers, on the three VPU targets; the reference is the
answer itself, computed by planning every lowering (the bound plans one)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vpuc.compiler.lower.codegen import oracle
from vpuc.targets import load_target

from .test_layer_bound import LAYERS, _conv

TARGETS = ["vpu", "vpu-plus", "u55-256"]
ROOT = Path(__file__).resolve().parents[2]
MODELS = [
    ROOT.parent / "shared" / "anchors" / "tinyconv" / "tinyconv_int8_qdq.onnx",
    ROOT.parent / "shared" / "anchors" / "resnet8" / "resnet8_int8_qdq_nchw.onnx",
    ROOT / "tests" / "fixtures" / "tf2onnx" / "tflite_dscnn.onnx",
    ROOT / "tests" / "fixtures" / "tf2onnx" / "tflite_mobilenet.onnx",
]


def _model_views() -> list:
    """The distinct conv and dense layers of MODELS as the partitioner sees them (OpViews of
    the graph it builds after the front half)."""
    from vpuc.compiler.driver import CompileOptions, prepare_front
    from vpuc.compiler.partition.graph import build_graph

    views = {}
    for model in MODELS:
        if not model.is_file():
            continue
        front = prepare_front(model, "vpu", CompileOptions())
        graph = build_graph(front.mod["main"], front.provenance)
        for op in graph.ops.values():
            if op.view is not None and op.view.kind in ("conv2d", "dense"):
                views.setdefault(oracle._key(op.view), op.view)
    return list(views.values())


def _checked(view, target) -> tuple[int | None, int]:
    """(the bound, the answer's cycles), the bound asked first (from empty memos, as the
    edge rule asks it before any answer of that layer)."""
    oracle._ANSWERS.clear()
    upper = oracle.most(view, target)
    found = oracle.answer(view, target)
    return upper, found.cycles if found.fits else 0


@pytest.mark.parametrize("target_name", TARGETS)
def test_no_answer_is_above_the_upper_bound(target_name):
    target = load_target(target_name)
    found = {name: _checked(view, target) for name, view in LAYERS.items()}
    above = {name: pair for name, pair in found.items() if pair[0] is not None and pair[0] < pair[1]}
    assert not above, above
    # a bound for every conv and dense layer but the staged ones (their padding past the
    # conv instruction's limit: planned beside their staged tile)
    staged = ("wide padding (staged)", "big kernel (sub-kernels)")
    macs = [n for n, v in LAYERS.items() if v.kind in ("conv2d", "dense") and n not in staged]
    assert all(found[name][0] is not None for name in macs), found
    # a dense layer has no im2col: its own tiling is the answer
    assert found["dense"][0] == found["dense"][1]
    # vector layers have none (the edge rule asks for their answer)
    assert all(found[n][0] is None for n, v in LAYERS.items() if v.kind not in ("conv2d", "dense"))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cin=st.sampled_from([1, 2, 3, 4, 8, 16, 24]),
    h=st.integers(4, 40),
    w=st.integers(4, 40),
    cout=st.sampled_from([4, 8, 16, 24, 32, 64]),
    k=st.sampled_from([(1, 1), (3, 3), (5, 5), (3, 1), (1, 3), (10, 4), (7, 7)]),
    stride=st.sampled_from([(1, 1), (2, 2), (1, 2)]),
    padded=st.booleans(),
    target_name=st.sampled_from(TARGETS),
)
def test_random_convs_answer_within_the_upper_bound(cin, h, w, cout, k, stride, padded, target_name):
    """First-layer-like convs (few input channels: the im2cols apply) and others."""
    if k[0] > h or k[1] > w:
        return
    pads = (k[0] // 2, k[1] // 2, (k[0] - 1) // 2, (k[1] - 1) // 2) if padded else (0, 0, 0, 0)
    upper, cycles = _checked(_conv(cin, h, w, cout, k=k, s=stride, pads=pads), load_target(target_name))
    assert upper is None or upper >= cycles, (upper, cycles)


def test_the_models_layers_answer_within_the_upper_bound():
    """Every conv and dense layer of the anchors and the tf2onnx QDQ models as the
    partitioner sees them (their OpViews), on vpu and u55-256."""
    views = _model_views()
    if not views:
        pytest.skip("neither the anchors nor the tf2onnx fixtures are on this machine")
    checked = 0
    for target_name in ("vpu", "u55-256"):
        target = load_target(target_name)
        for view in views:
            upper, cycles = _checked(view, target)
            assert upper is None or upper >= cycles, (view, upper, cycles)
            checked += upper is not None
    assert checked >= 20
