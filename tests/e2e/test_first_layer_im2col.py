"""First-layer im2col (issue 20): a conv with 1 or 3 input channels, a 10x4 kernel and
asymmetric padding, quantised by onnxruntime's quantize_static (QDQ, per-channel weights),
compiled for each VPU target with the input NCHW and NHWC, run on the simulator and checked
against onnxruntime's QDQ reference (`vpuc run --check`: the gathered patches and the 1x1
conv over them, the gathered kernel rows and the 1 x kw conv over them, or the band in place
read as a column window by a kh x 1 conv, give the conv's int32 sums exactly). The report
names the layer's lowering."""

from __future__ import annotations

import json

import onnx
import pytest

from tests.e2e.ort_qdq import quantize_qdq
from vpuc.compiler import compile_model
from vpuc.compiler.lower.codegen import tile_im2col
from vpuc.examples.graph_builder import GraphBuilder

TARGETS = ("vpu", "vpu-plus", "u55-256")


def _first_conv_model(channels: int, nhwc: bool) -> tuple[onnx.ModelProto, list[int]]:
    """x (49x10, `channels` channels; NHWC through a leading Transpose, as tf2onnx exports)
    -> Conv 10x4, stride 2x1, pads [4, 1, 5, 2] (top, left, bottom, right), 16 channels,
    relu -> Conv 3x3 -> global pool -> FC."""
    b = GraphBuilder(f"first_conv_{channels}", seed=7)
    x = b.op("Transpose", ["x"], "to_nchw", perm=[0, 3, 1, 2]) if nhwc else "x"
    weight = b.he_weight("stem.weight", (16, channels, 10, 4), channels * 40)
    stem = b.op(
        "Conv", [x, weight, b.small_bias("stem.bias", 16)], "stem",
        kernel_shape=[10, 4], strides=[2, 1], pads=[4, 1, 5, 2],
    )  # fmt: skip
    y = b.op("Relu", [stem], "stem_relu")
    y = b.op("Relu", [b.conv(y, "conv2", 16, 16)], "relu2")
    y = b.global_pool_classifier(y, 16, 4)
    shape = [1, 49, 10, channels] if nhwc else [1, channels, 49, 10]
    return b.model({"x": shape}, {y: [1, 4]}), shape


