"""The VPU instruction set: opcodes, one frozen dataclass per format, and its binary encoding.

The contract of both sides: the compiler's emitter (compiler/lower/codegen/emit.py) builds these
instructions, the simulator (vpuc.sim) runs them; the assembler (asm.py) and the program
container (program.py) build on these classes. Every instruction is one 64-byte little-endian word; bits
0..63 are a header common to all formats (opcode, layer, wait and signal token masks), the
rest is declared field by field in each format. `decode(encode(i)) == i` for every valid
instruction. docs/isa.md documents the semantics; its field tables come from
`markdown_table`.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from enum import IntEnum
from typing import Any, ClassVar

from vpuc.targets.isa.bitfield import BitField, declared_layout, f32, s, u
from vpuc.targets.isa.errors import DecodeError, IsaError

WORD_BYTES = 64
WORD_BITS = WORD_BYTES * 8
TOKEN_COUNT = 16
HEADER_BITS = 64  # bits 0..63: opcode, layer, wait, signal


class Opcode(IntEnum):
    """Operation codes; the high nibble names the unit (0 DMA, 1 MAC, 2 vector, F control)."""

    LOAD = 0x01
    STORE = 0x02
    CONV = 0x10
    MATMUL = 0x11
    REQUANT = 0x20
    ADD = 0x21
    CLIP = 0x22
    LUT = 0x23
    MAXPOOL = 0x24
    AVGPOOL = 0x25
    MUL = 0x26
    SOFTMAX = 0x27
    VCONV = 0x28
    END = 0xFF

    @property
    def mnemonic(self) -> str:
        return self.name.lower()


class Unit(IntEnum):
    """The units that run instruction queues in parallel; CTRL is END's drain."""

    DMA = 0
    MAC = 1
    VEC = 2
    CTRL = 3


UNIT_OF: dict[Opcode, Unit] = {
    op: {0x0: Unit.DMA, 0x1: Unit.MAC, 0x2: Unit.VEC}.get(op >> 4, Unit.CTRL) for op in Opcode
}
OPCODE_OF_MNEMONIC: dict[str, Opcode] = {op.mnemonic: op for op in Opcode}
_OPCODE_VALUES = frozenset(int(op) for op in Opcode)


def _check_opcode(value: Any) -> Opcode:
    try:
        return Opcode(value)
    except ValueError:
        raise IsaError(f"field 'opcode': unknown opcode {value!r}") from None


def opcode_field(default: Any = MISSING) -> Any:
    return u(0, 8, "operation code", default)


@dataclass(frozen=True, kw_only=True)
class Instruction:
    """Header common to every format: opcode, layer id, wait and signal token masks."""

    opcode: Opcode = opcode_field()
    layer: int = u(16, 16, "id of the layer this instruction serves (statistics only)", 0)
    wait: int = u(32, 16, "token mask: take one count of each token before starting", 0)
    signal: int = u(48, 16, "token mask: give one count of each token when done", 0)

    OPCODES: ClassVar[tuple[Opcode, ...]] = ()
    LAYOUT: ClassVar[tuple[BitField, ...]] = ()
    USED_BITS: ClassVar[int] = 0

    def __post_init__(self) -> None:
        for bit_field in self.LAYOUT:
            value = getattr(self, bit_field.name)
            stored = bit_field.check(value)
            if stored is not value:
                object.__setattr__(self, bit_field.name, stored)
        object.__setattr__(self, "opcode", _check_opcode(self.opcode))
        if self.opcode not in self.OPCODES:
            raise IsaError(f"opcode '{self.opcode.mnemonic}' does not use format {type(self).__name__}")

    @property
    def unit(self) -> Unit:
        return UNIT_OF[self.opcode]

    @property
    def mnemonic(self) -> str:
        return self.opcode.mnemonic


FORMATS: dict[Opcode, type[Instruction]] = {}


