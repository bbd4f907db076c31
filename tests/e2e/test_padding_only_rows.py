"""Issue 20: a conv whose padding on one side is as large as its kernel, so that its outer
output rows read only padding (tf2onnx SAME on small maps, the fuzzer's exports: 21% of
its convs on `vpu`), runs on the VPU: its input is staged into a tile holding all of its
padding (the zero point), and those rows come out of the conv instruction as the
requantised bias (kernel_split.Split.staged_rows; tests/lower/test_padding_only_rows.py
checks the bits against the numpy int8 reference). Each form is an onnxruntime QDQ export
(per-channel weights) in NCHW and NHWC, compiled for every VPU target, run on the
simulator and checked against onnxruntime's QDQ reference (`vpuc run --check`, within 1 LSB);
its partition row says "decomposed: ..." and names the rows."""

from __future__ import annotations

import pytest
from test_whole_models import TARGETS, _run_check

from tests.e2e.ort_qdq import quantize_qdq
from vpuc.compiler import compile_model
from vpuc.examples.graph_builder import GraphBuilder

SIZE = (7, 9)  # input H x W: a small map, as SAME padding meets it

# kernel, pads (top, left, bottom, right), strides; each pad past the kernel's reach on one side
FORMS = {
    "4x3_top6": dict(kernel=(4, 3), pads=(6, 1, 0, 1)),
    "1x1_top5_bottom6": dict(kernel=(1, 1), pads=(5, 0, 6, 0)),
    "3x5_bottom6_stride2": dict(kernel=(3, 5), pads=(1, 2, 6, 2), strides=(2, 1)),
    "6x6_pads6": dict(kernel=(6, 6), pads=(6, 6, 6, 6)),
}


def _padded(kernel, pads, strides=(1, 1), nchw=True, cin=3, cout=8):
    """x -> conv (the form under test) -> relu -> 1x1 conv: the padded conv reads the
    model's input; the one after it reads the padded conv's output on the VPU."""
    b = GraphBuilder("padded", seed=13)
    x = "x" if nchw else b.op("Transpose", ["x"], "to_nchw", perm=[0, 3, 1, 2])
    w = b.he_weight("padded.weight", (cout, cin, *kernel), cin * kernel[0] * kernel[1])
    y = b.op(
        "Conv", [x, w, b.small_bias("padded.bias", cout)], "padded", kernel_shape=list(kernel),
        pads=list(pads), strides=list(strides),
    )  # fmt: skip
    y = b.op("Relu", [y], "relu")
    y = b.conv(y, "after", cout, 4, kernel=1)
    (h, w_), (kh, kw) = SIZE, kernel
    oh = (h + pads[0] + pads[2] - kh) // strides[0] + 1
    ow = (w_ + pads[1] + pads[3] - kw) // strides[1] + 1
    shape = [1, cin, *SIZE] if nchw else [1, *SIZE, cin]
    return b.model({"x": shape}, {y: [1, 4, oh, ow]}), shape


@pytest.mark.parametrize("nchw", [True, False], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("form", FORMS)
def test_a_conv_whose_outer_rows_read_only_padding_runs_on_the_vpu(vpuc, tmp_path, form, target, nchw):
    model, shape = _padded(**FORMS[form], nchw=nchw)
    _, qdq_path = quantize_qdq(model, tmp_path, shape)
    artifact = compile_model(qdq_path, target=target, profitability=False)
    ops = {o["name"]: o for o in artifact.report["partition"]["ops"]}
    assert ops["padded"]["device"] == "vpu", ops["padded"]["reason"]
    assert ops["after"]["subgraph"] == ops["padded"]["subgraph"]
    (kh, kw), pads = FORMS[form]["kernel"], FORMS[form]["pads"]
    reason = ops["padded"]["reason"]
    assert f"decomposed: {kh}x{kw} kernel with padding {list(pads)}" in reason, reason
    assert "read only padding and compute the bias" in reason, reason
    _run_check(vpuc, artifact.save(tmp_path / "m.vpub"), qdq_path)
