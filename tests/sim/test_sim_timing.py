"""The timing model on hand-computed programs: a DMA costs latency + its bytes over the
bandwidth, at least a whole burst per contiguous run (a gather of short rows pays a burst per row), a conv pays a weight load per block
when its tile is too short to hide it, independent units overlap (max), dependent ones add
up (sum), a double-buffered loop runs at the compute bound, and every cost comes from the
Target's numbers. These are the base terms: the targets here have no issue cost and no
scratchpad limit (`bare`); tests/sim/test_sim_timing_terms.py computes those by hand."""

from __future__ import annotations

import dataclasses

import pytest

from vpuc.sim import Add, AvgPool, Conv, Dma, End, Matmul, Mul, Opcode, Requant, Simulator
from vpuc.targets import load_target


def bare(target):
    """`target` without the issue cost and the scratchpad limit (docs/targets.md)."""
    hw = dataclasses.replace(target.hardware, issue_cycles=0, sram_bytes_per_cycle=0)
    return dataclasses.replace(target, hardware=hw)


@pytest.fixture(scope="module")
def vpu():
    return bare(load_target("vpu"))


def load(nbytes, sram=0, **tokens):
    return Dma(opcode=Opcode.LOAD, dram=0, sram=sram, row_bytes=nbytes, **tokens)


def conv_3x3(src, dst, **tokens):
    """8x8x32 -> 8x8x32, 3x3, pad 1: on 16x16 MACs 2*2 blocks x 9 taps, each streaming 64
    pixels (longer than the 16-cycle weight load), + the first load 16 + fill/drain 32."""
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


CONV_3X3_CYCLES = 2 * 2 * 9 * 64 + 16 + 16 + 16  # 2352


@pytest.mark.parametrize("target_name", ["vpu", "vpu-plus"])
@pytest.mark.parametrize("nbytes", [1, 15, 16, 17, 4096, 100_001])
def test_one_dma_takes_latency_plus_bytes_over_bandwidth(target_name, nbytes):
    """One contiguous run: its bytes, or a whole burst if it is shorter (a run's last, partial
    burst is a shorter AXI burst: it moves only its own bytes)."""
    target = bare(load_target(target_name))
    hw = target.hardware
    result = Simulator(target).run([load(nbytes), End()])
    moved = max(nbytes, hw.dram_burst_bytes)
    expected = hw.dram_latency_cycles + -(-moved // hw.dram_bytes_per_cycle)
    assert result.stats.total_cycles == expected
    assert result.stats.units["DMA"].busy_cycles == expected


def test_costs_follow_the_target(vpu):
    slow = dataclasses.replace(
        vpu,
        hardware=dataclasses.replace(
            vpu.hardware, dram_latency_cycles=1000, dram_bytes_per_cycle=3, mac_rows=8, mac_cols=4
        ),
    )
    # 100 bytes (3 bursts of 32 and one of 4) at 3 per cycle: 34 cycles; 20 bytes, shorter
    # than a burst, cost one: 32 at 3 per cycle, 11
    assert Simulator(slow).run([load(100), End()]).stats.total_cycles == 1000 + 34
    assert Simulator(slow).run([load(20), End()]).stats.total_cycles == 1000 + 11
    # 32 channels on 8 rows x 4 cols: 4 * 8 blocks x 9 taps x 64 pixels + load 16 + 12 fill/drain
    result = Simulator(slow).run([conv_3x3(0, 8192), End()])
    assert result.stats.total_cycles == 4 * 8 * 9 * 64 + 16 + 12


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
            2 * 9 * 64 + 16 + 32,
        ),
        # 3 input channels fill 3 of 16 rows: still one block per tap, 16 pixels each
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
            9 * 16 + 16 + 32,
        ),
        # batch-1 matrix-vector product: the first block's weights load (16), every 16x16
        # block but the last streams one row while the next block's weights load (16
        # cycles), the last its row alone: 16 + 15 x 16 + 1 + 32, 256x64 MACs -> 6%
        (Matmul(src=0, weights=4096, dst=65536, m=1, k=64, n=64), 16 + 15 * 16 + 1 + 32),
        (Requant(src=0, dst=4096, params=8192, pixels=10, channels=33), 2 * 10),
        (Add(src_a=0, src_b=1024, dst=2048, count=65, scale_a=1.0, scale_b=1.0), 3),
        (Mul(src_a=0, src_b=1024, dst=2048, pixels=5, channels=13, broadcast_b=1, scale=1.0), 3),
        (AvgPool(src=0, dst=4096, in_h=7, in_w=7, channels=64, kernel_h=7, kernel_w=7), 2 * 49),
    ],
    ids=["depthwise", "cin3", "matvec", "requant", "add", "mul", "gap"],
)
def test_unit_costs(vpu, instruction, cycles):
    result = Simulator(vpu).run([instruction, End()])
    assert result.stats.total_cycles == cycles


