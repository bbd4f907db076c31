"""The im2col gather (compiler/lower/codegen/tile_im2col.py) run on the simulator: the tile
it writes is the padded input's patches as numpy cuts them out (NHWC and NCHW, asymmetric
padding, strides), and a small gather's cycles by hand from docs/isa.md's DMA cost."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vpuc.compiler.lower.codegen.im2col_gather import Gather, RowGather
from vpuc.compiler.lower.codegen.plan import Addr, View
from vpuc.sim import Clip, End, Simulator
from vpuc.targets import load_target

TILE = 4096  # SRAM address of the tile; the input sits at DRAM address 0


def _instructions(gather: Gather, rows: tuple[int, int]):
    """The gather's fill (when the band reads padding) and loads, the loads after the fill."""

    def resolve(addr: Addr) -> int:
        return {"x": 0, "tile": TILE}[addr.base] + addr.offset

    tile = Addr("tile")
    specs = gather.specs(0, rows, tile)
    loads = [spec.build(resolve) for spec in specs]
    if not gather.padded(rows):
        return loads
    count = (rows[1] - rows[0]) * gather.tile_shape[0] * gather.tile_shape[1]
    zp = gather.zero_point
    fill = Clip(src=TILE, dst=TILE, count=count, clamp_min=zp, clamp_max=zp, signal=1)
    return [fill, dataclasses.replace(loads[0], wait=1), *loads[1:]]


def _kernel_rows(x_hwc, kernel, strides, pads, zp):
    """Numpy's tile of kernel rows: pixel (y, x) holds column x of the kh rows output row y
    reads, (ky, c) innermost; padding rows hold the zero point (columns are not padded)."""
    (kh, _), (sh, _), (top, _, bottom, _) = kernel, strides, pads
    padded = np.pad(x_hwc, ((top, bottom), (0, 0), (0, 0)), constant_values=zp)
    oh = (padded.shape[0] - kh) // sh + 1
    rows = [padded[y * sh : y * sh + kh].transpose(1, 0, 2).reshape(x_hwc.shape[1], -1) for y in range(oh)]
    return np.concatenate(rows)


def _patches(x_hwc, kernel, strides, pads, zp, nchw):
    """Numpy's im2col of one image: rows of (ky, kx, c) (NHWC) or (c, ky, kx) (NCHW)."""
    (kh, kw), (sh, sw), (top, left, bottom, right) = kernel, strides, pads
    padded = np.pad(x_hwc, ((top, bottom), (left, right), (0, 0)), constant_values=zp)
    oh = (padded.shape[0] - kh) // sh + 1
    ow = (padded.shape[1] - kw) // sw + 1
    rows = []
    for y in range(oh):
        for x in range(ow):
            window = padded[y * sh : y * sh + kh, x * sw : x * sw + kw, :]
            rows.append((window.transpose(2, 0, 1) if nchw else window).reshape(-1))
    return np.stack(rows), (oh, ow)


@pytest.mark.parametrize("nchw", [False, True], ids=["nhwc", "nchw"])
@pytest.mark.parametrize(
    "shape, kernel, strides, pads",
    [
        ((9, 6, 1), (5, 3), (2, 1), (2, 1, 3, 0)),
        ((7, 7, 3), (3, 3), (1, 1), (1, 1, 1, 1)),
        ((8, 6, 2), (3, 4), (2, 2), (0, 2, 1, 1)),
    ],
)
def test_the_gathered_tile_is_numpys_im2col(nchw, shape, kernel, strides, pads):
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    zp = -5
    expected, (oh, ow) = _patches(x, kernel, strides, pads, zp, nchw)
    h, w, c = shape
    view = View("x", 0, (1, h, w, c), c, nchw)
    gather = Gather(view, "x", kernel, strides, pads, (oh, ow), zp)
    dram = (x.transpose(2, 0, 1) if nchw else x).tobytes()
    by_rows = RowGather(view, "x", kernel, strides, pads, (oh, ow), zp)
    expected_rows = _kernel_rows(x, kernel, strides, pads, zp)
    for rows in [(0, oh), (1, oh - 1)]:  # the whole image, and a band without its edges
        for each, truth in ((gather, expected), (by_rows, expected_rows)):
            result = Simulator(load_target("vpu")).run([*_instructions(each, rows), End()], dram)
            width, depth = each.tile_shape
            pixels = (rows[1] - rows[0]) * width
            tile = result.sram[TILE : TILE + pixels * depth].view(np.int8).reshape(pixels, depth)
            np.testing.assert_array_equal(tile, truth[rows[0] * width : rows[1] * width])


def test_a_small_gathers_cycles_by_hand():
    """A 3x3 conv over a 4x4x1 NHWC image, no padding: 2x2 output pixels of 9 bytes. One load
    per kernel row: planes 2 output rows x rows 2 output columns x 3 bytes, DRAM rows 1 byte
    apart (3-byte runs that overlap: 4 runs, 4 bursts of 32 B at 16 B/cycle = 8 cycles),
    SRAM rows 9 bytes apart (4 runs of 3 B, one cycle each = 4): 64 latency + max(8, 4) = 72,
    + 2 issue cycles; three loads one after another (one transfer in flight on vpu): 222."""
    vpu = load_target("vpu")
    assert (vpu.hardware.dram_latency_cycles, vpu.hardware.issue_cycles) == (64, 2)
    assert (vpu.hardware.dram_burst_bytes, vpu.hardware.dram_bytes_per_cycle) == (32, 16)
    view = View("x", 0, (1, 4, 4, 1), 1)
    gather = Gather(view, "x", (3, 3), (1, 1), (0, 0, 0, 0), (2, 2), 0)
    instructions = _instructions(gather, (0, 2))
    assert len(instructions) == 3 and not gather.padded((0, 2))
    assert [(i.planes, i.rows, i.row_bytes) for i in instructions] == [(2, 2, 3)] * 3
    result = Simulator(vpu).run([*instructions, End()], bytes(range(16)))
    assert result.stats.total_cycles == 3 * (2 + 64 + 8)
    tile = result.sram[TILE : TILE + 36].reshape(4, 9)
    assert tile[3].tolist() == [5, 6, 7, 9, 10, 11, 13, 14, 15]  # output pixel (1, 1)
