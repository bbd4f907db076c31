"""The timing terms of docs/targets.md on hand-computed programs, each with explicit
figures: the issue cost, a scratchpad-bound MAC, a scratchpad-bound vector op, a
bandwidth-bound DMA, depthwise pixels per cycle, vector throughput per kind, and weights
read from flash (Vela's Shared_Sram) against the same load from DRAM, flash on its own
port beside DRAM's, transfers retiring in order, and outstanding transfers overlapping
their latency (a DMA-bound program where that saves 70.6%), softmax's reciprocal and its
passes through DRAM, the last weight block's pixels, the MAC pipeline fill per block, the
issue cost paid before the wait on a token, a run's last partial burst, and kernel taps
sharing a weight block's row slices (U55's PartKernel)."""

from __future__ import annotations

import dataclasses

import numpy as np

from vpuc.sim import Add, AvgPool, Conv, Dma, End, Opcode, Requant, Simulator, Softmax
from vpuc.targets import load_target


def with_figures(**figures):
    """`vpu` with no issue cost and no scratchpad limit, then `figures`."""
    vpu = load_target("vpu")
    base = {"issue_cycles": 0, "sram_bytes_per_cycle": 0, **figures}
    return dataclasses.replace(vpu, hardware=dataclasses.replace(vpu.hardware, **base))


def cycles(target, *instructions) -> int:
    return Simulator(target).run([*instructions, End()]).stats.total_cycles


def conv_1x1(**fields):
    """16x16x16 -> 16x16x16, 1x1: one 16x16 block streaming 256 pixels."""
    return Conv(src=0, weights=8192, dst=16384, in_h=16, in_w=16, in_c=16, out_c=16, **fields)


def test_every_instruction_pays_the_issue_cost():
    # one block of 256 pixels: 256 + first load 16 + fill/drain 32 = 304; + 7 issue
    assert cycles(with_figures(), conv_1x1()) == 304
    assert cycles(with_figures(issue_cycles=7), conv_1x1()) == 304 + 7
    # two dependent instructions on two units: both pay it
    load = Dma(opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=64, signal=1)
    add = Add(src_a=0, src_b=64, dst=128, count=64, scale_a=1.0, scale_b=1.0, wait=1)
    # load: latency 64 + 64 B / 16 B per cycle = 68; add: 64 / 32 lanes = 2
    assert cycles(with_figures(), load, add) == 68 + 2
    assert cycles(with_figures(issue_cycles=5), load, add) == 68 + 5 + 2 + 5


def test_a_1x1_conv_is_bound_by_the_scratchpad():
    # bytes: input 256 px x 16 ch x 1 column block = 4096, weights 256, int32 outputs
    # 256 x 16 x 4 = 16384: 20736 bytes; at 32 B/cycle 648 cycles > the 304 of compute
    assert cycles(with_figures(sram_bytes_per_cycle=32), conv_1x1()) == 648
    # accumulating reads the outputs too: 20736 + 16384 = 37120 -> 1160 cycles
    assert cycles(with_figures(sram_bytes_per_cycle=32), conv_1x1(accumulate=1)) == 1160
    # at 128 B/cycle: 162 cycles < 304, compute-bound again
    assert cycles(with_figures(sram_bytes_per_cycle=128), conv_1x1()) == 304


def test_requant_is_bound_by_the_scratchpad_or_its_rate():
    requant = Requant(src=0, dst=8192, params=16384, pixels=64, channels=32)
    # 64 vectors of 32 lanes at 32 elements a cycle: 64 cycles
    assert cycles(with_figures(), requant) == 64
    # 2048 elements x (4 B in + 1 B out) = 10240 bytes at 64 B/cycle: 160 cycles
    assert cycles(with_figures(sram_bytes_per_cycle=64), requant) == 160
    # at 2 elements a cycle (U55's epilogue): 64 x 32 / 2 = 1024 cycles
    assert cycles(with_figures(vector_requant_per_cycle=2.0), requant) == 1024


def test_add_at_a_fractional_rate():
    # U55's output unit: 0.75 cycles per int8 Add element: 4/3 elements per cycle
    add = Add(src_a=0, src_b=4096, dst=8192, count=4096, scale_a=1.0, scale_b=1.0)
    assert cycles(with_figures(vector_add_per_cycle=4 / 3), add) == 3072
    # lanes-wide vectors: 33 elements are two 32-lane vectors, 64 elements at 4/3 = 48 cycles
    add33 = Add(src_a=0, src_b=4096, dst=8192, count=33, scale_a=1.0, scale_b=1.0)
    assert cycles(with_figures(vector_add_per_cycle=4 / 3), add33) == 48


