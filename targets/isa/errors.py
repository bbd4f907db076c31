"""The ISA's error types: a field that does not fit, bytes that do not decode, a line of
assembly that does not assemble.

Every error a user can provoke with an instruction or a program file is a `VpuError`
with a message that names what is wrong; the simulator (vpuc.sim.errors) adds its own
run-time errors under the same base, so the CLI prints any of them as one line.
"""

from __future__ import annotations


class VpuError(Exception):
    """Base of every user-facing VPU error (ISA, assembler, simulator)."""


class IsaError(VpuError, ValueError):
    """An instruction field that does not fit its format ("field 'rows': 70000 does not fit...")."""


class DecodeError(IsaError):
    """Bytes that are not a valid instruction word or program file."""


class AsmError(VpuError):
    """A line of assembly that cannot be assembled; the message starts with `file:line:`."""