def test_matrix_vector_product_shows_the_weight_load(vpu):
    result = Simulator(vpu).run([Matmul(src=0, weights=4096, dst=65536, m=1, k=64, n=64), End()])
    assert result.stats.mac_utilisation == pytest.approx(64 * 64 / ((16 + 15 * 16 + 1 + 32) * 256))
    assert result.stats.mac_utilisation < 0.07


@pytest.mark.parametrize("target_name", ["vpu", "vpu-plus"])
def test_a_gather_of_one_byte_rows_pays_a_burst_per_row(target_name):
    """4096 one-byte rows, 4096 bytes apart in DRAM: 4096 bursts, against 4096 / burst
    bursts for the same bytes in one contiguous load."""
    target = bare(load_target(target_name))
    hw = target.hardware
    gather = Dma(
        opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=1, rows=4096, dram_row_stride=4096, sram_row_stride=1
    )
    burst_cycles = hw.dram_burst_bytes // hw.dram_bytes_per_cycle
    gathered = Simulator(target).run([gather, End()]).stats.total_cycles
    contiguous = Simulator(target).run([load(4096), End()]).stats.total_cycles
    assert gathered == hw.dram_latency_cycles + 4096 * burst_cycles
    assert contiguous == hw.dram_latency_cycles + 4096 // hw.dram_burst_bytes * burst_cycles
    assert gathered > 10 * contiguous


def test_rows_adjacent_in_dram_merge_into_one_run(vpu):
    """A gather into SRAM of 16-byte rows 32 bytes apart, from bytes contiguous in DRAM:
    the DRAM side is one run (as one contiguous load), the SRAM side 64 one-cycle rows."""
    gather = Dma(
        opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=16, rows=64, dram_row_stride=16, sram_row_stride=32
    )
    contiguous = vpu.hardware.dram_cycles(1024)
    assert Simulator(vpu).run([gather, End()]).stats.total_cycles == contiguous == 64 + 64


def test_a_scatter_of_single_bytes_pays_a_cycle_per_byte_in_sram(vpu):
    """NCHW -> NHWC by DMA: 256 bytes contiguous in DRAM land one per pixel, 3 bytes apart
    in SRAM: the SRAM side takes 256 cycles, longer than the DRAM side's 16."""
    scatter = Dma(
        opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=1, rows=256, dram_row_stride=1, sram_row_stride=3
    )
    assert Simulator(vpu).run([scatter, End()]).stats.total_cycles == vpu.hardware.dram_latency_cycles + 256


def test_a_program_run_again_gives_the_same_figures_and_fresh_results(vpu):
    """The static analysis of a program is kept for its next run (it reads no memory): a
    second run on other data computes on that data and reports the same cycles."""
    import numpy as np

    from vpuc.sim import Clip, Program

    program = Program(
        (load(64, signal=1), Clip(src=0, dst=64, count=64, clamp_min=-5, clamp_max=5, wait=1), End())
    )
    simulator = Simulator(vpu)
    first = simulator.run(program, np.full(64, 100, np.int8))
    second = simulator.run(program, np.full(64, -100, np.int8))
    assert first.stats == second.stats
    assert (first.sram[64:128].view(np.int8) == 5).all() and (second.sram[64:128].view(np.int8) == -5).all()