def test_a_dma_bound_by_the_scratchpad_port():
    load = Dma(opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=4096)
    # DRAM side: 128 bursts of 32 B at 16 B/cycle = 256; latency 64
    assert cycles(with_figures(), load) == 64 + 256
    # a 4 B/cycle scratchpad port: the SRAM side takes 1024 cycles
    assert cycles(with_figures(sram_bytes_per_cycle=4), load) == 64 + 1024


def test_depthwise_takes_grouped_pixels_per_cycle():
    dw = Conv(src=0, weights=8192, dst=16384, in_h=16, in_w=16, in_c=16, out_c=16, groups=16)
    # 16 groups share one block: 256 pixels + 16 + 32 = 304; at 2 pixels a cycle 128 + 48
    assert cycles(with_figures(), dw) == 304
    assert cycles(with_figures(mac_grouped_pixels_per_cycle=2), dw) == 128 + 16 + 32
    # a dense conv is not grouped: unchanged
    assert cycles(with_figures(mac_grouped_pixels_per_cycle=2), conv_1x1()) == 304


def test_weights_from_flash_take_flash_figures():
    flash = {"weights_in": "flash", "flash_bytes_per_cycle": 1, "flash_latency_cycles": 64,
             "flash_burst_bytes": 128}  # fmt: skip
    weights = Dma(opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=1000, region=1)
    activations = Dma(opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=1000)
    # flash: 1000 B at 1 B/cycle + 64 latency
    assert cycles(with_figures(**flash), weights) == 64 + 1000
    # feature maps stay in DRAM: 1000 B at 16 B/cycle (62.5: 63) + 64
    assert cycles(with_figures(**flash), activations) == 64 + 63
    # a target with weights in DRAM reads the constant region at DRAM speed
    assert cycles(with_figures(), weights) == 64 + 63


def test_u55_memory_modes_differ_only_in_where_weights_live():
    shared, sram = load_target("u55-256").hardware, load_target("u55-256-sram").hardware
    assert (shared.weights_in, sram.weights_in) == ("flash", "dram")
    assert dataclasses.replace(shared, weights_in="dram") == sram


FLASH = {
    "weights_in": "flash",
    "flash_bytes_per_cycle": 1,
    "flash_latency_cycles": 64,
    "flash_burst_bytes": 128,
}


def test_flash_and_dram_transfers_run_on_their_own_ports():
    weights = Dma(opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=1000, region=1, signal=1)
    activations = Dma(opcode=Opcode.LOAD, dram=0, sram=4096, row_bytes=4096, signal=2)
    # flash 64 + 1000 B at 1 B/cycle = 1064; DRAM 64 + 4096 / 16 = 320. On two ports both
    # start at 0: 1064, where one after the other is 1384 (overlap saves 23.1%)
    result = Simulator(with_figures(**FLASH)).run([weights, activations, End()])
    assert result.stats.total_cycles == 1064
    assert result.timeline.start[:2] == (0, 0) and result.timeline.end[:2] == (1064, 320)
    # into the bytes the flash load is still writing: the DMA unit orders the two
    clash = dataclasses.replace(activations, sram=512)
    assert cycles(with_figures(**FLASH), weights, clash) == 1064 + 320
    # without a flash region the constant load is a DRAM transfer on the one port: 64 +
    # 1000 B / 16 (62.5: 63) = 127, then 320 after it
    assert cycles(with_figures(), weights, activations) == 127 + 320


def test_a_runs_last_partial_burst_moves_only_its_bytes():
    """A contiguous run moves its bytes, or a whole burst if it is shorter: its last, partial
    burst is a shorter AXI burst (Vela's `_estimate_memory_transfer_efficiency`: a transfer
    costs bytes x burst / min(burst, run)). The anchor tinyconv's FC weights, 176 B from
    flash (128 B bursts at 1 B/cycle, latency 64): 64 + 176 = 240, not two whole bursts
    (64 + 256 = 320); a 16 B run still costs a whole burst: 64 + 128."""
    fc_weights = Dma(opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=176, region=1)
    assert cycles(with_figures(**FLASH), fc_weights) == 64 + 176
    short = Dma(opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=16, region=1)
    assert cycles(with_figures(**FLASH), short) == 64 + 128
    # strided runs: 4 rows of 200 B, 256 B apart: 4 x 200 = 800; of 40 B: 4 x 128 = 512
    rows = Dma(opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=200, rows=4, dram_row_stride=256,
               sram_row_stride=200, region=1)  # fmt: skip
    assert cycles(with_figures(**FLASH), rows) == 64 + 800
    narrow = dataclasses.replace(rows, row_bytes=40, sram_row_stride=40)
    assert cycles(with_figures(**FLASH), narrow) == 64 + 512


