"""The ISA: every format round-trips through its 64-byte word and its assembly text, every
field is range-checked with a message naming it, and random words decode or fail cleanly."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpuc.sim import DecodeError, IsaError, decode, encode
from vpuc.sim.ops import OPS
from vpuc.targets.isa.asm import format_instruction, parse_instruction
from vpuc.targets.isa.formats import (
    FORMATS,
    WORD_BYTES,
    Add,
    AvgPool,
    Clip,
    Conv,
    Dma,
    End,
    Lut,
    Matmul,
    MaxPool,
    Mul,
    Opcode,
    Requant,
    Softmax,
    Unit,
)

EXAMPLES = [
    Dma(
        opcode=Opcode.LOAD,
        dram=1 << 20,
        sram=64,
        row_bytes=96,
        rows=3,
        planes=2,
        dram_row_stride=512,
        dram_plane_stride=8192,
        sram_row_stride=96,
        sram_plane_stride=288,
        layer=7,
        wait=0b101,
        signal=0x8000,
    ),
    Dma(opcode=Opcode.STORE, dram=0xFFFFFFFF, sram=0, row_bytes=1),
    Conv(
        src=0,
        weights=4096,
        dst=8192,
        bias=65536,
        in_h=56,
        in_w=56,
        in_c=64,
        out_c=64,
        kernel_h=3,
        kernel_w=3,
        stride_h=2,
        stride_w=2,
        dilation_h=2,
        dilation_w=3,
        pad_top=1,
        pad_bottom=2,
        pad_left=3,
        pad_right=4,
        groups=64,
        src_zp=-128,
        with_bias=1,
        accumulate=1,
        src_stride=65535,
    ),
    Matmul(src=0, weights=64, dst=128, m=(1 << 32) - 1, k=65535, n=1000, src_zp=127),
    Matmul(src=0, weights=64, dst=128, m=3, k=5, n=7, src_zp=-1, weights_kn=1, weights_zp=-128),
    Requant(
        src=0, dst=64, params=128, pixels=49, channels=512, per_channel=0, dst_zp=-5, clamp_min=0, clamp_max=6
    ),
    Requant(src=0, dst=64, params=128, pixels=4, channels=8, dst_stride=24),
    Mul(src_a=0, src_b=64, dst=128, pixels=10, channels=16, broadcast_b=1, zp_a=3, zp_b=-4, scale=0.5),
    Add(src_a=0, src_b=64, dst=128, count=1000, zp_a=-1, zp_b=2, dst_zp=-3, scale_a=0.1, scale_b=-3.5e-7),
    Clip(src=0, dst=0, count=3, clamp_min=-7, clamp_max=-7),
    Lut(src=0, dst=64, table=128, count=99),
    MaxPool(
        src=0,
        dst=64,
        in_h=112,
        in_w=112,
        channels=64,
        kernel_h=3,
        kernel_w=3,
        stride_h=2,
        stride_w=2,
        pad_top=1,
        pad_left=1,
    ),
    AvgPool(
        src=0,
        dst=64,
        in_h=7,
        in_w=7,
        channels=512,
        kernel_h=7,
        kernel_w=7,
        src_zp=3,
        dst_zp=-2,
        scale=0.25,
        count_include_pad=1,
        clamp_min=-100,
        clamp_max=100,
    ),
    Softmax(
        src=0, dst=1024, table=4096, rows=49, depth=1000, dst_zp=-128, shift=52, multiplier=(1 << 31) - 1
    ),
    End(),
]


@pytest.mark.parametrize("instruction", EXAMPLES, ids=lambda i: i.mnemonic)
def test_every_format_round_trips(instruction):
    word = encode(instruction)
    assert len(word) == WORD_BYTES
    assert decode(word) == instruction
    assert parse_instruction(format_instruction(instruction)) == instruction


def test_every_opcode_has_a_format_a_unit_and_a_handler():
    assert set(FORMATS) == set(Opcode) == set(OPS)
    assert {type(i) for i in EXAMPLES} == set(FORMATS.values())
    assert Conv(src=0, weights=0, dst=0, in_h=1, in_w=1, in_c=1, out_c=1).unit == Unit.MAC
    assert Dma(opcode=Opcode.STORE, dram=0, sram=0, row_bytes=1).unit == Unit.DMA
    assert Clip(src=0, dst=0, count=1).unit == Unit.VEC


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: Dma(opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=1, rows=70000),
            "field 'rows': 70000 does not fit in 16 bits",
        ),
        (
            lambda: Conv(src=0, weights=0, dst=0, in_h=1, in_w=1, in_c=1, out_c=1, src_zp=200),
            "field 'src_zp': 200 does not fit in 8 signed bits",
        ),
        (lambda: Clip(src=-1, dst=0, count=1), "field 'src': -1 does not fit in 32 bits"),
        (lambda: Clip(src=0, dst=0, count=1.5), "field 'count': expected an integer"),
        (
            lambda: Add(src_a=0, src_b=0, dst=0, count=1, scale_a=float("nan"), scale_b=1.0),
            "field 'scale_a': nan is not a finite float32",
        ),
        (
            lambda: Add(src_a=0, src_b=0, dst=0, count=1, scale_a=1e39, scale_b=1.0),
            "field 'scale_a': 1e+39 is not a finite float32",
        ),
        (
            lambda: Dma(opcode=Opcode.CONV, dram=0, sram=0, row_bytes=1),
            "opcode 'conv' does not use format Dma",
        ),
        (lambda: Dma(opcode=0x33, dram=0, sram=0, row_bytes=1), "unknown opcode 51"),
    ],
)
def test_fields_are_range_checked_by_name(make, message):
    with pytest.raises(IsaError, match=re.escape(message)):
        make()


def test_floats_are_stored_as_float32():
    add = Add(src_a=0, src_b=0, dst=0, count=1, scale_a=0.1, scale_b=1)
    assert add.scale_a == 0.10000000149011612 and decode(encode(add)) == add


def test_decode_names_unknown_opcodes_and_stray_bits():
    with pytest.raises(DecodeError, match="unknown opcode 0x00"):
        decode(bytes(WORD_BYTES))
    word = bytearray(encode(End()))
    word[1] = 1  # bit 8 is reserved in every format
    with pytest.raises(DecodeError, match="end: reserved bit 8 is set"):
        decode(bytes(word))
    with pytest.raises(DecodeError, match="64 bytes, got 3"):
        decode(b"abc")


def _instructions():
    """Any instruction: a format and a value for each of its fields, edges included."""

    def field_values(bit_field):
        if bit_field.kind == "f32":
            return st.floats(width=32, allow_nan=False, allow_infinity=False)
        if bit_field.kind == "s":
            return st.integers(-(1 << (bit_field.width - 1)), (1 << (bit_field.width - 1)) - 1)
        return st.integers(0, bit_field.mask)

    def build(opcode):
        cls = FORMATS[opcode]
        strategies = {b.name: field_values(b) for b in cls.LAYOUT if b.name != "opcode"}
        return st.fixed_dictionaries(strategies).map(lambda v: cls(opcode=opcode, **v))

    return st.sampled_from(list(Opcode)).flatmap(build)


@settings(max_examples=300, deadline=None)
@given(_instructions())
def test_random_instructions_round_trip(instruction):
    assert decode(encode(instruction)) == instruction
    assert parse_instruction(format_instruction(instruction)) == instruction


def _words():
    """Random bytes, and random bits under a known opcode (some beyond its fields)."""

    def under_opcode(opcode, bits, stray):
        used = FORMATS[opcode].USED_BITS
        word = (bits & used & ~0xFF) | opcode | (stray & ~used)
        return word.to_bytes(WORD_BYTES, "little")

    random_bits = st.integers(0, (1 << (8 * WORD_BYTES)) - 1)
    stray = st.just(0) | random_bits | st.integers(0, 8).map(lambda n: 1 << (200 + 30 * n))
    return st.binary(min_size=WORD_BYTES, max_size=WORD_BYTES) | st.builds(
        under_opcode, st.sampled_from(list(Opcode)), random_bits, stray
    )


@settings(max_examples=400, deadline=None)
@given(_words())
def test_random_words_decode_or_raise_decode_error(word):
    try:
        instruction = decode(word)
    except DecodeError:
        return
    assert encode(instruction) == word
