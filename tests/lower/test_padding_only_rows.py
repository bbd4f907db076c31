"""Issue 20: convs whose outer output rows read only padding (a top or bottom padding as large
as the kernel's reach). A conv instruction reads a band of at least one input row, so the
conv's input is staged in both axes (kernel_split.Split.staged_rows, tile_staged.PaddedBand):
a tile whose rows and columns hold all of its padding (the zero point), the conv over it with
no padding. Those rows then read zero-point rows and come out as the requantised bias.
Lowered, simulated and compared bit for bit with the numpy int8 reference
(sim/reference.py through int8_reference.py), which computes the conv on the padded input
itself; and the padding-only rows checked against the requantised bias, computed here."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc.compiler.lower.codegen import tile_im2col, tile_staged
from vpuc.targets import load_target

from .conftest import Builder, simulate
from .int8_reference import requantize

# (kernel, pads top/left/bottom/right, stride, dilation, groups); every form has output rows
# whose whole window lies in the top or bottom padding
FORMS = {
    "4x3_top6": ((4, 3), (6, 1, 0, 1), (1, 1), (1, 1), 1),
    "1x1_top6_bottom6": ((1, 1), (6, 0, 6, 0), (1, 1), (1, 1), 1),
    "6x6_pads6": ((6, 6), (6, 6, 6, 6), (1, 1), (1, 1), 1),
    "2x9_pads5_wide": ((2, 9), (5, 4, 5, 4), (1, 1), (1, 1), 1),
    "3x3_bottom5_stride2": ((3, 3), (0, 1, 5, 1), (2, 2), (1, 1), 1),
    "2x3_top6_dilated": ((2, 3), (6, 1, 1, 1), (1, 1), (2, 1), 1),
    "depthwise_5x5_top6": ((5, 5), (6, 2, 2, 2), (1, 1), (1, 1), 8),
    "5x4_top6_bottom6": ((5, 4), (6, 1, 6, 1), (1, 1), (1, 1), 1),
}


def _padding_only_rows(size: int, out: int, kernel: int, stride: int, dilation: int, top: int) -> list[int]:
    """Output rows whose every kernel row falls outside the input (by hand)."""
    rows = []
    for o in range(out):
        taps = [o * stride - top + k * dilation for k in range(kernel)]
        if all(t < 0 or t >= size for t in taps):
            rows.append(o)
    return rows


@pytest.mark.parametrize("target_name", ["vpu", "u55-256"])
@pytest.mark.parametrize("resident", [False, True], ids=["dram_input", "resident_input"])
@pytest.mark.parametrize("form", FORMS)
def test_rows_that_read_only_padding_are_the_requantised_bias(monkeypatch, form, resident, target_name):
    monkeypatch.setattr(tile_im2col, "CHOOSE", "conv")  # the staged conv, not an im2col of it
    staged = []
    call = tile_staged.PaddedBand.__call__
    monkeypatch.setattr(
        tile_staged.PaddedBand, "__call__", lambda band, *a: staged.append(band) or call(band, *a)
    )
    target = load_target(target_name)
    kernel, pads, stride, dilation, groups = FORMS[form]
    b = Builder(seed=3)
    x = b.input("x", (1, 9, 11, 8))
    if resident:  # a conv before it: the padded conv reads the VPU's own tensor in SRAM
        x = b.conv(x, "pre", 8, k=(1, 1), pads=(0, 0, 0, 0))
    y = b.conv(x, "conv", 8, k=kernel, stride=stride, pads=pads, dilation=dilation, groups=groups)
    _, _, got, expected = simulate(b.subgraph([y]), target)
    np.testing.assert_array_equal(got[y].reshape(expected[y].shape), expected[y])
    assert staged and all(band.staged_rows for band in staged)
    if target_name == "vpu":  # (u55-256 keeps the first conv's output in DRAM: a load)
        assert all(band.copy == resident for band in staged)  # resident: the vector unit copies
    # the rows that read only padding: the bias alone, requantised
    op = next(o for o in b.ops if o.name == "conv")
    rows = _padding_only_rows(9, got[y].shape[1], kernel[0], stride[0], dilation[0], pads[0])
    assert rows, "the form has no output row that reads only padding"
    bias_only = requantize(op.bias.astype(np.int32), op.requant, target.numerics.requant)
    for r in rows:
        assert (got[y][0, r] == bias_only).all(), r