def test_transfers_retire_in_order():
    """A token given by a transfer that ends early is given when every earlier one has ended:
    a conv waiting on the last load alone reads the flash load's bytes safely."""
    weights = Dma(opcode=Opcode.LOAD, dram=0, sram=8192, row_bytes=256, region=1)
    activations = Dma(opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=1024, signal=1)
    # flash: 64 + 2 bursts of 128 B = 320; DRAM: 64 + 1024 / 16 = 128, on its own port
    result = Simulator(with_figures(**FLASH)).run([weights, activations, conv_1x1(wait=1), End()])
    assert result.timeline.end[:2] == (320, 128)
    # the conv (reading the flash load's bytes as its weights) starts at 320, not 128
    assert result.timeline.start[2] == 320
    assert result.stats.total_cycles == 320 + 304


def test_outstanding_transfers_overlap_their_latency():
    """The DMA-bound case: four 64-byte loads, each 64 latency + 4 cycles of data at 16 B/cycle.
    One at a time: 4 x 68 = 272. Four in flight: every latency overlaps and the port moves
    the data back to back, 64 + 4 x 4 = 80 (overlap saves 70.6%). Two in flight: the third
    waits for the first to end (68), its data from 68 + 64 = 132; 132 + 4 + 4 = 140."""
    loads = [Dma(opcode=Opcode.LOAD, dram=64 * k, sram=64 * k, row_bytes=64) for k in range(4)]
    assert cycles(with_figures(), *loads) == 272
    assert cycles(with_figures(dram_outstanding=4), *loads) == 80
    assert cycles(with_figures(dram_outstanding=2), *loads) == 140
    # an issue cost of 5 holds the unit before each: issued at 0, 5, 10, 15, the last one's
    # data from 15 + 5 + 64 = 84 to 88
    assert cycles(with_figures(dram_outstanding=4, issue_cycles=5), *loads) == 88
    # a conv waiting on the last load starts when all four have ended
    program = [*loads[:3], dataclasses.replace(loads[3], signal=1), conv_1x1(wait=1)]
    assert cycles(with_figures(dram_outstanding=4), *program) == 80 + 304


def test_pooling_pays_for_whole_output_blocks():
    # 8x8x16 -> 1x1 average: one 32-lane vector per output pixel per tap, 64 taps; at 8 taps
    # a cycle: 64 x 32 / 8 = 256 cycles
    pool = AvgPool(src=0, dst=4096, in_h=8, in_w=8, channels=16, kernel_h=8, kernel_w=8)
    assert cycles(with_figures(vector_pool_per_cycle=8.0), pool) == 256
    # over a 2x2 output block the one output pixel takes the block's four: 1024
    blocked = {"vector_pool_per_cycle": 8.0, "vector_pool_block_h": 2, "vector_pool_block_w": 2}
    assert cycles(with_figures(**blocked), pool) == 1024
    # 4x4 outputs (kernel 2, stride 2) fill four whole blocks: 16 px x 4 taps x 32 / 8 = 256
    pool2 = AvgPool(
        src=0, dst=4096, in_h=8, in_w=8, channels=16, kernel_h=2, kernel_w=2, stride_h=2, stride_w=2
    )
    assert (
        cycles(with_figures(**blocked), pool2)
        == cycles(with_figures(vector_pool_per_cycle=8.0), pool2)
        == 256
    )