def instruction_format(*opcodes: Opcode):
    """Class decorator: register a format for `opcodes` and check that its fields fit."""

    def register(cls: type[Instruction]) -> type[Instruction]:
        cls.OPCODES = opcodes
        cls.LAYOUT, cls.USED_BITS = declared_layout(cls, WORD_BITS)
        FORMATS.update(dict.fromkeys(opcodes, cls))
        return cls

    return register


# --- the formats -------------------------------------------------------------------------
# Addresses are byte addresses; SRAM tensors are NHWC / row-major and contiguous.


@instruction_format(Opcode.LOAD, Opcode.STORE)
@dataclass(frozen=True, kw_only=True)
class Dma(Instruction):
    """load: DRAM -> SRAM, store: SRAM -> DRAM; a block of planes x rows x row_bytes."""

    dram: int = u(64, 32, "DRAM byte address of the block")
    sram: int = u(96, 32, "SRAM byte address of the block")
    row_bytes: int = u(128, 32, "contiguous bytes per row")
    rows: int = u(160, 16, "rows per plane", 1)
    planes: int = u(176, 16, "planes", 1)
    dram_row_stride: int = u(192, 32, "DRAM bytes from one row to the next", 0)
    dram_plane_stride: int = u(224, 32, "DRAM bytes from one plane to the next", 0)
    sram_row_stride: int = u(256, 32, "SRAM bytes from one row to the next", 0)
    sram_plane_stride: int = u(288, 32, "SRAM bytes from one plane to the next", 0)
    region: int = u(320, 1, "1: the DRAM side is in the constant region (flash where the target has one)", 0)
    interleave: int = u(
        321,
        1,
        "load, 1: the planes are channel planes written channels-last: byte x of row r of plane p"
        " to sram + r*sram_row_stride + x*planes + p (sram_plane_stride 0)",
        0,
    )

    def sram_block(self) -> tuple[tuple[int, int, int], tuple[int, int]]:
        """(planes, rows, row_bytes) and (row, plane) strides of the SRAM side: the block
        itself, or with `interleave` one plane of rows of row_bytes x planes bytes."""
        if self.interleave:
            return (1, self.rows, self.row_bytes * self.planes), (self.sram_row_stride, 0)
        return (self.planes, self.rows, self.row_bytes), (self.sram_row_stride, self.sram_plane_stride)


@instruction_format(Opcode.CONV, Opcode.VCONV)
@dataclass(frozen=True, kw_only=True)
class Conv(Instruction):
    """int8 NHWC input x int8 OHWI weights -> int32 accumulators (grouped, dilated, padded).
    conv runs on the MAC array; vconv is the same operation on the vector unit's lanes, for a
    depthwise convolution only (groups = in_c = out_c), on targets with vector_mac_per_cycle."""

    opcode: Opcode = opcode_field(Opcode.CONV)
    src: int = u(64, 32, "SRAM address of the int8 input, in_h x in_w x in_c")
    weights: int = u(96, 32, "SRAM address of the int8 weights, out_c x kh x kw x in_c/groups")
    dst: int = u(128, 32, "SRAM address of the int32 output, out_h x out_w x out_c")
    bias: int = u(160, 32, "SRAM address of out_c int32 biases (used when with_bias)", 0)
    in_h: int = u(192, 16, "input height")
    in_w: int = u(208, 16, "input width")
    in_c: int = u(224, 16, "input channels")
    out_c: int = u(240, 16, "output channels")
    kernel_h: int = u(256, 8, "kernel height", 1)
    kernel_w: int = u(264, 8, "kernel width", 1)
    stride_h: int = u(272, 8, "vertical stride", 1)
    stride_w: int = u(280, 8, "horizontal stride", 1)
    dilation_h: int = u(288, 8, "vertical dilation", 1)
    dilation_w: int = u(296, 8, "horizontal dilation", 1)
    pad_top: int = u(304, 8, "rows of padding above (value src_zp)", 0)
    pad_bottom: int = u(312, 8, "rows of padding below", 0)
    pad_left: int = u(320, 8, "columns of padding left", 0)
    pad_right: int = u(328, 8, "columns of padding right", 0)
    groups: int = u(336, 16, "groups (in_c for depthwise)", 1)
    src_zp: int = s(352, 8, "input zero point, subtracted from every input and pad value", 0)
    with_bias: int = u(360, 1, "1: add the int32 biases", 0)
    accumulate: int = u(361, 1, "1: add onto the int32 values already at dst", 0)
    src_stride: int = u(368, 16, "bytes from one input pixel to the next (0: in_c; < in_c: overlapping)", 0)
    src_row_stride: int = u(384, 32, "bytes from one input row to the next (0: in_w x the pixel stride)", 0)


