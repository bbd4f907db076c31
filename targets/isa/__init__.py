"""The VPU's instruction set: the contract between the compiler's emitter and the simulator.

Lives beside the hardware description (as VTA keeps its ISA with its environment's
parameters and Vela its register map beside its architecture features) because both
sides import it and neither may import the other:

    formats.py   opcodes (IntEnum), one frozen dataclass per format, encode/decode
    bitfield.py  the declared bit ranges under the formats
    program.py   the binary program container (.bin, and inside .vpub artifacts)
    asm.py       text assembly and disassembly
    params.py    how requantisation parameters and lookup tables are laid out in memory
    cost.py      what one instruction costs on a Hardware, in cycles (the simulator's
                 timing and the compiler's estimates both read it)

docs/isa.md is the prose reference; its field tables are generated from formats.py.
"""

from vpuc.targets.isa.asm import assemble, disassemble, format_instruction, read_program
from vpuc.targets.isa.errors import AsmError, DecodeError, IsaError, VpuError
from vpuc.targets.isa.formats import (
    FORMATS,
    TOKEN_COUNT,
    UNIT_OF,
    WORD_BYTES,
    Add,
    AvgPool,
    Clip,
    Conv,
    Dma,
    End,
    Instruction,
    Lut,
    Matmul,
    MaxPool,
    Mul,
    Opcode,
    Requant,
    Softmax,
    Unit,
    decode,
    encode,
    token_ids,
)
from vpuc.targets.isa.program import Program, as_program

__all__ = [
    "FORMATS",
    "TOKEN_COUNT",
    "UNIT_OF",
    "WORD_BYTES",
    "Add",
    "AsmError",
    "AvgPool",
    "Clip",
    "Conv",
    "DecodeError",
    "Dma",
    "End",
    "Instruction",
    "IsaError",
    "Lut",
    "Matmul",
    "MaxPool",
    "Mul",
    "Opcode",
    "Program",
    "Requant",
    "Softmax",
    "Unit",
    "VpuError",
    "as_program",
    "assemble",
    "decode",
    "disassemble",
    "encode",
    "format_instruction",
    "read_program",
    "token_ids",
]
