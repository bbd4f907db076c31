"""A tile's input load goes ahead of an earlier tile's store in the in-order DMA queue
(tiling.STORE_KEY): on resnet8's s2_conv1 shape at u55-256 (32x32x16 -> 32 channels, 3x3,
stride 2: two 16-channel weight chunks from flash, two bands of 8 output rows, the input
band read again for the second chunk), the third tile's input band loads as soon as the
first tile's MAC has freed its slot, not after that tile's requantisation and store, so the
MAC array waits only for the second chunk's weights.

By hand, from targets/u55-256.toml with its former 16x16 array (conftest.u55_square_array; issue 8, paid while an instruction waits on its tokens;
flash 1 B/cycle, latency 64, 128-byte bursts; SRAM port 8 B/cycle, latency 32; a MAC block
of 16x16 per tap, weight load 16, pipeline fill 2 per block, fill and drain 16 + 16):
- a weight chunk: 16 x 3 x 3 x 16 = 2304 B + 16 x 4 B bias + 16 x 8 B params = 2496 B,
  8 + 64 + 2496 = 2568 cycles; the second streams right after the first (two flash
  transfers in flight): it ends at 2568 + 2496 = 5064;
- an input band of 17 rows (8 output rows at stride 2, and the kernel's halo) x 32 x 16 =
  8704 B: 8 + 32 + 1088 = 1128 cycles;
- a MAC over 8 x 16 output pixels: 9 taps x (128 + 2) + 16 + 16 + 16 + 8 = 1226 cycles;
  the first is issued 8 cycles before the first chunk is in (2568), starts at 2560 and ends
  at 3786, the second ends at 5012.
The third tile's band (slot 0 again) is issued 8 cycles before the first MAC ends: it
starts at 3778 and ends at 3778 + 1128 = 4906; its MAC starts 8 cycles before the second
chunk is in, 5056. Behind the first tile's store (taken after that tile's 1032-cycle
requantisation) the band would have started some 1000 cycles later, its data following
the store's on the port, and the MAC would have waited for it."""

from __future__ import annotations

import numpy as np

from vpuc.targets.isa.formats import Conv, Dma, Opcode

from .conftest import Builder, simulate, u55_square_array


def test_an_input_band_loads_ahead_of_an_earlier_tiles_store():
    b = Builder(seed=3)
    x = b.input("x", (1, 32, 32, 16))
    y = b.conv(x, "conv", 32, stride=(2, 2), pads=(0, 0, 1, 1))
    program, result, outputs, expected = simulate(b.subgraph([y]), u55_square_array())
    np.testing.assert_array_equal(outputs[y], expected[y])
    assert program.layers[0]["tiling"]["loop"] == "channel chunks outer"
    instructions, timeline = program.program.instructions, result.timeline
    macs = [pc for pc, i in enumerate(instructions) if isinstance(i, Conv)]
    bands = [pc for pc, i in enumerate(instructions) if isinstance(i, Dma) and i.opcode == Opcode.LOAD
             and not i.region]  # fmt: skip
    stores = [pc for pc, i in enumerate(instructions) if isinstance(i, Dma) and i.opcode == Opcode.STORE]
    assert bands[2] < stores[0]  # in program order
    assert [timeline.start[pc] for pc in macs[:3]] == [2560, 3786, 5056]
    assert (timeline.start[bands[2]], timeline.end[bands[2]]) == (3778, 4906)