@instruction_format(Opcode.MATMUL)
@dataclass(frozen=True, kw_only=True)
class Matmul(Instruction):
    """int8 (m x k) x int8 weights (n x k, row per output; or k x n) -> int32 (m x n)."""

    opcode: Opcode = opcode_field(Opcode.MATMUL)
    src: int = u(64, 32, "SRAM address of the int8 input, m x k")
    weights: int = u(96, 32, "SRAM address of the int8 weights, n x k")
    dst: int = u(128, 32, "SRAM address of the int32 output, m x n")
    bias: int = u(160, 32, "SRAM address of n int32 biases (used when with_bias)", 0)
    m: int = u(192, 32, "rows of the input and output")
    k: int = u(224, 16, "reduction length")
    n: int = u(240, 16, "output columns")
    src_zp: int = s(256, 8, "input zero point, subtracted from every input", 0)
    with_bias: int = u(264, 1, "1: add the int32 biases", 0)
    accumulate: int = u(265, 1, "1: add onto the int32 values already at dst", 0)
    weights_kn: int = u(266, 1, "1: weights are k x n (a second activation as stored), 0: n x k", 0)
    weights_zp: int = s(272, 8, "zero point of the weights, subtracted from every weight", 0)


@instruction_format(Opcode.REQUANT)
@dataclass(frozen=True, kw_only=True)
class Requant(Instruction):
    """int32 (pixels x channels) -> int8 with per-channel parameters from SRAM."""

    opcode: Opcode = opcode_field(Opcode.REQUANT)
    src: int = u(64, 32, "SRAM address of the int32 input, pixels x channels")
    dst: int = u(96, 32, "SRAM address of the int8 output, pixels x channels")
    params: int = u(128, 32, "SRAM address of the parameters (layout by numerics mode)")
    pixels: int = u(160, 32, "rows")
    channels: int = u(192, 16, "channels (innermost)")
    per_channel: int = u(208, 1, "1: one parameter set per channel, 0: one for all", 1)
    dst_zp: int = s(216, 8, "output zero point", 0)
    clamp_min: int = s(224, 8, "lower bound after the zero point (fused relu)", -128)
    clamp_max: int = s(232, 8, "upper bound after the zero point (fused relu6)", 127)
    dst_stride: int = u(240, 16, "bytes from one output pixel to the next (0: channels)", 0)


@instruction_format(Opcode.ADD)
@dataclass(frozen=True, kw_only=True)
class Add(Instruction):
    """int8 a + int8 b, each rescaled to the output scale (QLinearAdd)."""

    opcode: Opcode = opcode_field(Opcode.ADD)
    src_a: int = u(64, 32, "SRAM address of int8 input a")
    src_b: int = u(96, 32, "SRAM address of int8 input b")
    dst: int = u(128, 32, "SRAM address of the int8 output")
    count: int = u(160, 32, "elements")
    zp_a: int = s(192, 8, "zero point of a", 0)
    zp_b: int = s(200, 8, "zero point of b", 0)
    dst_zp: int = s(208, 8, "output zero point", 0)
    clamp_min: int = s(216, 8, "lower bound after the zero point", -128)
    clamp_max: int = s(224, 8, "upper bound after the zero point", 127)
    scale_a: float = f32(256, "multiplier of a: float32(s_a / s_y)")
    scale_b: float = f32(288, "multiplier of b: float32(s_b / s_y)")


