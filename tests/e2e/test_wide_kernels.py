"""Issue 20, item 3: convs past the conv instruction's kernel-WIDTH and left/right PADDING
limits run on the VPU (compiler/lower/codegen/kernel_split.py): kernel columns as pieces
accumulated in int32 over the input cropped to the columns each reads, and where the
left/right padding is past the limit, the input band staged into a tile whose rows hold
that padding (tile_im2col.PaddedBand). Each form is a QDQ model (per-channel weights)
compiled for every VPU target, run on the simulator and checked against onnxruntime's QDQ
reference (`vpuc run --check`: within 1 LSB, the contract of the conv tests), its report
row saying "decomposed: ..."; every conv instruction keeps the target's limits."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from test_whole_models import TARGETS, _run_check

from tests.e2e.ort_qdq import quantize_qdq
from vpuc.compiler import compile_model
from vpuc.compiler.lower.codegen import tile_im2col
from vpuc.examples.graph_builder import GraphBuilder
from vpuc.runtime import load
from vpuc.targets import load_target
from vpuc.targets.isa.formats import Conv
from vpuc.targets.isa.program import Program

SIZE = (12, 14)  # input H x W


def _wide(kernel, pads, cin=3, cout=8, group=1, strides=(1, 1), dilation=(1, 1), nchw=True):
    """x -> conv (the form under test) -> relu: the wide conv reads the model's input (in
    DRAM) or, grouped, the output of a 1x1 conv before it (resident in SRAM)."""
    b = GraphBuilder("wide", seed=11)
    x = "x"
    if not nchw:
        x = b.op("Transpose", [x], "to_nchw", perm=[0, 3, 1, 2])
    if group > 1:  # a conv before it: the wide conv reads the VPU's own tensor
        x = b.op("Relu", [b.conv(x, "pre", cin, cin, kernel=1)], "pre_relu")
    fan = (cin // group) * kernel[0] * kernel[1]
    w = b.he_weight("wide.weight", (cout, cin // group, *kernel), fan)
    y = b.op(
        "Conv", [x, w, b.small_bias("wide.bias", cout)], "wide", kernel_shape=list(kernel),
        pads=list(pads), strides=list(strides), dilations=list(dilation), group=group,
    )  # fmt: skip
    y = b.op("Relu", [y], "relu")
    (h, w_), (kh, kw) = SIZE, kernel
    oh = (h + pads[0] + pads[2] - dilation[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (w_ + pads[1] + pads[3] - dilation[1] * (kw - 1) - 1) // strides[1] + 1
    shape = [1, cin, *SIZE] if nchw else [1, *SIZE, cin]
    return b.model({"x": shape}, {y: [1, cout, oh, ow]}), shape


FORMS = {
    "1x9": dict(kernel=(1, 9), pads=(0, 4, 0, 4)),
    "3x11_stride2": dict(kernel=(3, 11), pads=(1, 5, 1, 5), strides=(1, 2)),
    "5x1_pads4": dict(kernel=(5, 1), pads=(2, 4, 2, 4)),
    "10x9_pads8": dict(kernel=(10, 9), pads=(4, 8, 5, 8), strides=(2, 1)),
    "dilated_3x9": dict(kernel=(3, 9), pads=(1, 8, 1, 8), dilation=(1, 2)),
    "depthwise_3x9": dict(kernel=(3, 9), pads=(1, 8, 1, 8), cin=8, cout=8, group=8),
    "grouped_1x9": dict(kernel=(1, 9), pads=(0, 4, 0, 4), cin=4, cout=8, group=2),
    "nhwc_1x9": dict(kernel=(1, 9), pads=(0, 4, 0, 4), nchw=False),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("form", FORMS)
def test_a_wide_or_widely_padded_conv_runs_on_the_vpu_exactly(vpuc, tmp_path, monkeypatch, form, target):
    monkeypatch.setattr(tile_im2col, "CHOOSE", "conv")  # the conv's pieces, not an im2col
    model, shape = _wide(**FORMS[form])
    _, qdq_path = quantize_qdq(model, tmp_path, shape)
    artifact = compile_model(qdq_path, target=target, profitability=False)
    ops = {o["name"]: o for o in artifact.report["partition"]["ops"]}
    assert ops["wide"]["device"] == "vpu", ops["wide"]["reason"]
    kernel_max, pad_max = _limits(target)
    (kh, kw), pads = FORMS[form]["kernel"], FORMS[form]["pads"]
    if max(kh, kw) > kernel_max or max(pads) > pad_max:
        assert f"decomposed: {kh}x{kw} kernel with padding {list(pads)}" in ops["wide"]["reason"]
        convs = _conv_instructions(artifact)
        for i in convs:
            assert max(i.kernel_h, i.kernel_w) <= kernel_max, i
            assert max(i.pad_top, i.pad_bottom, i.pad_left, i.pad_right) <= pad_max, i
        if max(kh, kw) > kernel_max:  # the sub-kernels add onto one accumulator
            assert any(i.accumulate for i in convs)
    _run_check(vpuc, artifact.save(tmp_path / "m.vpub"), qdq_path)


@pytest.mark.parametrize("form", FORMS)
def test_the_pieces_are_bit_equal_to_the_whole_conv(tmp_path, monkeypatch, form):
    """Numeric truth from the conv instruction itself: the same model on `vpu` and on `vpu`
    with its kernel and padding limits raised to the fields' range (the whole conv, one
    instruction, sim/reference.py's integer semantics) gives the same bytes."""
    monkeypatch.setattr(tile_im2col, "CHOOSE", "conv")
    model, shape = _wide(**FORMS[form])
    _, qdq_path = quantize_qdq(model, tmp_path, shape)
    target = load_target("vpu")
    whole = replace(target, ops={**target.ops, "conv2d": {**target.ops["conv2d"], "kernel": [1, 255],
                                                          "padding": [0, 255]}})  # fmt: skip
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    outputs = []
    for t in (target, whole):
        artifact = compile_model(qdq_path, target=t, profitability=False, reference=False)
        ops = {o["name"]: o for o in artifact.report["partition"]["ops"]}
        assert ops["wide"]["device"] == "vpu", ops["wide"]["reason"]
        assert ("decomposed" in ops["wide"]["reason"]) == (t is target)
        outputs.append(load(artifact.save(tmp_path / f"{t is target}.vpub")).run({"x": x}))
    (split,), (one,) = (list(o.values()) for o in outputs)
    assert np.array_equal(split, one)


def _limits(target: str) -> tuple[int, int]:
    limits = load_target(target).op_limits("conv2d")
    return limits["kernel"][1], limits["padding"][1]


def _conv_instructions(artifact) -> list[Conv]:
    return [
        i
        for entry in artifact.manifest["vpu_programs"]
        for i in Program.from_bytes(artifact.members[entry["program"]]).instructions
        if isinstance(i, Conv)
    ]