def test_softmax_pays_the_targets_reciprocal_per_row():
    u55 = load_target("u55-256")
    image = np.full(256, 1 << 20, np.int32).view(np.uint8)  # the exp table, in DRAM
    table = Dma(opcode=Opcode.LOAD, dram=0, sram=1024, row_bytes=1024, signal=1)
    softmax = Softmax(src=0, dst=64, table=1024, rows=2, depth=10, wait=1)

    def span(target) -> int:
        result = Simulator(target).run([table, softmax, End()], image)
        return result.timeline.end[1] - result.timeline.start[1]

    # u55-256 with its passes in the scratchpad: 2 rows of 10 = 2 vectors of 16 lanes, three
    # passes at 4 (max), 1 (table) and 8/9 (mul) elements a cycle: 8 + 32 + 36 = 76; 2
    # reciprocals of 376 (Vela's chain of a CLZ and 20 one-element ops); issue 8. SRAM: 80 +
    # 1024 B at 32 B/cycle = 35, less.
    in_sram = dataclasses.replace(u55, hardware=dataclasses.replace(u55.hardware, softmax_passes_in="sram"))
    assert span(in_sram) == 8 + 76 + 2 * 376
    # a radix-2 divider's 32 cycles instead
    divider = dataclasses.replace(
        u55, hardware=dataclasses.replace(in_sram.hardware, vector_reciprocal_cycles=32)
    )
    assert span(divider) == 8 + 76 + 2 * 32


def test_softmax_passes_through_dram_pay_a_command_and_a_round_trip_each():
    u55 = load_target("u55-256")
    assert u55.hardware.softmax_passes_in == "dram"
    image = np.full(256, 1 << 20, np.int32).view(np.uint8)
    table = Dma(opcode=Opcode.LOAD, dram=0, sram=1024, row_bytes=1024, signal=1)
    softmax = Softmax(src=0, dst=64, table=1024, rows=2, depth=10, wait=1)
    result = Simulator(u55).run([table, softmax, End()], image)
    span = result.timeline.end[1] - result.timeline.start[1]
    # as above in the scratchpad (8 + 76 + 2 x 376 = 836), then 4 passes (max, exp + sum,
    # reciprocal, scale) each a command (issue 8) reading and writing the 20-byte tensor
    # through the 8 B/cycle DRAM port with 32 cycles of latency each way: 4 x (8 + 2 x (32 + 3))
    assert span == 836 + 4 * (8 + 2 * (32 + 3))
    # and the bytes of those round trips are DRAM traffic: the table's 1024-byte load, then
    # 4 passes each reading and writing the 20 bytes (they were charged in cycles only)
    assert result.stats.dram_read_bytes == 1024 + 4 * 20
    assert result.stats.dram_written_bytes == 4 * 20


def test_a_single_block_pays_no_weight_load_after_its_pixels():
    # 1x1 conv, 16 -> 16 channels, 4 pixels: one block. First load 16, its 4 pixels (no load
    # behind it), fill and drain 32: 52. (Charged max(4, 16) for the last block, it was 64.)
    conv = Conv(src=0, weights=8192, dst=16384, in_h=2, in_w=2, in_c=16, out_c=16)
    assert cycles(with_figures(), conv) == 16 + 4 + 32
    # 64 -> 16 channels: 4 blocks; the first three stream their 4 pixels while the next
    # block's weights load (16 each), the last only its pixels: 16 + 3 x 16 + 4 + 32
    wide = Conv(src=0, weights=8192, dst=16384, in_h=2, in_w=2, in_c=64, out_c=16)
    assert cycles(with_figures(), wide) == 16 + 3 * 16 + 4 + 32


def test_every_weight_block_pays_the_mac_pipeline_fill():
    wide = Conv(src=0, weights=8192, dst=16384, in_h=2, in_w=2, in_c=64, out_c=16)
    # as above (100), plus 2 cycles of fill for each of the 4 blocks
    assert cycles(with_figures(mac_fill_cycles=2), wide) == 100 + 4 * 2
    assert cycles(with_figures(mac_fill_cycles=0), wide) == 100


def test_the_issue_overlaps_the_wait_before_wait():
    # a 64-byte load (latency 64 + 4 = 68 cycles of work, issue 5) and an add waiting on it
    # (2 cycles of work, issue 5). After the wait: 5 + 68, then 5 + 2 = 80. Before the wait:
    # the add's issue runs during the load, its work starts when the load ends: 73 + 2 = 75.
    load = Dma(opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=64, signal=1)
    add = Add(src_a=0, src_b=64, dst=128, count=64, scale_a=1.0, scale_b=1.0, wait=1)
    after = with_figures(issue_cycles=5)
    before = with_figures(issue_cycles=5, issue_order="before_wait")
    assert cycles(after, load, add) == 5 + 68 + 5 + 2
    assert cycles(before, load, add) == 5 + 68 + 2
    # the add reads the load's bytes: its accesses begin after the load has ended (no race),
    # its start is its issue's, 5 cycles before
    result = Simulator(before).run([load, add, End()])
    assert result.timeline.start[1] == 73 - 5 and result.timeline.issue_overlap == 5
    # with nothing to wait for, the issue is paid in full either way
    free_add = dataclasses.replace(add, wait=0)
    assert cycles(before, free_add) == cycles(after, free_add) == 5 + 2


