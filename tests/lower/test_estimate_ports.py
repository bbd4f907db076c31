"""The compile-time estimate runs DMA events through the memory ports as the simulator does
(targets/isa/cost.py DmaPorts), checked against hand calculations: transfers in flight
overlap their latency, flash runs beside DRAM, and the DMA unit retires in order."""

from __future__ import annotations

import dataclasses

from vpuc.compiler.lower.codegen.estimate import Clock, pipeline
from vpuc.targets import load_target
from vpuc.targets.isa.formats import Unit


def figures(**changes):
    hw = load_target("vpu").hardware
    return dataclasses.replace(hw, issue_cycles=0, sram_bytes_per_cycle=0, **changes)


def run(hw, transfers, deps=None):
    n = len(transfers)
    return pipeline(
        [Unit.DMA] * n,
        [sum(c for _, c in t) for t in transfers],
        list(range(n)),
        deps or [[] for _ in range(n)],
        Clock(),
        None,
        transfers,
        hw,
    )


def test_four_loads_in_flight_take_one_latency():
    # four 64-byte loads on vpu's DRAM: 64 latency + 4 cycles each; one at a time 272,
    # four in flight 64 + 4 x 4 = 80, two in flight 140 (tests/sim/test_sim_timing_terms.py)
    loads = [[("dram", 68)] for _ in range(4)]
    assert max(run(figures(), loads)) == 272
    assert max(run(figures(dram_outstanding=4), loads)) == 80
    assert max(run(figures(dram_outstanding=2), loads)) == 140


def test_flash_beside_dram_and_in_order_retirement():
    hw = figures(weights_in="flash", flash_bytes_per_cycle=1, flash_latency_cycles=64, flash_burst_bytes=128)
    # flash 64 + 1024 = 1088 beside a DRAM load of 64 + 256 = 320: the DRAM load ends at 320
    # but counts as done (for what waits on it) when the flash load before it has: 1088
    end = run(hw, [[("flash", 1088)], [("dram", 320)]])
    assert end == [1088, 1088]
    # a DRAM load first is not held by the flash load after it
    assert run(hw, [[("dram", 320)], [("flash", 1088)]]) == [320, 1088]
