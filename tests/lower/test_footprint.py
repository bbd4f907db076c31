"""One footprint (issue 21 item 5): targets/isa/footprint.py says which bytes an instruction
touches, for the compiler's token placement (codegen/sync.py) and the simulator's race
check alike. Checked by hand on two instructions, and on random programs: the sync pass may
reorder them (random tile keys), and the simulator, running the reordered program with the
tokens the sync pass placed, must find no race and compute the bytes the program computes
in generation order, one instruction after another."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.sim.conftest import serialised
from vpuc.compiler.lower.codegen.sync import synchronise
from vpuc.sim import Add, Clip, Conv, Dma, End, MaxPool, Opcode, Simulator
from vpuc.targets import load_target
from vpuc.targets.isa.footprint import DRAM, SRAM, footprint

VPU = load_target("vpu")
SRAM_SPAN = 1024  # the random programs touch SRAM [0, 1024 + 512): operands overlap often
DRAM_SPAN = 2048


def _touched(region) -> set[int]:
    return {b for b in range(region.start, region.stop) if region.byte_mask(b, b + 1)[0]}


def test_a_strided_3d_load_by_hand():
    load = Dma(
        opcode=Opcode.LOAD, dram=100, sram=64, row_bytes=8, rows=3, planes=2,
        dram_row_stride=8, dram_plane_stride=24, sram_row_stride=16, sram_plane_stride=64,
    )  # fmt: skip
    dram_read, sram_write = footprint(load, "float32")
    assert (dram_read.memory, dram_read.write) == (DRAM, False)
    assert (dram_read.region.start, dram_read.region.stop, dram_read.region.block) == (100, 148, None)
    assert (sram_write.memory, sram_write.write) == (SRAM, True)
    # rows at 64, 80, 96 and (plane 2) 128, 144, 160, 8 bytes each
    expected = {b for row in (64, 80, 96, 128, 144, 160) for b in range(row, row + 8)}
    assert (sram_write.region.start, sram_write.region.stop) == (64, 168)
    assert _touched(sram_write.region) == expected


def test_an_accumulating_conv_with_spaced_pixels_by_hand():
    conv = Conv(
        src=1000, weights=2000, dst=4096, bias=3000, in_h=4, in_w=4, in_c=3, out_c=8,
        kernel_h=3, kernel_w=3, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1,
        src_stride=4, with_bias=1, accumulate=1,
    )  # fmt: skip
    accesses = footprint(conv, "float32")
    reads = [(a.what, a.region.start, a.region.stop) for a in accesses if not a.write]
    writes = [(a.what, a.region.start, a.region.stop) for a in accesses if a.write]
    # src: 16 pixels of 3 bytes, 4 apart: the last ends at 1000 + 15 * 4 + 3
    # weights: 8 x 3 x 3 x 3; bias: 8 int32; dst: 4 x 4 pixels x 8 int32, read and written
    assert reads == [
        ("read of 'src'", 1000, 1063),
        ("read of 'weights'", 2000, 2216),
        ("int32 'bias'", 3000, 3032),
        ("int32 'dst'", 4096, 4608),
    ]
    assert writes == [("int32 'dst'", 4096, 4608)]
    src = accesses[0].region
    assert len(_touched(src)) == 48 and not src.byte_mask(1003, 1004)[0]  # the gap byte


def _dma(draw, opcode):
    row_bytes = draw(st.integers(1, 48))
    rows = draw(st.integers(1, 4))
    planes = draw(st.integers(1, 2))
    sram_row = row_bytes + draw(st.integers(0, 16))
    sram_plane = rows * sram_row + draw(st.integers(0, 16))
    dram_row = row_bytes + draw(st.integers(0, 16))
    dram_plane = rows * dram_row + draw(st.integers(0, 16))
    return Dma(
        opcode=opcode, row_bytes=row_bytes, rows=rows, planes=planes,
        sram=32 * draw(st.integers(0, SRAM_SPAN // 32 - 1)), dram=draw(st.integers(0, DRAM_SPAN - 512)),
        sram_row_stride=sram_row, sram_plane_stride=sram_plane,
        dram_row_stride=dram_row, dram_plane_stride=dram_plane,
    )  # fmt: skip


@st.composite
def _instruction(draw):
    kind = draw(st.sampled_from(["load", "store", "clip", "add", "conv", "maxpool"]))
    at = st.integers(0, SRAM_SPAN // 32 - 1).map(lambda k: 32 * k)
    if kind in ("load", "store"):
        return _dma(draw, Opcode.LOAD if kind == "load" else Opcode.STORE)
    if kind == "clip":
        return Clip(src=draw(at), dst=draw(at), count=draw(st.integers(1, 128)), clamp_min=-20, clamp_max=30)
    if kind == "add":
        count = draw(st.integers(1, 128))
        return Add(src_a=draw(at), src_b=draw(at), dst=draw(at), count=count, scale_a=0.5, scale_b=0.25)
    if kind == "maxpool":
        return MaxPool(src=draw(at), dst=draw(at), in_h=4, in_w=4, channels=4, kernel_h=2, kernel_w=2,
                       stride_h=2, stride_w=2)  # fmt: skip
    in_c = draw(st.integers(1, 4))
    return Conv(
        src=draw(at), weights=draw(at), dst=draw(at),
        in_h=3, in_w=3, in_c=in_c, out_c=4, kernel_h=2, kernel_w=2,
        src_stride=in_c + draw(st.integers(0, 2)), accumulate=draw(st.integers(0, 1)),
    )  # fmt: skip


def _run(program, image):
    result = Simulator(VPU).run([*program, End()], image)
    return result.sram.copy(), result.dram.copy()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_instruction(), min_size=2, max_size=12), st.data())
def test_sync_and_race_check_agree_on_random_programs(instructions, data):
    keys = data.draw(st.lists(st.integers(0, 3), min_size=len(instructions), max_size=len(instructions)))
    image = np.random.default_rng(len(instructions)).integers(0, 256, DRAM_SPAN, dtype=np.uint8)
    reordered = synchronise(instructions, [float(k) for k in keys], "float32")
    # no race (Simulator raises SimError), and the bytes of the generation order
    got_sram, got_dram = _run(reordered, image)
    want_sram, want_dram = _run(serialised(instructions), image)
    np.testing.assert_array_equal(got_sram, want_sram)
    np.testing.assert_array_equal(got_dram, want_dram)
