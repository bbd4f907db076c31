"""The simulator's run-time error types, beside the ISA's (vpuc.targets.isa.errors).

Every error a user can provoke (a bad field, bad bytes, a bad line of assembly, an
instruction that cannot run) is a VpuError with a message that names what is wrong; the
CLI prints it as one line. Anything else escaping the simulator is a bug.
"""

from __future__ import annotations

from vpuc.targets.isa.errors import AsmError, DecodeError, IsaError, VpuError

__all__ = ["AsmError", "DecodeError", "IsaError", "OpError", "SimError", "VpuError"]


class OpError(VpuError):
    """An instruction that cannot run, before the simulator adds the pc and the text."""


class SimError(VpuError):
    """An instruction that cannot run: carries its program counter and disassembly."""

    def __init__(self, pc: int, text: str, message: str) -> None:
        super().__init__(f"pc {pc} '{text}': {message}")
        self.pc = pc
        self.text = text
        self.message = message
