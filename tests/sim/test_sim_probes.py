"""Probes (sim/simulator.py): bytes copied out of memory right after a given instruction,
so a value the program overwrites later is seen as it was then (`vpuc run --check` reads
every layer's tensors so)."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc.sim import Dma, End, Opcode, Probe, Simulator, VpuError


def test_a_probe_sees_sram_before_a_later_load_overwrites_it(vpu):
    image = np.zeros(64, np.uint8)
    image[:16], image[16:32] = np.arange(1, 17), np.arange(101, 117)
    first = Dma(opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=16)
    second = Dma(opcode=Opcode.LOAD, dram=16, sram=0, row_bytes=16)  # the same SRAM bytes
    probes = [Probe(-1, "dram", 16, 16), Probe(0, "sram", 0, 16), Probe(1, "sram", 0, 16)]
    result = Simulator(vpu).run([first, second, End()], image, probes=probes)  # one unit: in order
    np.testing.assert_array_equal(result.captures[probes[0]], np.arange(101, 117))  # before the start
    np.testing.assert_array_equal(result.captures[probes[1]], np.arange(1, 17))  # after the first load
    np.testing.assert_array_equal(result.captures[probes[2]], np.arange(101, 117))  # after the second
    np.testing.assert_array_equal(result.sram[:16], np.arange(101, 117))


@pytest.mark.parametrize(
    ("probe", "message"),
    [(Probe(0, "flash", 0, 4), "neither 'sram' nor 'dram'"), (Probe(0, "sram", 1 << 30, 4), "outside sram")],
)
def test_a_probe_outside_memory_is_refused(vpu, probe, message):
    with pytest.raises(VpuError, match=message):
        Simulator(vpu).run([End()], probes=[probe])
