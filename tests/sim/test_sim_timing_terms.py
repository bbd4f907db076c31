"""The timing terms of docs/targets.md on hand-computed programs, each with explicit
figures: the issue cost, a scratchpad-bound MAC, a scratchpad-bound vector op, a
bandwidth-bound DMA, depthwise pixels per cycle, vector throughput per kind, and weights
read from flash (Vela's Shared_Sram) against the same load from DRAM."""

from __future__ import annotations

import dataclasses

from vpuc.sim import Add, Conv, Dma, End, Opcode, Requant, Simulator
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
    # flash: 8 bursts of 128 B = 1024 B at 1 B/cycle + 64 latency
    assert cycles(with_figures(**flash), weights) == 64 + 1024
    # feature maps stay in DRAM: 32 bursts of 32 B at 16 B/cycle + 64
    assert cycles(with_figures(**flash), activations) == 64 + 64
    # a target with weights in DRAM reads the constant region at DRAM speed
    assert cycles(with_figures(), weights) == 64 + 64


def test_u55_memory_modes_differ_only_in_where_weights_live():
    shared, sram = load_target("u55-256").hardware, load_target("u55-256-sram").hardware
    assert (shared.weights_in, sram.weights_in) == ("flash", "dram")
    assert dataclasses.replace(shared, weights_in="dram") == sram
