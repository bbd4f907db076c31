"""The code generator's error: a VPU subgraph that cannot become a program, with the layer
(ONNX node) and the reason. The driver reports it as a CompileError naming the subgraph."""

from __future__ import annotations

from vpuc.compiler.errors import CompileError


class LowerError(CompileError):
    """A layer the code generator cannot lower; the message names what is wrong, and
    `members` the partitioned module's bindings of that layer (so the partitioner can keep
    them on the CPU, with the message as the reason)."""

    def __init__(self, message: str, members: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.members = tuple(members)


class SramError(LowerError):
    """A layer (or a subgraph's layers together) that no tiling fits into SRAM."""