@instruction_format(Opcode.MUL)
@dataclass(frozen=True, kw_only=True)
class Mul(Instruction):
    """int8 a * int8 b rescaled to the output scale (QLinearMul); b may be one row broadcast."""

    opcode: Opcode = opcode_field(Opcode.MUL)
    src_a: int = u(64, 32, "SRAM address of int8 input a, pixels x channels")
    src_b: int = u(96, 32, "SRAM address of int8 input b, pixels x channels (or 1 x channels)")
    dst: int = u(128, 32, "SRAM address of the int8 output, pixels x channels")
    pixels: int = u(160, 32, "rows")
    channels: int = u(192, 16, "elements per row (innermost)")
    broadcast_b: int = u(208, 1, "1: b is one row of channels, used for every pixel", 0)
    zp_a: int = s(216, 8, "zero point of a", 0)
    zp_b: int = s(224, 8, "zero point of b", 0)
    dst_zp: int = s(232, 8, "output zero point", 0)
    clamp_min: int = s(240, 8, "lower bound after the zero point", -128)
    clamp_max: int = s(248, 8, "upper bound after the zero point", 127)
    scale: float = f32(256, "multiplier float32(s_a * s_b / s_y)")


@instruction_format(Opcode.CLIP)
@dataclass(frozen=True, kw_only=True)
class Clip(Instruction):
    """int8 clamp (relu is clamp_min = zero point)."""

    opcode: Opcode = opcode_field(Opcode.CLIP)
    src: int = u(64, 32, "SRAM address of the int8 input")
    dst: int = u(96, 32, "SRAM address of the int8 output")
    count: int = u(128, 32, "elements")
    clamp_min: int = s(160, 8, "lower bound", -128)
    clamp_max: int = s(168, 8, "upper bound", 127)


@instruction_format(Opcode.LUT)
@dataclass(frozen=True, kw_only=True)
class Lut(Instruction):
    """y = table[x + 128] with a 256-entry int8 table in SRAM (targets with a LUT)."""

    opcode: Opcode = opcode_field(Opcode.LUT)
    src: int = u(64, 32, "SRAM address of the int8 input")
    dst: int = u(96, 32, "SRAM address of the int8 output")
    table: int = u(128, 32, "SRAM address of the 256 int8 entries, for x = -128..127")
    count: int = u(160, 32, "elements")


@instruction_format(Opcode.SOFTMAX)
@dataclass(frozen=True, kw_only=True)
class Softmax(Instruction):
    """Softmax of each row of int8 logits: row max, exp by an int32 table, int32 sum,
    reciprocal, requantisation (docs/softmax.md; targets with a LUT)."""

    opcode: Opcode = opcode_field(Opcode.SOFTMAX)
    src: int = u(64, 32, "SRAM address of the int8 input, rows x depth")
    dst: int = u(96, 32, "SRAM address of the int8 output, rows x depth")
    table: int = u(128, 32, "SRAM address of the 256 int32 entries: exp for x - max = -255..0")
    rows: int = u(160, 32, "rows (each one softmax)")
    depth: int = u(192, 16, "elements per row (the softmax axis, innermost)")
    dst_zp: int = s(208, 8, "output zero point", 0)
    shift: int = u(216, 8, "right shift of the output product, 1..63", 52)
    multiplier: int = u(224, 32, "output multiplier M0: y = zp + round(p_q30 * M0 / 2^shift)", 1 << 30)


@dataclass(frozen=True, kw_only=True)
class _Window(Instruction):
    """Geometry shared by the pooling formats: NHWC int8 in, NHWC int8 out."""

    src: int = u(64, 32, "SRAM address of the int8 input, in_h x in_w x channels")
    dst: int = u(96, 32, "SRAM address of the int8 output, out_h x out_w x channels")
    in_h: int = u(128, 16, "input height")
    in_w: int = u(144, 16, "input width")
    channels: int = u(160, 16, "channels")
    kernel_h: int = u(176, 8, "window height")
    kernel_w: int = u(184, 8, "window width")
    stride_h: int = u(192, 8, "vertical stride", 1)
    stride_w: int = u(200, 8, "horizontal stride", 1)
    pad_top: int = u(208, 8, "rows of padding above (never part of a result)", 0)
    pad_bottom: int = u(216, 8, "rows of padding below", 0)
    pad_left: int = u(224, 8, "columns of padding left", 0)
    pad_right: int = u(232, 8, "columns of padding right", 0)


