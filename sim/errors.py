"""The simulator's error types, shared by the ISA, the assembler and the simulator.

Every error a user can provoke (a bad field, bad bytes, a bad line of assembly, an
instruction that cannot run) is one of these, with a message that names what is wrong;
the CLI prints it as one line. Anything else escaping the simulator is a bug.
"""

from __future__ import annotations


class VpuError(Exception):
    """Base of every user-facing simulator error."""


class IsaError(VpuError, ValueError):
    """An instruction field that does not fit its format ("field 'rows': 70000 does not fit...")."""


class DecodeError(IsaError):
    """Bytes that are not a valid instruction word or program file."""


class AsmError(VpuError):
    """A line of assembly that cannot be assembled; the message starts with `file:line:`."""


class OpError(VpuError):
    """An instruction that cannot run, before the simulator adds the pc and the text."""


class SimError(VpuError):
    """An instruction that cannot run: carries its program counter and disassembly."""

    def __init__(self, pc: int, text: str, message: str) -> None:
        super().__init__(f"pc {pc} '{text}': {message}")
        self.pc = pc
        self.text = text
        self.message = message
