"""Where every tensor of a subgraph lives: cascading, as Vela does it.

    inputs, outputs, constants  DRAM (the host stages inputs and reads outputs)
    concatenations              DRAM; each input is a channel slice of the output (its
                                producer stores straight into the slice)
    reshapes                    the same bytes as their input, under a new shape
    every other tensor          SRAM from its producer to its last consumer, so it never
                                goes back to DRAM; spilled to DRAM (largest first) only
                                where the layers live at that point would not fit

`place(subgraph, min_working_set)` returns the Storages and a View per tensor.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from vpuc.compiler.lower import ops as vops
from vpuc.compiler.lower.codegen.plan import Storage, View
from vpuc.compiler.lower.errors import LowerError, SramError

ALIGN = 16  # storages and buffers start on 16-byte boundaries (int32 operands need 4)


def aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


class Placement:
    """Storages and views of one subgraph; `spilled` lists tensors moved to DRAM."""

    def __init__(self, subgraph: vops.Subgraph) -> None:
        self.subgraph = subgraph
        self.storages: dict[str, Storage] = {}
        self.views: dict[str, View] = {}
        self.spilled: list[str] = []

    def storage_of(self, tensor: str) -> Storage:
        return self.storages[self.views[tensor].storage]

    def home(self, tensor: str) -> str:
        return self.storage_of(tensor).home

    def resident_bytes_at(self, index: int) -> int:
        return sum(
            aligned(s.nbytes)
            for s in self.storages.values()
            if s.home == "sram" and s.first <= index <= s.last
        )


def place(
    subgraph: vops.Subgraph,
    sram_bytes: int,
    min_working_set: Callable[[vops.Op, Placement], int],
    resident: bool = True,
) -> Placement:
    """Homes for every tensor, spilling SRAM-resident ones where a layer would not fit.
    `resident` False: every intermediate lives in DRAM (a target whose scratchpad only
    buffers tiles, as Ethos-U's feature maps live in the SRAM behind its AXI port)."""
    placement = _initial(subgraph)
    if not resident:
        for storage in placement.storages.values():
            if storage.home == "sram":
                storage.home = "dram"
    for index, op in enumerate(subgraph.ops):
        while placement.resident_bytes_at(index) + min_working_set(op, placement) > sram_bytes:
            victim = _largest_resident(placement, index)
            if victim is None:
                need = min_working_set(op, placement)
                raise SramError(
                    f"layer '{op.name}' cannot be tiled to fit SRAM ({sram_bytes} bytes): its smallest "
                    f"tile needs {need} bytes",
                    op.members,
                )
            victim.home = "dram"
            placement.spilled.append(victim.name)
    return placement


def _largest_resident(placement: Placement, index: int) -> Storage | None:
    live = [s for s in placement.storages.values() if s.home == "sram" and s.first <= index <= s.last]
    return max(live, key=lambda s: s.nbytes, default=None)


def _initial(subgraph: vops.Subgraph) -> Placement:
    placement = Placement(subgraph)
    tensors, last = subgraph.tensors, len(subgraph.ops)
    uses = _last_uses(subgraph)
    for name in subgraph.inputs:
        _own(placement, name, "dram", -1, last, "input")
    for name in subgraph.constants:
        _own(placement, name, "dram", -1, last, "constant")
    outputs = set(subgraph.outputs)
    for index, op in enumerate(subgraph.ops):  # concatenations first: their inputs are slices
        if isinstance(op, vops.Concat):
            role = "output" if op.output in outputs else "intermediate"
            _own(
                placement,
                op.output,
                "dram",
                index,
                uses.get(op.output, index) if role != "output" else last,
                role,
            )
            _slice_inputs(placement, op, subgraph, index)
    for index, op in enumerate(subgraph.ops):
        if isinstance(op, vops.Reshape):
            source = placement.views[op.inputs[0]]
            if not source.contiguous:
                raise LowerError(f"layer '{op.name}': a reshape of a strided or channels-first tensor")
            placement.views[op.output] = View(
                source.storage, source.offset, tensors[op.output].nhwc, tensors[op.output].nhwc[3]
            )
            storage = placement.storages[source.storage]
            storage.last = max(storage.last, uses.get(op.output, index))
            if op.output in outputs:
                storage.home, storage.role = "dram", "output"
            continue
        if op.output in placement.views:  # a concatenation or one of its inputs
            continue
        role = "output" if op.output in outputs else "intermediate"
        home = "dram" if role == "output" else "sram"
        _own(
            placement, op.output, home, index, uses.get(op.output, index) if role != "output" else last, role
        )
    return placement


def _own(placement: Placement, name: str, home: str, first: int, last: int, role: str) -> None:
    spec = placement.subgraph.tensors[name]
    placement.storages[name] = Storage(name, spec.nbytes, home, first, last, role)
    nchw = spec.host_layout == "NCHW"
    placement.views[name] = View(name, 0, spec.nhwc, spec.nhwc[3], nchw)


def _slice_inputs(placement: Placement, op: vops.Concat, subgraph: vops.Subgraph, index: int) -> None:
    """Each input of a concat becomes a channel slice of the concat's storage; its
    producer (an op of this subgraph that runs before, producing nothing else) writes there."""
    out_view = placement.views[op.output]
    storage = placement.storages[op.output]
    channel = 0
    producers = subgraph.producer()
    for name in op.inputs:
        spec = subgraph.tensors[name]
        # the refusals name the layer's members: the partitioner keeps it on the CPU with them
        why = (
            "is computed outside this VPU subgraph" if name not in producers
            else "is read twice by concatenations" if name in placement.views
            else "is also an output of the VPU subgraph" if name in subgraph.outputs
            else None
        )  # fmt: skip
        if why is not None:
            raise LowerError(
                f"layer '{op.name}': concatenation input '{name}' {why} (each input must be an op's "
                "own output, written into its channel slice)",
                op.members,
            )
        if spec.nhwc[:3] != out_view.shape[:3]:
            raise LowerError(f"layer '{op.name}': inputs of different spatial shapes", op.members)
        placement.views[name] = View(storage.name, channel, spec.nhwc, out_view.pixel_stride)
        storage.first = min(storage.first, subgraph.ops.index(producers[name]))
        channel += spec.nhwc[3]
    if channel != out_view.shape[3]:
        raise LowerError(
            f"layer '{op.name}': input channels add up to {channel}, not {out_view.shape[3]}", op.members
        )


def _last_uses(subgraph: vops.Subgraph) -> dict[str, int]:
    found: dict[str, int] = {}
    for index, op in enumerate(subgraph.ops):
        for name in op.inputs:
            found[name] = index
    for index in range(len(subgraph.ops) - 1, -1, -1):  # an alias keeps its source alive
        op = subgraph.ops[index]
        if isinstance(op, vops.Reshape):
            found[op.inputs[0]] = max(found.get(op.inputs[0], index), found.get(op.output, index))
    return found


def tensor_bytes(shape: tuple[int, ...]) -> int:
    return math.prod(shape)
