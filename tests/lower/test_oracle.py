"""The layer planner as the one oracle (compiler/lower/codegen/oracle.py): the partitioner's
SRAM fit and VPU cost come from the code generator that lowers the layer, so what it
accepts lowers and runs, and what it prices is what the simulator measures."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc.compiler.lower.codegen.oracle import answer
from vpuc.targets import load_target
from vpuc.targets.ops import OpView

from .conftest import Builder, simulate


def _conv_view(cin, cout, h, w, k, groups=1, stride=1):
    pad = k // 2
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    return OpView(
        kind="conv2d", name="conv",
        inputs=(((1, cin, h, w), "int8"), ((cout, cin // groups, k, k), "int8")),
        output=((1, cout, oh, ow), "int8"), constant_inputs=(False, True),
        attrs={"kernel": (k, k), "strides": (stride, stride), "padding": (pad,) * 4, "dilation": (1, 1),
               "groups": groups, "in_channels": cin, "out_channels": cout},
    )  # fmt: skip


def test_a_wide_conv_the_old_rule_refused_fits_and_runs_exactly():
    """1024 -> 64 channels, 3x3, 16x16, on u55-256 (48 KiB of SRAM). The partitioner's old
    rule never split input channels: one output row needs 3 input rows of every channel
    (3 * 16 * 1024 = 49,152 B) before any weights, already all of SRAM, so it kept the layer
    on the CPU. The planner splits input channels; its program runs on the simulator bit for
    bit equal to the numpy int8 reference, within SRAM."""
    target = load_target("u55-256")
    found = answer(_conv_view(1024, 64, 16, 16, 3), target)
    assert found.fits, found.reason
    assert 0 < found.sram_bytes <= target.hardware.sram_bytes
    b = Builder(3)
    y = b.conv(b.input("x", (1, 16, 16, 1024)), "conv", 64)
    program, result, outputs, expected = simulate(b.subgraph([y]), target)
    np.testing.assert_array_equal(outputs[y], expected[y])
    assert result.stats.sram_peak_bytes <= target.hardware.sram_bytes


def test_a_layer_no_tiling_fits_is_refused_for_sram():
    """16 channels, 3x3, 1024 wide on u55-256: the planner tiles by whole output rows, so its
    smallest tile holds 3 input rows (3 * 1024 * 16 = 49,152 B, all of SRAM) and more."""
    found = answer(_conv_view(16, 16, 8, 1024, 3), load_target("u55-256"))
    assert not found.fits and found.sram_limited
    assert "cannot be tiled to fit SRAM (49152 bytes)" in found.reason


def test_the_answer_depends_on_the_target():
    """The same layer (16 channels, 3x3, 4096 wide: its smallest tile, whole output rows of
    4096 pixels with their input rows and int32 accumulators, is over 3 * 4096 * 16 * 4 B)
    fits vpu-plus's 2 MiB and not vpu's 512 KiB."""
    view = _conv_view(16, 16, 8, 4096, 3)
    assert not answer(view, load_target("vpu")).fits
    assert answer(view, load_target("vpu-plus")).fits


@pytest.mark.parametrize(
    "target_name,case",
    [
        ("vpu", "conv"),
        ("vpu", "depthwise"),
        ("vpu", "dense"),
        ("vpu-plus", "conv"),
        ("u55-256", "conv"),
        ("u55-256", "depthwise"),
    ],
)
def test_the_price_is_what_the_simulator_measures(target_name, case):
    """The VPU side of the profitability rule, for one layer, within 10% of the cycles the
    simulator counts running the program the code generator emits for that layer."""
    target = load_target(target_name)
    b = Builder(7)
    if case == "conv":
        view = _conv_view(32, 48, 20, 20, 3)
        y = b.conv(b.input("x", (1, 20, 20, 32)), "conv", 48)
    elif case == "depthwise":
        view = _conv_view(64, 64, 24, 24, 3, groups=64)
        y = b.conv(b.input("x", (1, 24, 24, 64)), "conv", 64, groups=64)
    else:
        view = OpView(
            kind="dense", name="fc", inputs=(((8, 256), "int8"), ((256, 96), "int8")), output=((8, 96), "int8"),
            constant_inputs=(False, True), attrs={"in_channels": 256, "out_channels": 96},
        )  # fmt: skip
        y = b.dense(b.input("x", (8, 256)), "fc", 96)
    priced = answer(view, target).cycles
    _, result, outputs, expected = simulate(b.subgraph([y]), target)
    np.testing.assert_array_equal(outputs[y], expected[y])
    assert abs(priced - result.stats.total_cycles) <= 0.10 * result.stats.total_cycles, (
        priced,
        result.stats.total_cycles,
    )


def test_a_patched_switch_is_asked_again(monkeypatch):
    """The answers are cached; a code-generator switch (memo.SWITCHES) that changes what a
    layer lowers to is part of the key. A 3-channel 3x3 first layer on vpu: forcing the plain
    conv (tile_im2col.CHOOSE = "conv") makes it slower than the planner's choice (an im2col
    gather into a 1x1 conv), and the cached answer must not hide that."""
    from vpuc.compiler.lower.codegen import tile_im2col

    target = load_target("vpu")
    view = _conv_view(3, 16, 32, 32, 3)
    chosen = answer(view, target).cycles
    monkeypatch.setattr(tile_im2col, "CHOOSE", "conv")
    plain = answer(view, target).cycles
    assert plain > chosen > 0