@instruction_format(Opcode.MAXPOOL)
@dataclass(frozen=True, kw_only=True)
class MaxPool(_Window):
    """Maximum over each window's valid (unpadded) elements."""

    opcode: Opcode = opcode_field(Opcode.MAXPOOL)


@instruction_format(Opcode.AVGPOOL)
@dataclass(frozen=True, kw_only=True)
class AvgPool(_Window):
    """Rounded mean of each window, rescaled to the output's scale and zero point."""

    opcode: Opcode = opcode_field(Opcode.AVGPOOL)
    src_zp: int = s(240, 8, "input zero point", 0)
    dst_zp: int = s(248, 8, "output zero point", 0)
    clamp_min: int = s(256, 8, "lower bound after the zero point", -128)
    clamp_max: int = s(264, 8, "upper bound after the zero point", 127)
    count_include_pad: int = u(272, 1, "1: divide by kernel_h*kernel_w, 0: by valid taps", 0)
    scale: float = f32(288, "multiplier float32(s_x / s_y)", 1.0)


@instruction_format(Opcode.END)
@dataclass(frozen=True, kw_only=True)
class End(Instruction):
    """The last instruction: the program ends when every unit has drained."""

    opcode: Opcode = opcode_field(Opcode.END)


# --- encoding ------------------------------------------------------------------------------


def encode(instruction: Instruction) -> bytes:
    """The 64-byte little-endian word of `instruction`."""
    word = 0
    for bit_field in instruction.LAYOUT:
        word |= bit_field.pack(getattr(instruction, bit_field.name)) << bit_field.lsb
    return word.to_bytes(WORD_BYTES, "little")


def decode(data: bytes) -> Instruction:
    """The instruction in one 64-byte word; DecodeError for an unknown opcode or stray bits."""
    if len(data) != WORD_BYTES:
        raise DecodeError(f"an instruction is {WORD_BYTES} bytes, got {len(data)}")
    word = int.from_bytes(data, "little")
    code = word & 0xFF
    if code not in _OPCODE_VALUES:
        raise DecodeError(f"unknown opcode 0x{code:02x}")
    cls = FORMATS[Opcode(code)]
    stray = word & ~cls.USED_BITS
    if stray:
        lowest = (stray & -stray).bit_length() - 1
        raise DecodeError(f"{Opcode(code).mnemonic}: reserved bit {lowest} is set")
    values = {b.name: b.unpack((word >> b.lsb) & b.mask) for b in cls.LAYOUT}
    try:
        return cls(**values)
    except IsaError as exc:
        raise DecodeError(str(exc)) from None


def token_ids(mask: int) -> list[int]:
    """The token numbers set in a wait or signal mask."""
    return [t for t in range(TOKEN_COUNT) if mask >> t & 1]


def markdown_table(cls: type[Instruction]) -> str:
    """The field table of a format for docs/isa.md (header fields left out)."""
    header = {f.name for f in fields(Instruction)}
    rows = ["| bits | field | type | default | meaning |", "|---|---|---|---|---|"]
    defaults = {f.name: f.default for f in fields(cls)}
    for b in cls.LAYOUT:
        if b.name in header:
            continue
        kind = {"u": f"u{b.width}", "s": f"s{b.width}", "f32": "f32"}[b.kind]
        default = "required" if defaults[b.name] is MISSING else str(defaults[b.name])
        rows.append(f"| {b.lsb}..{b.lsb + b.width - 1} | `{b.name}` | {kind} | {default} | {b.doc} |")
    return "\n".join(rows)
