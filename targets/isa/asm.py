"""Text assembly for the VPU: assemble `.s` text into a Program, and disassemble it back.

Sits beside program.py (the binary form); `vpuc sim` assembles hand-written programs with
it, `vpuc disasm` and every simulator error message print instructions with it.

Syntax, one instruction per line:

    .layer 3 stage1.conv1          # following instructions serve layer 3, named stage1.conv1
    load dram=4096 sram=0 row_bytes=1024 signal=0
    conv src=0 weights=1024 dst=8192 in_h=8 in_w=8 in_c=16 out_c=16 wait=0 signal=1
    end

Fields are `name=value` in any order; omitted fields take their defaults (docs/isa.md).
Integers are decimal or 0x-hex; `wait` and `signal` list token numbers (`wait=0,3`).
`#` and `;` start comments.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from pathlib import Path

import numpy as np

from vpuc.targets.isa.bitfield import BitField
from vpuc.targets.isa.errors import AsmError, IsaError, VpuError
from vpuc.targets.isa.formats import (
    FORMATS,
    HEADER_BITS,
    OPCODE_OF_MNEMONIC,
    TOKEN_COUNT,
    Instruction,
    Opcode,
    token_ids,
)
from vpuc.targets.isa.program import MAGIC, Program

TOKEN_FIELDS = ("wait", "signal")


def assemble(text: str, source: str = "<asm>") -> Program:
    """Assemble program text; AsmError `source:line: what is wrong` on the first bad line."""
    instructions: list[Instruction] = []
    lines: list[int] = []
    names: dict[int, str] = {}
    layer = 0
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].split(";", 1)[0].strip()
        if not line:
            continue
        try:
            if line.startswith("."):
                layer = _directive(line, names)
            else:
                instructions.append(parse_instruction(line, layer))
                lines.append(lineno)
        except VpuError as exc:
            raise AsmError(f"{source}:{lineno}: {exc}") from None
    return Program(tuple(instructions), names, source=source, source_lines=tuple(lines))


def _directive(line: str, names: dict[int, str]) -> int:
    parts = line.split(None, 2)
    if parts[0] != ".layer" or len(parts) < 2:
        raise AsmError(f"unknown directive '{line}' (known: .layer ID [NAME])")
    layer = _parse_int("layer", parts[1])
    if len(parts) == 3:
        if names.get(layer, parts[2]) != parts[2]:
            raise AsmError(f"layer {layer} is already named '{names[layer]}'")
        names[layer] = parts[2]
    return layer


def parse_instruction(line: str, layer: int = 0) -> Instruction:
    """One instruction from `mnemonic name=value ...`; `layer` is the default layer id."""
    mnemonic, *operands = line.split()
    opcode = OPCODE_OF_MNEMONIC.get(mnemonic.lower())
    if opcode is None:
        known = ", ".join(sorted(OPCODE_OF_MNEMONIC))
        raise AsmError(f"unknown mnemonic '{mnemonic}' (known: {known})")
    cls = FORMATS[opcode]
    layout = {b.name: b for b in cls.LAYOUT if b.name != "opcode"}
    values: dict[str, object] = {"opcode": opcode, "layer": layer}
    for operand in operands:
        name, sep, text = operand.partition("=")
        if not sep or name not in layout:
            raise AsmError(f"{mnemonic}: unknown operand '{operand}' (fields: {', '.join(layout)})")
        values[name] = _parse_value(layout[name], text)
    missing = [f.name for f in fields(cls) if f.name not in values and _required(f)]
    if missing:
        raise AsmError(f"{mnemonic}: missing field '{missing[0]}'")
    try:
        return cls(**values)
    except IsaError as exc:
        raise AsmError(f"{mnemonic}: {exc}") from None


def _required(f) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def _parse_value(bit_field: BitField, text: str) -> object:
    if bit_field.name in TOKEN_FIELDS:
        mask = 0
        for item in filter(None, text.split(",")):
            token = _parse_int(bit_field.name, item)
            if not 0 <= token < TOKEN_COUNT:
                raise AsmError(f"field '{bit_field.name}': token {token} is not in 0..15")
            mask |= 1 << token
        return mask
    if bit_field.kind == "f32":
        try:
            return float(text)
        except ValueError:
            raise AsmError(f"field '{bit_field.name}': '{text}' is not a number") from None
    return _parse_int(bit_field.name, text)


def _parse_int(name: str, text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise AsmError(f"field '{name}': '{text}' is not an integer") from None


def format_instruction(instruction: Instruction, layer: int | None = None) -> str:
    """`mnemonic name=value ...` (operands, then layer and tokens), defaults left out.

    `layer` is the layer id in force from a `.layer` directive; the field is printed only
    when it differs (pass None to print it whenever it is not 0).
    """
    defaults = {f.name: f.default for f in fields(instruction)}
    parts = [instruction.mnemonic]
    operands_first = sorted(instruction.LAYOUT, key=lambda b: b.lsb < HEADER_BITS)
    for bit_field in operands_first:
        name, value = bit_field.name, getattr(instruction, bit_field.name)
        if name == "opcode":
            continue
        implied = layer if name == "layer" and layer is not None else defaults[name]
        if value == implied:
            continue
        parts.append(f"{name}={_format_value(bit_field, value)}")
    return " ".join(parts)


def _format_value(bit_field: BitField, value: object) -> str:
    if bit_field.name in TOKEN_FIELDS:
        return ",".join(str(t) for t in token_ids(int(value)))
    if bit_field.kind == "f32":
        return str(np.float32(value))
    return str(value)


def disassemble(program: Program) -> str:
    """Assembly text that assembles back to `program` (with `.layer` directives and pcs)."""
    out = [f"# {len(program)} instructions"]
    layer = 0
    for pc, instruction in enumerate(program.instructions):
        if instruction.layer != layer or (pc == 0 and layer in program.layer_names):
            layer = instruction.layer
            name = program.layer_names.get(layer)
            out.append(f".layer {layer}" + (f" {name}" if name else ""))
        out.append(f"{format_instruction(instruction, layer):<72} # pc {pc}")
    for layer_id, name in sorted(program.layer_names.items()):
        if all(i.layer != layer_id for i in program.instructions):
            out.append(f".layer {layer_id} {name}")
    return "\n".join(out) + "\n"


def read_program(path: str | Path) -> Program:
    """A program file: binary (starts with 'VPUP') or assembly text; an empty file is
    neither."""
    data = Path(path).read_bytes()
    if not data.strip():
        raise AsmError(f"{path}: empty file (neither a VPU program nor assembly text)")
    if data[:4] == MAGIC:
        program = Program.from_bytes(data, source=str(path))
    else:
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise AsmError(f"{path}: neither a VPU program (no 'VPUP' header) nor text") from None
        program = assemble(text, source=str(path))
    return program


def require_end(program: Program) -> None:
    """A program must end with `end`, or the VPU runs past its last instruction: what `vpuc
    asm` checks before it writes a binary (`vpuc sim` finds it when it gets there)."""
    if not program.instructions or program.instructions[-1].opcode != Opcode.END:
        where = program.location(len(program) - 1) if len(program) else program.source
        raise AsmError(f"{where}: the program does not end with 'end' (the VPU would run past it)")
