"""The interleaving load (Dma.interleave, docs/isa.md "load, store"): channel planes in DRAM
(an NCHW input) land channels-last in SRAM in one transfer, its SRAM side written in whole
rows. Contents against numpy's transpose, cycles by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vpuc.sim import Dma, End, Opcode, Simulator
from vpuc.sim.errors import VpuError
from vpuc.targets import load_target
from vpuc.targets.isa.footprint import footprint
from vpuc.targets.isa.formats import decode, encode


def with_figures(**figures):
    """`vpu` with no issue cost and no scratchpad limit (the SRAM side moves 16 B a cycle)."""
    vpu = load_target("vpu")
    base = {"issue_cycles": 0, "sram_bytes_per_cycle": 0, **figures}
    return dataclasses.replace(vpu, hardware=dataclasses.replace(vpu.hardware, **base))


def planes_load(c: int, h: int, w: int, pitch: int, sram: int = 0) -> Dma:
    """The c x h x w NCHW tensor at DRAM 0 into rows of `pitch` bytes (h x w x c each)."""
    return Dma(opcode=Opcode.LOAD, dram=0, sram=sram, row_bytes=w, rows=h, planes=c, dram_row_stride=w,
               dram_plane_stride=h * w, sram_row_stride=pitch, interleave=1)  # fmt: skip


def test_planes_land_channels_last_in_padded_rows():
    c, h, w, pad = 3, 4, 5, 1
    x = np.random.default_rng(0).integers(0, 256, (c, h, w), dtype=np.uint8)
    pitch = (w + 2 * pad) * c
    load = planes_load(c, h, w, pitch, sram=pad * c)
    store = Dma(opcode=Opcode.STORE, dram=4096, sram=0, row_bytes=h * pitch)
    load = dataclasses.replace(load, signal=1)
    store = dataclasses.replace(store, wait=1)
    dram = np.zeros(8192, np.uint8)
    dram[: x.size] = x.ravel()
    result = Simulator(with_figures()).run([load, store, End()], dram)
    rows = np.asarray(result.dram[4096 : 4096 + h * pitch]).reshape(h, w + 2 * pad, c)
    np.testing.assert_array_equal(rows[:, pad : pad + w, :], x.transpose(1, 2, 0))
    assert not rows[:, :pad].any() and not rows[:, pad + w :].any()  # the pad columns untouched


def test_the_sram_side_moves_whole_rows():
    """3 planes of 32 x 32: DRAM one run of 3072 B = 96 bursts of 32 B at 16 B a cycle, 192;
    SRAM 32 rows of 96 B at 16 B a cycle, 6 each, 192: 64 latency + 192 = 256. The same
    tile as three scatters of single bytes (no interleave): each 64 + 1024 runs of one byte
    at a cycle each, 1088, and 3264 for the three."""
    target = with_figures()
    interleaved = planes_load(3, 32, 32, 96)
    assert Simulator(target).run([interleaved, End()]).stats.total_cycles == 256
    padded = planes_load(3, 32, 32, 102)  # rows apart: 32 runs of 96 B, still 6 cycles each
    assert Simulator(target).run([padded, End()]).stats.total_cycles == 256
    scatters = [
        Dma(
            opcode=Opcode.LOAD,
            dram=1024 * ch,
            sram=ch,
            row_bytes=1,
            rows=1024,
            dram_row_stride=1,
            sram_row_stride=3,
        )  # fmt: skip
        for ch in range(3)
    ]
    assert Simulator(target).run([*scatters, End()]).stats.total_cycles == 3 * 1088


def test_encoding_and_footprint():
    load = planes_load(3, 4, 5, 21, sram=3)
    assert decode(encode(load)) == load
    (read, write) = footprint(load, "float32")
    assert (read.region.start, read.region.stop) == (0, 60)  # the three planes, adjacent
    # SRAM: 4 rows of 15 bytes, 21 apart, from 3: [3, 3 + 3*21 + 15)
    assert (write.region.start, write.region.stop, write.region.block) == (3, 81, (1, 4, 15, 21, 0))


def test_a_store_does_not_interleave():
    store = dataclasses.replace(planes_load(3, 4, 5, 15), opcode=Opcode.STORE)
    with pytest.raises(VpuError, match="interleave is a load's mode"):
        Simulator(with_figures()).run([store, End()])
