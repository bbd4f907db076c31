"""A conv reading its input in place through src_stride and src_row_stride (docs/isa.md,
"conv"): spaced rows (a column range of a wider image), and overlapping pixels, the "column
window" the code generator uses for few-channel convs: with pixel stride C and in_c = kw*C,
pixel x of a row is the kw input pixels x..x+kw-1 side by side, so a kh x 1 conv over it with
weights (O, kh, 1, kw*C) is the kh x kw conv. Values against sim/reference.py's conv2d of
the image itself; cycles and the bytes read (targets/isa/footprint.py) by hand."""

from __future__ import annotations

import numpy as np
import pytest

from tests.sim.test_sim_timing_terms import cycles, with_figures
from vpuc.sim import Conv
from vpuc.sim import reference as ref
from vpuc.targets.isa.footprint import Region, footprint

RNG = np.random.default_rng(20261203)


def int8(shape):
    return RNG.integers(-128, 128, shape).astype(np.int8)


def column_window(image: np.ndarray, zp: int, left: int, right: int) -> np.ndarray:
    """The image with `left` and `right` columns of zero point, as a tile holds it."""
    height, _, channels = image.shape
    pad = [np.full((height, n, channels), zp, np.int8) for n in (left, right)]
    return np.concatenate([pad[0], image, pad[1]], axis=1)


@pytest.mark.parametrize("channels,stride,zp", [(3, 1, 5), (1, 2, -7), (2, 1, 0)])
def test_a_column_window_conv_is_the_conv(vpu, scratchpad, channels, stride, zp):
    image, weights = int8((7, 12, channels)), int8((16, 3, 3, channels))
    expected = ref.conv2d(image, weights, zp=zp, stride=(stride, stride), pads=(1, 1, 1, 1))
    tile = column_window(image, zp, 1, 1)  # 7 x 14 x C: the horizontal padding in place
    width = tile.shape[1] - 3 + 1  # windows of 3 columns
    src, w = scratchpad.put(tile), scratchpad.put(weights.reshape(16, 3, 1, 3 * channels))
    dst = scratchpad.reserve(expected.nbytes)
    conv = Conv(src=src, weights=w, dst=dst, in_h=7, in_w=width, in_c=3 * channels, out_c=16, kernel_h=3,
                kernel_w=1, stride_h=stride, stride_w=stride, pad_top=1, pad_bottom=1, src_zp=zp,
                src_stride=channels, src_row_stride=tile.shape[1] * channels)  # fmt: skip
    result = scratchpad.run(vpu, [conv])
    got = scratchpad.read(result, dst, expected.shape, np.int32)
    np.testing.assert_array_equal(got, expected)
    # the reference's own reading of the fields gives the same input
    memory = np.frombuffer(bytes(scratchpad.image), np.uint8)
    x = ref.strided_input(memory, src, (7, width, 3 * channels), channels, tile.shape[1] * channels)
    np.testing.assert_array_equal(x[:, :, :channels], tile[:, :width])
    np.testing.assert_array_equal(x[:, :, -channels:], tile[:, 2 : 2 + width])


def test_spaced_rows_read_a_column_range(vpu, scratchpad):
    image, weights = int8((6, 10, 4)), int8((8, 3, 3, 4))
    expected = ref.conv2d(image[:, 2:8], weights, zp=-3, pads=(1, 1, 0, 0))
    src, w = scratchpad.put(image), scratchpad.put(weights)
    dst = scratchpad.reserve(expected.nbytes)
    conv = Conv(src=src + 2 * 4, weights=w, dst=dst, in_h=6, in_w=6, in_c=4, out_c=8, kernel_h=3, kernel_w=3,
                pad_top=1, pad_bottom=1, src_zp=-3, src_row_stride=10 * 4)  # fmt: skip
    result = scratchpad.run(vpu, [conv])
    np.testing.assert_array_equal(scratchpad.read(result, dst, expected.shape, np.int32), expected)
    (read,) = [a for a in footprint(conv, "float32") if a.what == "read of 'src'"]
    assert read.region.start == src + 8 and read.region.stop == src + 5 * 40 + 8 + 24
    # row 1's columns 0 and 1 (bytes 40..47 of the image) are not read; its column 2 is
    assert not read.region.overlaps(Region(src + 40, src + 48))
    assert read.region.overlaps(Region(src + 48, src + 49))


def test_column_window_footprint_is_each_rows_run():
    # 3 rows of 12 pixels, pixel stride 3, 9 bytes a pixel: each row reads 11 x 3 + 9 = 42
    # bytes from its start; rows 50 bytes apart leave bytes 42..49 of each row unread
    conv = Conv(src=1000, weights=0, dst=4096, in_h=3, in_w=12, in_c=9, out_c=16, kernel_h=3,
                src_stride=3, src_row_stride=50)  # fmt: skip
    (read,) = [a for a in footprint(conv, "float32") if a.what == "read of 'src'"]
    assert (read.region.start, read.region.stop) == (1000, 1000 + 2 * 50 + 42)
    assert read.region.overlaps(Region(1041, 1042)) and not read.region.overlaps(Region(1042, 1050))
    assert read.region.overlaps(Region(1050, 1051))


def test_column_window_cycles_by_hand():
    """7 x 12 outputs of 16 channels. The 3x3 conv over 3 channels: 9 blocks (one a tap, 3 of
    16 rows) x 84 pixels + first weight load 16 + fill and drain 32 = 804 cycles. As a column
    window (9 channels, a 3x1 kernel): 3 blocks: 3 x 84 + 48 = 300. The scratchpad bytes are
    the same: input 9 taps x 84 x 3 = 3 x 84 x 9 = 2268, weights 432, int32 out 5376: 8076
    bytes, at 16 a cycle 505 cycles (the window's bound), at 8 a cycle 1010 (both's)."""
    common = dict(src=0, weights=8192, dst=16384, in_h=7, out_c=16, pad_top=1, pad_bottom=1)
    conv = Conv(**common, in_w=12, in_c=3, kernel_h=3, kernel_w=3, pad_left=1, pad_right=1)
    window = Conv(**common, in_w=12, in_c=9, kernel_h=3, kernel_w=1, src_stride=3, src_row_stride=42)
    assert cycles(with_figures(), conv) == 804
    assert cycles(with_figures(), window) == 300
    assert cycles(with_figures(sram_bytes_per_cycle=16), window) == 505
    assert cycles(with_figures(sram_bytes_per_cycle=8), conv) == 1010
    assert cycles(with_figures(sram_bytes_per_cycle=8), window) == 1010
