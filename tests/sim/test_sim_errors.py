"""Bad input gives one clear error naming the pc and the disassembled instruction, never a
hang or a crash: unknown opcodes, fields out of range, SRAM/DRAM out of bounds, deadlocks,
races, programs without END; random programs run or fail with a VpuError."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vpuc.sim import (
    Add,
    AsmError,
    Clip,
    Conv,
    DecodeError,
    Dma,
    End,
    Lut,
    Opcode,
    Program,
    Requant,
    SimError,
    Simulator,
    VpuError,
    assemble,
    encode,
)
from vpuc.targets.isa.formats import FORMATS


def sim_error(target, program, dram=None) -> SimError:
    with pytest.raises(SimError) as info:
        Simulator(target).run(program, dram)
    return info.value


def test_unknown_opcode_in_a_program_file_names_the_pc():
    blob = bytearray(Program((Clip(src=0, dst=0, count=1), End())).to_bytes())
    blob[16 + 64] = 0x7E  # the opcode byte of pc 1
    with pytest.raises(DecodeError, match=r"<bytes>: pc 1 \(byte 80\): unknown opcode 0x7e"):
        Program.from_bytes(bytes(blob))


def test_field_out_of_range_in_assembly_names_file_line_and_field():
    with pytest.raises(AsmError, match=re.escape("p.s:2: load: field 'rows': 70000 does not fit")):
        assemble("end\nload dram=0 sram=0 row_bytes=1 rows=70000\n", source="p.s")


def test_sram_out_of_bounds(vpu):
    add = Add(src_a=524280, src_b=0, dst=0, count=64, scale_a=1.0, scale_b=1.0)
    error = sim_error(vpu, [Clip(src=0, dst=0, count=1), add, End()])
    assert error.pc == 1
    assert str(error) == (
        "pc 1 'add src_a=524280 src_b=0 dst=0 count=64 scale_a=1.0 scale_b=1.0': "
        "SRAM read of 'src_a' [524280, 524344) out of bounds (512 KiB)"
    )


def test_dram_out_of_bounds_names_the_size(vpu):
    store = Dma(opcode=Opcode.STORE, dram=(64 << 20) - 8, sram=0, row_bytes=16)
    error = sim_error(vpu, [store, End()])
    assert "DRAM write [67108856, 67108872) out of bounds (64 MiB)" in str(error)


def test_dram_grows_to_the_image(vpu):
    image = np.zeros(70 << 20, dtype=np.uint8)
    image[-16:] = np.arange(1, 17)
    load = Dma(opcode=Opcode.LOAD, dram=(70 << 20) - 16, sram=0, row_bytes=16)
    result = Simulator(vpu).run([load, End()], image)
    np.testing.assert_array_equal(result.sram[:16], image[-16:])


def test_wait_on_a_token_nobody_signals_is_a_deadlock(vpu):
    error = sim_error(vpu, [Clip(src=0, dst=0, count=1, wait=1 << 3), End()])
    assert error.pc == 0
    assert "deadlock: waits on token 3, which no instruction signals" in str(error)


def test_circular_wait_is_a_deadlock(vpu):
    program = [
        Dma(opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=4, wait=1 << 1, signal=1 << 0),
        Clip(src=64, dst=64, count=1, wait=1 << 0, signal=1 << 1),
        End(),
    ]
    error = sim_error(vpu, program)
    assert error.pc == 0 and "deadlock" in str(error) and "VEC at pc 1 on token 0" in str(error)


def test_token_used_by_two_waiting_units_is_refused(vpu):
    program = [
        Dma(opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=4, signal=1),
        Clip(src=64, dst=64, count=1, wait=1),
        Conv(src=0, weights=0, dst=128, in_h=1, in_w=1, in_c=1, out_c=1, wait=1),
        End(),
    ]
    error = sim_error(vpu, program)
    assert error.pc == 2 and "token 0 is already used to wait by the VEC unit (pc 1)" in str(error)


@pytest.mark.parametrize(
    ("program", "pc", "message"),
    [
        ([Clip(src=0, dst=0, count=1)], 0, "the program ends without END"),
        ([End(), Clip(src=0, dst=0, count=1), End()], 0, "END is not the last instruction"),
        ([End(signal=1)], 0, "END takes no tokens"),
    ],
)
def test_program_must_end_with_one_end(vpu, program, pc, message):
    error = sim_error(vpu, program)
    assert error.pc == pc and message in str(error)


def test_empty_program_is_an_error(vpu):
    with pytest.raises(VpuError, match="empty"):
        Simulator(vpu).run([])


def test_unsynchronised_access_is_a_race(vpu):
    program = [
        Dma(opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=4096),
        Clip(src=1024, dst=8192, count=16),  # reads what the load is still writing
        End(),
    ]
    error = sim_error(vpu, program)
    assert error.pc == 1
    assert "race: reads SRAM [1024, 1040) from cycle 0, but pc 0 'load dram=0 sram=0 " in str(error)
    assert "writes it until cycle 322" in str(error)  # issue 2 + latency 64 + 4096 B / 16 B


def test_strided_blocks_that_interleave_without_touching_are_no_race(vpu):
    even_rows = dict(row_bytes=16, rows=8, sram_row_stride=32, dram_row_stride=16)
    program = [
        Dma(opcode=Opcode.LOAD, dram=0, sram=0, **even_rows),
        Dma(opcode=Opcode.LOAD, dram=0, sram=16, signal=1, **even_rows),
        Clip(src=16, dst=16, count=16, wait=1),
        Dma(opcode=Opcode.LOAD, dram=0, sram=0, **even_rows),  # runs while clip touches odd rows
        End(),
    ]
    Simulator(vpu).run(program)


def test_misaligned_int32_operand(vpu):
    rq = Requant(src=2, dst=0, params=64, pixels=1, channels=1)
    assert "SRAM int32 'src' at 2 is not 4-byte aligned" in str(sim_error(vpu, [rq, End()]))


def test_lut_needs_a_target_with_a_table(vpu):
    error = sim_error(vpu, [Lut(src=0, dst=0, table=256, count=1), End()])
    assert "this target has no 256-entry lookup table (lut_entries = 0)" in str(error)


def test_semantic_field_errors(vpu):
    conv = Conv(src=0, weights=0, dst=0, in_h=4, in_w=4, in_c=6, out_c=4, groups=4)
    assert "in_c 6 is not a multiple of groups 4" in str(sim_error(vpu, [conv, End()]))
    conv = Conv(src=0, weights=0, dst=0, in_h=2, in_w=2, in_c=1, out_c=1, kernel_h=3)
    assert "the kernel does not fit" in str(sim_error(vpu, [conv, End()]))
    clip = Clip(src=0, dst=0, count=0)
    assert "field 'count' must be at least 1, got 0" in str(sim_error(vpu, [clip, End()]))
    load = Dma(opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=8, rows=2, sram_row_stride=4)
    assert "destination rows overlap" in str(sim_error(vpu, [load, End()]))


def test_data_dependent_errors_name_the_pc(vpu, vpu_fixed_point):
    image = np.zeros(128, np.uint8)
    image[64:68] = np.frombuffer(np.float32(np.nan).tobytes(), np.uint8)
    load = Dma(opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=128, signal=1)
    rq = Requant(src=0, dst=0, params=64, pixels=1, channels=1, wait=1 << 0)
    assert "multiplier 0 is nan" in str(sim_error(vpu, [load, rq, End()], image))
    image[68:72] = np.frombuffer(np.int32(40).tobytes(), np.uint8)
    error = sim_error(vpu_fixed_point, [load, rq, End()], image)
    assert error.pc == 1 and "shift 0 is 40, outside [-31, 30]" in str(error)


ADDRESS_FIELDS = {"dram", "sram", "src", "dst", "weights", "bias", "params", "table", "src_a", "src_b"}


def _field_values(b):
    """Mostly plausible values (so programs get to run), sometimes anything in range."""
    if b.kind == "f32":
        return st.floats(-4, 4, width=32)
    if b.kind == "s":
        return st.integers(-128, 127)
    if b.name in ("wait", "signal"):
        return st.sampled_from([0, 0, 0, 1, 2])
    if b.width == 1:
        return st.integers(0, 1)
    if b.name in ADDRESS_FIELDS:
        plausible = st.integers(0, 127).map(lambda n: 64 * n)
    elif "stride" in b.name and b.width == 32:
        plausible = st.sampled_from([0, 16, 64, 256])
    else:
        plausible = st.integers(1, 3) | st.integers(1, 40)
    return st.one_of(plausible, plausible, plausible, st.integers(0, min(b.mask, 600_000)))


def _random_programs():
    """Random instructions with tokens on two units' queues, ending with END."""

    def instruction(opcode):
        cls = FORMATS[opcode]
        fields = {b.name: _field_values(b) for b in cls.LAYOUT if b.name != "opcode"}
        return st.fixed_dictionaries(fields).map(lambda v: cls(opcode=opcode, **v))

    opcodes = st.sampled_from([op for op in Opcode if op != Opcode.END])
    body = st.lists(opcodes.flatmap(instruction), min_size=0, max_size=6)
    return body.map(lambda instructions: [*instructions, End()])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_random_programs())
def test_random_programs_run_or_fail_cleanly(vpu_plus, program):
    try:
        result = Simulator(vpu_plus).run(program, np.arange(4096, dtype=np.uint8))
    except VpuError as error:
        assert str(error)
        return
    assert result.stats.total_cycles >= 0
    assert Program.from_bytes(Program(program).to_bytes()).instructions == tuple(program)
    assert all(encode(i) for i in program)
