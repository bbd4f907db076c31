"""The timing model on hand-computed programs: a DMA costs latency + ceil(bytes / bandwidth),
independent units overlap (max), dependent ones add up (sum), a double-buffered loop runs
at the compute bound, and every cost comes from the Target's numbers."""

from __future__ import annotations

import dataclasses

import pytest

from vpuc.sim import Add, AvgPool, Conv, Dma, End, Opcode, Requant, Simulator
from vpuc.targets import load_target


def load(nbytes, sram=0, **tokens):
    return Dma(opcode=Opcode.LOAD, dram=0, sram=sram, row_bytes=nbytes, **tokens)


def conv_3x3(src, dst, **tokens):
    """8x8x32 -> 8x8x32, 3x3, pad 1: on 16x16 MACs 2*2 passes x 64 pixels x 9 taps + 32."""
    return Conv(
        src=src,
        weights=src + 2048,
        dst=dst,
        in_h=8,
        in_w=8,
        in_c=32,
        out_c=32,
        kernel_h=3,
        kernel_w=3,
        pad_top=1,
        pad_bottom=1,
        pad_left=1,
        pad_right=1,
        **tokens,
    )


CONV_3X3_CYCLES = 2 * 2 * 64 * 9 + 16 + 16  # 2336


@pytest.mark.parametrize("target_name", ["vpu", "vpu-plus"])
@pytest.mark.parametrize("nbytes", [1, 15, 16, 17, 4096, 100_001])
def test_one_dma_takes_latency_plus_bytes_over_bandwidth(target_name, nbytes):
    target = load_target(target_name)
    hw = target.hardware
    result = Simulator(target).run([load(nbytes), End()])
    expected = hw.dram_latency_cycles + -(-nbytes // hw.dram_bytes_per_cycle)
    assert result.stats.total_cycles == expected
    assert result.stats.units["DMA"].busy_cycles == expected


def test_costs_follow_the_target(vpu):
    slow = dataclasses.replace(
        vpu,
        hardware=dataclasses.replace(
            vpu.hardware, dram_latency_cycles=1000, dram_bytes_per_cycle=3, mac_rows=8, mac_cols=4
        ),
    )
    assert Simulator(slow).run([load(100), End()]).stats.total_cycles == 1000 + 34
    # 32 channels on 8 rows x 4 cols: 4 * 8 passes x 576 steps + 12 fill/drain
    result = Simulator(slow).run([conv_3x3(0, 8192), End()])
    assert result.stats.total_cycles == 4 * 8 * 576 + 12


def test_independent_dma_and_mac_overlap(vpu):
    dma_cycles = vpu.hardware.dram_cycles(4096)
    program = [load(4096, sram=65536), conv_3x3(0, 8192), End()]
    result = Simulator(vpu).run(program)
    assert result.stats.total_cycles == max(dma_cycles, CONV_3X3_CYCLES) == CONV_3X3_CYCLES
    assert result.timeline.start[:2] == (0, 0)


def test_dependent_dma_and_mac_add_up(vpu):
    dma_cycles = vpu.hardware.dram_cycles(4096)
    program = [load(4096, signal=1 << 0), conv_3x3(0, 8192, wait=1 << 0), End()]
    result = Simulator(vpu).run(program)
    assert result.stats.total_cycles == dma_cycles + CONV_3X3_CYCLES
    assert result.stats.units["MAC"].stall_cycles == {"wait_dma": dma_cycles, "wait_mac": 0, "wait_vec": 0}


def double_buffered(tiles: int, tile_bytes: int) -> list:
    """load i+1 overlaps conv i; load i+2 waits until conv i has released its buffer.
    Token 0: DMA -> MAC (tile loaded), token 1: MAC -> DMA (buffer free)."""
    buffers = [0, 32768]
    program = [load(tile_bytes, sram=buffers[0], signal=1), load(tile_bytes, sram=buffers[1], signal=1)]
    for i in range(tiles):
        program.append(conv_3x3(buffers[i % 2], 65536 + 65536 * (i % 2), wait=1, signal=2))
        if i + 2 < tiles:
            program.append(load(tile_bytes, sram=buffers[i % 2], wait=2, signal=1))
    return program + [End()]


def test_double_buffered_loop_reaches_the_compute_bound(vpu):
    tiles, tile_bytes = 6, 4096
    dma_cycles = vpu.hardware.dram_cycles(tile_bytes)
    assert dma_cycles < CONV_3X3_CYCLES
    result = Simulator(vpu).run(double_buffered(tiles, tile_bytes))
    assert result.stats.total_cycles == dma_cycles + tiles * CONV_3X3_CYCLES
    assert result.stats.units["MAC"].stall_cycles["wait_dma"] == dma_cycles


def test_single_buffered_loop_pays_every_transfer(vpu):
    tiles, tile_bytes = 6, 4096
    program = []
    for _ in range(tiles):
        program += [
            load(tile_bytes, signal=1, wait=2 if program else 0),
            conv_3x3(0, 65536, wait=1, signal=2),
        ]
    result = Simulator(vpu).run(program + [End()])
    assert result.stats.total_cycles == tiles * (vpu.hardware.dram_cycles(tile_bytes) + CONV_3X3_CYCLES)


@pytest.mark.parametrize(
    ("instruction", "cycles"),
    [
        # depthwise 32 channels: 16 groups side by side on the 16x16 array -> 2 passes
        (
            Conv(
                src=0,
                weights=4096,
                dst=8192,
                in_h=8,
                in_w=8,
                in_c=32,
                out_c=32,
                kernel_h=3,
                kernel_w=3,
                pad_top=1,
                pad_bottom=1,
                pad_left=1,
                pad_right=1,
                groups=32,
            ),
            2 * 64 * 9 + 32,
        ),
        # 3 input channels fill 3 of 16 rows: still one pass per pixel and tap
        (
            Conv(
                src=0,
                weights=4096,
                dst=8192,
                in_h=8,
                in_w=8,
                in_c=3,
                out_c=16,
                kernel_h=3,
                kernel_w=3,
                stride_h=2,
                stride_w=2,
                pad_top=1,
                pad_left=1,
            ),
            16 * 9 + 32,
        ),
        (Requant(src=0, dst=4096, params=8192, pixels=10, channels=33), 2 * 10),
        (Add(src_a=0, src_b=1024, dst=2048, count=65, scale_a=1.0, scale_b=1.0), 3),
        (AvgPool(src=0, dst=4096, in_h=7, in_w=7, channels=64, kernel_h=7, kernel_w=7), 2 * 49),
    ],
    ids=["depthwise", "cin3", "requant", "add", "gap"],
)
def test_unit_costs(vpu, instruction, cycles):
    result = Simulator(vpu).run([instruction, End()])
    assert result.stats.total_cycles == cycles
