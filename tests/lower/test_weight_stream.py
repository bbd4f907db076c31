"""Streamed weights keep the flash port busy: on resnet8's s2_conv2 shape at u55-256 with
its former 16x16 array (conftest.u55_square_array; with the 32x8 array the blocks are 8
channels and the second waits ~900 cycles: not yet looked at)
(16x16x32 -> 32 channels, 3x3: two 16-channel weight blocks of 4.6 KiB from flash at
1 B/cycle), each block after the first streams straight after the one before it, never
waiting in the in-order DMA queue behind the previous tile's store (which waits for that
tile's requantisation). With the blocks emitted behind the stores, the second one started
3.5 K cycles late."""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from vpuc.targets.isa.dma_cost import dma_latency
from vpuc.targets.isa.formats import Dma, Opcode

from .conftest import Builder, simulate, u55_square_array


def test_weight_blocks_stream_back_to_back_from_flash():
    target = u55_square_array()
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


def _two_convs(target):
    b = Builder(seed=3)
    x = b.input("x", (1, 16, 16, 32))
    h = b.conv(x, "a", 32, k=(1, 1), pads=(0, 0, 0, 0))
    y = b.conv(h, "b", 32)
    program, result, outputs, expected = simulate(b.subgraph([y]), target)
    np.testing.assert_array_equal(outputs[y], expected[y])
    return program, result


def test_a_streamed_layers_first_block_loads_after_the_last_load_of_the_layer_before():
    """A 1x1 conv (16x16x32 -> 32) then s2_conv2's shape at u55-256, both streaming two
    16-channel weight blocks from flash: the second conv's first block (16 x 3 x 3 x 32 B +
    16 x 4 B bias + 16 x 8 B params = 4800 B at 1 B/cycle) moves into the first conv
    (prefetch.LATE_KEY): the DMA unit takes it right after that conv's last input load (8
    cycles to issue that load), on an idle flash port: 8 + 64 + 4800 = 4872 cycles. Not
    earlier, where the in-order DMA unit would hold that conv's next input bands behind it.
    With the requantisation at 2 elements a cycle (u55-256's figure before issue 21's
    second pass): at its 4 the first conv's tiles finish early enough that moving the block
    saves nothing and the estimate leaves it at its own layer (both 19352 cycles).
    Whole loads only (prefetch.PIECES = 1): cut into pieces over the first conv's tiles
    (test_prefetch_pieces.py) the block loads earlier still, and the program is shorter."""
    import dataclasses
    from unittest import mock

    from vpuc.compiler.lower.codegen import prefetch

    u55 = u55_square_array()
    target = dataclasses.replace(u55, hardware=dataclasses.replace(u55.hardware, vector_requant_per_cycle=2.0))
    with mock.patch.object(prefetch, "PIECES", 1):
        program, result = _two_convs(target)
    instructions, timeline = program.program.instructions, result.timeline
    flash = [pc for pc, i in enumerate(instructions) if isinstance(i, Dma) and i.region]
    bands = [pc for pc, i in enumerate(instructions) if isinstance(i, Dma) and i.opcode == Opcode.LOAD
             and not i.region and i.layer == 1]  # fmt: skip
    first_block = next(pc for pc in flash if instructions[pc].row_bytes == 4800)
    assert instructions[first_block].layer == 1 and first_block == bands[-1] + 1
    start = timeline.start[bands[-1]] + target.hardware.issue_cycles
    assert (timeline.start[first_block], timeline.end[first_block]) == (start, start + 8 + 64 + 4800)
    with prefetch.disabled():
        _, without = _two_convs(target)
    assert result.stats.total_cycles < without.stats.total_cycles
    _, in_pieces = _two_convs(target)
    assert in_pieces.stats.total_cycles < result.stats.total_cycles
