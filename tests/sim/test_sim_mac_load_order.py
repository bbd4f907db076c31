"""mac_load_order = "before_wait": a MAC instruction's first weight-block load runs while it
waits on its tokens (docs/targets.md, "The MAC's weight load and its wait"), on
tinyconv's FC (32 -> 4 channels, one pixel) as u55-256-sram runs it, by hand.

Vela 5.2's figure for the same FC on Ethos-U55-256, worked by hand from its estimate (regor
ethos_u55_performance.cpp `EstimateMacOpCycles`, an operation on its own: OpScheduling
Single = First | Last; Sram_Only, the SRAM at 8 B/cycle with 32 cycles of latency and
32-byte bursts):
- MAC, one 2x2x8 output microblock, one kernel step: max(cyclesWb = 32, 4 x 1) + delay 2
  = 34 (`EstimateMacCyclesPerBlock`);
- output unit: max(ceil(0.25 x 4 outputs), bias 10 x 4 x 32 / 256) = 5;
- First: the input block's read, latency 32 + 32 B / 8 = 36 (`MinimumIfmCycles`);
- Last: the output block's write, latency 32 + 4 B at an 8-byte burst (16 / 8) = 34
  (`MinimumOfmCycles`);
- 34 + 5 + 36 + 34 = 109. Nothing for the weights: U55's weight decoder reads them from
  the AXI stream into its weight buffer while the command waits for its input block, so
  their latency and transfer overlap the input's (Vela's layer figure is 113).

vpuc, u55-256-sram (issue 8 before the wait; one 32x8 block, weight load 32, fill 2, no
drain; dram 8 B/cycle, latency 32, burst 32, 4 transfers in flight, one moving data at a
time; requant 4 a cycle on 16 lanes):
- weights (176 B: 128 of weights, 16 of bias, 32 of parameters): 8 + 32 + 22 = 62;
- input (32 B), issued at 8, its data behind the weights' on the port: 62 + 4 = 66;
- conv, 8 + 32 + 1 + 2 = 43 once its tokens are in (66): with mac_load_order
  "before_wait" it starts 8 + 32 before them, 26 .. 69; "after_wait" 8 before, 58 .. 101;
- requant 8 + 4, from 8 before the conv ends: 61 .. 73 (93 .. 105);
- store (4 B: 8 + 32 + one 32-byte burst, 4), from 8 before the requant ends: 65 .. 109
  (97 .. 141).
So 109 with the term (Vela's 109), 141 without."""

from __future__ import annotations

import dataclasses

import pytest

from vpuc.sim import Conv, Dma, End, Opcode, Requant, Simulator
from vpuc.sim.errors import SimError
from vpuc.targets import load_target

WEIGHTS, INPUT, ACC, OUT = 0, 176, 208, 224


def fc_program():
    """Weights and input loaded (token 0 to the MAC), the conv (token 1 to the vector unit),
    the requantisation (token 2 to the DMA unit), the 4-byte store."""
    return [
        Dma(opcode=Opcode.LOAD, dram=0, sram=WEIGHTS, row_bytes=176, region=1),
        Dma(opcode=Opcode.LOAD, dram=256, sram=INPUT, row_bytes=32, signal=0b1),
        Conv(
            src=INPUT,
            weights=WEIGHTS,
            dst=ACC,
            bias=128,
            in_h=1,
            in_w=1,
            in_c=32,
            out_c=4,
            with_bias=1,
            wait=0b1,
            signal=0b10,
        ),
        Requant(src=ACC, dst=OUT, params=144, pixels=1, channels=4, wait=0b10, signal=0b100),
        Dma(opcode=Opcode.STORE, dram=512, sram=OUT, row_bytes=4, wait=0b100),
        End(),
    ]


def with_load_order(order: str):
    u55 = load_target("u55-256-sram")
    return dataclasses.replace(u55, hardware=dataclasses.replace(u55.hardware, mac_load_order=order))


def test_the_fc_loads_its_weight_block_while_it_waits_for_its_input():
    result = Simulator(load_target("u55-256-sram")).run(fc_program())
    assert result.stats.total_cycles == 109  # Vela's 34 + 5 + 36 + 34, by hand above
    assert result.timeline.start[2] == 66 - 8 - 32 and result.timeline.end[2] == 69
    # the weights' load still ends when the tokens are in: the MAC's accesses begin there
    assert result.timeline.accesses_from(2, result.plans[2].unit) == 66


def test_after_the_wait_the_load_follows_the_tokens():
    result = Simulator(with_load_order("after_wait")).run(fc_program())
    assert result.stats.total_cycles == 141
    assert result.timeline.start[2] == 66 - 8


def test_a_mac_with_nothing_to_wait_for_pays_its_load_in_full():
    conv = dataclasses.replace(fc_program()[2], wait=0, signal=0)
    for order in ("before_wait", "after_wait"):
        assert Simulator(with_load_order(order)).run([conv, End()]).stats.total_cycles == 8 + 32 + 1 + 2


def test_the_race_check_sees_the_mac_touch_memory_after_its_load():
    # the conv reads the weights the load writes, with no token between them: a race
    # reported from the cycle its accesses begin, its issue (8) and its load (32) after it starts
    program = fc_program()
    program[2] = dataclasses.replace(program[2], wait=0)
    with pytest.raises(SimError, match="from cycle 40,"):
        Simulator(load_target("u55-256-sram")).run(program)