def test_the_race_check_sees_an_overlapped_issue_touch_nothing():
    # the add reads what the load writes, without a token: a race in either issue order,
    # reported from the cycle its accesses begin (after its 5 cycles of issue)
    load = Dma(opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=64)
    add = Add(src_a=0, src_b=64, dst=128, count=64, scale_a=1.0, scale_b=1.0)
    import pytest

    from vpuc.sim.errors import SimError

    with pytest.raises(SimError, match="from cycle 5,"):
        Simulator(with_figures(issue_cycles=5, issue_order="before_wait")).run([load, add, End()])


def test_a_narrow_conv_puts_a_kernel_tap_in_each_row_slice():
    """Ethos-U55-256's array as u55-256 has it: 32 rows of input channels x 8 columns of
    outputs, a 256-weight block loading in 32 cycles (Vela's `cycles_wb`), the rows in 4
    slices of 8 channels that may each take another kernel tap (Vela's PartKernel
    traversal). A 3x3 conv of 3 -> 16 channels over 16x16 pixels (tinyconv's first layer):
    without slices every tap is a block of its own, 9 taps x 2 column blocks = 18 blocks;
    with them the 9 taps of 3 (in 8) channels go 4 to a block, ceil(9 / 4) = 3 x 2 = 6. Each
    block streams 256 pixels (more than its 32-cycle load): the first load 32 + 6 x 256 +
    fill and drain 32 + 8 = 1608, and 32 + 18 x 256 + 40 = 4680 without."""
    u55 = {"mac_rows": 32, "mac_cols": 8, "mac_weight_load_cycles": 32}
    conv = Conv(src=0, weights=8192, dst=16384, in_h=16, in_w=16, in_c=3, out_c=16,
                kernel_h=3, kernel_w=3, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1)  # fmt: skip
    assert cycles(with_figures(**u55), conv) == 32 + 18 * 256 + 40 == 4680
    assert cycles(with_figures(**u55, mac_row_slice=8), conv) == 32 + 6 * 256 + 40 == 1608
    # 16 input channels: as Vela's PartKernel, 4 taps of one 8-channel slice a block,
    # ceil(9 / 4) x ceil(16 / 8) = 6 blocks a column block, 12 in all, against 9 x 2 = 18
    # depth first (a whole tap of 16 channels in 32 rows)
    wide = dataclasses.replace(conv, in_c=16)
    assert cycles(with_figures(**u55, mac_row_slice=8), wide) == 32 + 12 * 256 + 40
    # 32 input channels fill the rows with one tap: depth first, 9 x 2 = 18, as without slices
    full = dataclasses.replace(conv, in_c=32)
    assert cycles(with_figures(**u55, mac_row_slice=8), full) == cycles(with_figures(**u55), full)
    assert cycles(with_figures(**u55), full) == 32 + 18 * 256 + 40


def test_the_array_fill_and_drain_is_a_target_figure():
    """An FC as U55-256 runs it (tinyconv's, 32 -> 4 channels, one pixel): one 32 x 8
    block, its 32-cycle weight load, its pixel, 2 cycles of pipeline fill. A systolic array
    adds rows + cols = 40 of skew once per instruction (vpuc's default); Ethos-U55's adder
    trees add none (`mac_drain_cycles = 0`, u55-256): Vela's FC estimate is the same
    32 + 2 a step (its `cycles_wb` and `delay`), and nothing after the last block but the
    output unit's own cycles (the requant instruction)."""
    u55 = {"mac_rows": 32, "mac_cols": 8, "mac_weight_load_cycles": 32, "mac_fill_cycles": 2}
    fc = Conv(src=0, weights=8192, dst=16384, in_h=1, in_w=1, in_c=32, out_c=4)
    assert cycles(with_figures(**u55), fc) == 32 + 1 + 2 + 40
    assert cycles(with_figures(**u55, mac_drain_cycles=0), fc) == 32 + 1 + 2
    assert cycles(with_figures(**u55, mac_drain_cycles=5), fc) == 32 + 1 + 2 + 5
    # as shipped: the same 35 cycles of work after its 8 cycles of issue
    assert cycles(load_target("u55-256-sram"), fc) == 8 + 35