LABELS = {
    "patches": lambda channels: f"im2col (K {channels * 40})",
    "rows": lambda channels: f"im2col of kernel rows ({channels * 10} channels, 1x4 kernel)",
    "columns": lambda channels: f"column window in place ({channels * 4} channels, 10x1 kernel)",
}
# the column window of an NCHW input: its band's planes interleaved by the load (Dma.interleave)
CASES = [(mode, channels, nhwc) for mode in LABELS for channels in (1, 3) for nhwc in (False, True)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode,channels,nhwc", CASES)
def test_a_few_channel_first_conv_runs_as_im2col_and_matches_onnxruntime(
    vpuc, tmp_path, monkeypatch, target, mode, channels, nhwc
):
    """Each im2col wherever it applies (the estimate prefers one of them, or the conv
    itself), so that every gather is checked on every target and layout."""
    monkeypatch.setattr(tile_im2col, "CHOOSE", mode)
    model, shape = _first_conv_model(channels, nhwc)
    _, qdq_path = quantize_qdq(model, tmp_path, shape)
    artifact = compile_model(qdq_path, target=target, profitability=False)
    ops = {o["name"]: o for o in artifact.report["partition"]["ops"]}
    assert ops["stem"]["device"] == "vpu", ops["stem"]["reason"]
    layers = artifact.report["vpu"]["layers"]
    (stem,) = [layer for layer in layers if "stem" in layer["nodes"]]
    assert stem["tiling"]["lowering"] == LABELS[mode](channels), stem["tiling"]
    ran = vpuc("run", artifact.save(tmp_path / "m.vpub"), "--check", qdq_path, "--json")
    assert ran.returncode == 0, ran.stderr
    report = json.loads(ran.stdout)
    assert report["check"]["passed"], json.dumps(report["check"], indent=1)
    assert all(o["max_lsb"] <= 1 for o in report["check"]["qdq"]["outputs"]), report["check"]["qdq"]


def test_the_planner_takes_im2col_for_a_one_channel_10x4_conv_and_the_assembly_says_so(vpuc, tmp_path):
    """On vpu the 1-channel 10x4 conv fills 1 of 16 array rows a tap; an im2col is faster by
    the estimate (the column window: 4 channels a kernel row, for the band's own load), so
    it is chosen without being asked, and `--emit-asm` notes it."""
    model, shape = _first_conv_model(1, nhwc=True)
    _, qdq_path = quantize_qdq(model, tmp_path, shape)
    artifact, folder = tmp_path / "m.vpub", tmp_path / "asm"
    compiled = vpuc("compile", qdq_path, "--target", "vpu", "-o", artifact, "--emit-asm", folder)
    assert compiled.returncode == 0, compiled.stderr
    text = "".join(source.read_text() for source in sorted(folder.glob("sg*.s")))
    assert "# lowered as column window in place (4 channels, 10x1 kernel)" in text
    assembled = vpuc("asm", sorted(folder.glob("sg*.s"))[0], "-o", tmp_path / "sg.bin")
    assert assembled.returncode == 0, assembled.stderr


def _resident_conv_model() -> tuple[onnx.ModelProto, list[int]]:
    """x 1x15x12x3 (NHWC, a leading Transpose) -> Conv 3x3 (6 channels) -> relu -> Conv 3x3,
    stride 2x1, pads [1, 0, 1, 2] (top, left, bottom, right), 16 channels, over the
    6-channel tensor the first conv left in SRAM -> relu -> global pool -> FC."""
    b = GraphBuilder("resident_window", seed=11)
    x = b.op("Transpose", ["x"], "to_nchw", perm=[0, 3, 1, 2])
    y = b.op("Relu", [b.conv(x, "stem", 3, 6)], "stem_relu")
    weight = b.he_weight("mid.weight", (16, 6, 3, 3), 54)
    mid = b.op(
        "Conv", [y, weight, b.small_bias("mid.bias", 16)], "mid",
        kernel_shape=[3, 3], strides=[2, 1], pads=[1, 0, 1, 2],
    )  # fmt: skip
    y = b.global_pool_classifier(b.op("Relu", [mid], "mid_relu"), 16, 4)
    return b.model({"x": [1, 15, 12, 3]}, {y: [1, 4]}), [1, 15, 12, 3]


STEM = "column window in place (9 channels, 3x1 kernel)"
PACKED_STEM = "column window in place ({} channels, 3x1 kernel, {} output columns a pixel)"
RESIDENT_LABELS = {  # (stem, mid) by mode and target; None: the conv itself
    "columns": {
        "vpu": (STEM, "column window of a resident input (18 channels, 3x1 kernel)"),
        "vpu-plus": (STEM, "column window of a resident input (18 channels, 3x1 kernel)"),
        "u55-256": (STEM, "column window in place (18 channels, 3x1 kernel)"),
    },
    "packed": {  # 6 outputs x 2 on 16 columns, x 4 on 32, not on u55-256's 8; the mid conv's 16 x 2 on 32
        "vpu": (PACKED_STEM.format(12, 2), None),
        "vpu-plus": (PACKED_STEM.format(18, 4),
                     "column window of a resident input (24 channels, 3x1 kernel, 2 output columns a pixel)"),
        "u55-256": (None, None),
    },
}  # fmt: skip


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", ["columns", "packed"])
def test_a_resident_few_channel_conv_as_a_column_window_matches_onnxruntime(
    vpuc, tmp_path, monkeypatch, target, mode
):
    """The column window of an input resident in SRAM: the vector unit copies the band's rows
    into the padded tile (asymmetric padding, a vertical stride), bit-exact with onnxruntime;
    packed, a wide pixel holds several output columns' windows. On u55-256 the planner keeps
    the stem's output in DRAM: the mid conv's window is then of a loaded band."""
    monkeypatch.setattr(tile_im2col, "CHOOSE", mode)
    model, shape = _resident_conv_model()
    _, qdq_path = quantize_qdq(model, tmp_path, shape)
    artifact = compile_model(qdq_path, target=target, profitability=False)
    layers = {node: layer for layer in artifact.report["vpu"]["layers"] for node in layer["nodes"]}
    lowered = tuple(layers[name]["tiling"].get("lowering") for name in ("stem", "mid"))
    assert lowered == RESIDENT_LABELS[mode][target]
    ran = vpuc("run", artifact.save(tmp_path / "m.vpub"), "--check", qdq_path, "--json")
    assert ran.returncode == 0, ran.stderr
    report = json.loads(ran.stdout)
    assert report["check"]["passed"], json.dumps(report["check"], indent=1)
    assert all(o["max_lsb"] <= 1 for o in report["check"]["qdq"]["outputs"]), report["check"]["qdq"]
