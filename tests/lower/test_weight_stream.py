"""Streamed weights keep the flash port busy: on resnet8's s2_conv2 shape at u55-256
(16x16x32 -> 32 channels, 3x3: two 16-channel weight blocks of 4.6 KiB from flash at
1 B/cycle), each block after the first streams straight after the one before it, never
waiting in the in-order DMA queue behind the previous tile's store (which waits for that
tile's requantisation). With the blocks emitted behind the stores, the second one started
3.5 K cycles late."""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from vpuc.targets import load_target
from vpuc.targets.isa.cost import dma_latency
from vpuc.targets.isa.formats import Dma, Opcode

from .conftest import Builder, simulate


def test_weight_blocks_stream_back_to_back_from_flash():
    target = load_target("u55-256")
    hw = target.hardware
    b = Builder(seed=3)
    x = b.input("x", (1, 16, 16, 32))
    y = b.conv(x, "conv", 32)
    program, result, outputs, expected = simulate(b.subgraph([y]), target)
    np.testing.assert_array_equal(outputs[y], expected[y])
    timeline = result.timeline
    weights = [
        pc
        for pc, i in enumerate(program.program.instructions)
        if isinstance(i, Dma) and i.opcode == Opcode.LOAD and i.region
    ]
    assert len(weights) >= 2, "the weights should stream block by block"
    for before, pc in pairwise(weights):
        data = result.plans[pc].cycles - hw.issue_cycles - dma_latency("flash", hw)
        assert timeline.end[pc] == timeline.end[before] + data, (before, pc)
