"""A VPU program: its instructions, layer names, and the binary program file format.

Sits between the ISA (isa.py: one instruction <-> one word) and its users: the assembler
produces a Program, the compiler's emitter writes `Program.to_bytes()` into artifacts, the
runtime and `vpuc disasm` read them back with `Program.from_bytes`.

Binary layout (little-endian): a 16-byte header `magic "VPUP", version u16, word_bytes u16,
count u32, names_bytes u32`, then `count` instruction words, then `names_bytes` of UTF-8
JSON mapping layer ids (as strings) to layer names.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from vpuc.targets.isa.errors import DecodeError
from vpuc.targets.isa.formats import WORD_BYTES, Instruction, decode, encode

MAGIC = b"VPUP"
VERSION = 1
HEADER = struct.Struct("<4sHHII")


@dataclass(frozen=True)
class Program:
    """Instructions in program order, plus names for the layer ids they carry.

    `source` and `source_lines` (the assembly line of each pc) only serve error messages.
    """

    instructions: tuple[Instruction, ...]
    layer_names: Mapping[int, str] = field(default_factory=dict)
    source: str = field(default="<program>", compare=False)
    source_lines: tuple[int, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "instructions", tuple(self.instructions))
        object.__setattr__(self, "layer_names", dict(self.layer_names))

    def __len__(self) -> int:
        return len(self.instructions)

    def location(self, pc: int) -> str:
        """`file:line` of the instruction at `pc` when known, else the file alone."""
        if 0 <= pc < len(self.source_lines):
            return f"{self.source}:{self.source_lines[pc]}"
        return self.source

    def to_bytes(self) -> bytes:
        names = {str(k): v for k, v in sorted(self.layer_names.items())}
        names_blob = json.dumps(names).encode() if names else b""
        header = HEADER.pack(MAGIC, VERSION, WORD_BYTES, len(self.instructions), len(names_blob))
        return header + b"".join(encode(i) for i in self.instructions) + names_blob

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "<bytes>") -> Program:
        """Decode a program file; DecodeError names the file and, for a bad word, its pc."""
        if len(data) < HEADER.size or data[:4] != MAGIC:
            raise DecodeError(f"{source}: not a VPU program (no 'VPUP' header)")
        _, version, word_bytes, count, names_bytes = HEADER.unpack_from(data)
        if version != VERSION or word_bytes != WORD_BYTES:
            raise DecodeError(
                f"{source}: program version {version} with {word_bytes}-byte words; "
                f"this simulator reads version {VERSION} with {WORD_BYTES}-byte words"
            )
        expected = HEADER.size + count * WORD_BYTES + names_bytes
        if len(data) != expected:
            raise DecodeError(f"{source}: {len(data)} bytes, the header says {expected}")
        return cls(
            _decode_words(data, count, source),
            _decode_names(data[expected - names_bytes :], source),
            source=source,
        )


def _decode_words(data: bytes, count: int, source: str) -> list[Instruction]:
    instructions = []
    for pc in range(count):
        start = HEADER.size + pc * WORD_BYTES
        try:
            instructions.append(decode(data[start : start + WORD_BYTES]))
        except DecodeError as exc:
            raise DecodeError(f"{source}: pc {pc} (byte {start}): {exc}") from None
    return instructions


def _decode_names(blob: bytes, source: str) -> dict[int, str]:
    if not blob:
        return {}
    try:
        names = json.loads(blob.decode())
        return {int(k): str(v) for k, v in names.items()}
    except (ValueError, AttributeError) as exc:
        raise DecodeError(f"{source}: layer name table is not valid: {exc}") from None


def as_program(program: Program | Iterable[Instruction] | bytes) -> Program:
    """Accept a Program, a sequence of instructions, or the bytes of a program file."""
    if isinstance(program, Program):
        return program
    if isinstance(program, (bytes, bytearray, memoryview)):
        return Program.from_bytes(bytes(program))
    return Program(tuple(program))
