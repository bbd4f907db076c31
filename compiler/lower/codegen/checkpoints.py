"""Checkpoints: where `vpuc run --check` reads each tensor of a subgraph while its program
runs (runtime/vpu.py probes them; docs/artifact.md, docs/metrics.md).

    checkpoints(subgraph, placement, storages, program)   once the program is ordered (emit._emit)
"""

from __future__ import annotations

from typing import Any

from vpuc.compiler.lower.codegen.residency import Placement
from vpuc.targets.isa.program import Program


def checkpoints(subgraph, placement: Placement, storages, program: Program) -> dict[str, Any]:
    """{"tensors": every tensor but a channels-first input, with where its bytes are and the
    pc after which they are complete (its producer's last instruction; -1 for inputs and
    constants, the latest of its sources' for a view or a concatenation, which have no
    instructions of their own); "layers": every layer with its composite's members, the
    tensors that composite takes in parameter order, the tensor it writes, and whether the
    check judges it (the last op of its composite)}. A tensor
    stays where it is from its producer to its last consumer (residency.py), so a probe at
    that pc (sim Probe) reads the value the layers after it read."""
    last_pc: dict[int, int] = {}
    for pc, instruction in enumerate(program.instructions):
        last_pc[instruction.layer] = pc
    ready = {name: -1 for name in (*subgraph.inputs, *subgraph.constants)}
    for index, op in enumerate(subgraph.ops):
        sources = max((ready.get(t, -1) for t in op.inputs), default=-1)
        ready[op.output] = last_pc.get(index + 1, sources)
    tensors = []
    for name, pc in ready.items():
        view = placement.views.get(name)
        if view is None or view.nchw:
            continue  # a channels-first input: the runtime has it as the host staged it
        storage = storages[view.storage]
        _, _, _, channels = view.shape
        tensors.append(
            {
                "name": name,
                "shape": list(subgraph.tensors[name].shape),
                "memory": storage.home,
                "address": storage.address + view.offset,
                "pixels": view.shape[0] * view.shape[1] * view.shape[2],
                "channels": channels,
                "pixel_stride": view.pixel_stride,
                "pc": pc,
            }
        )
    layers = []
    for index, op in enumerate(subgraph.ops):
        # a composite the op list splits into several ops is judged at its last op's output
        judged = all(later.members != op.members for later in subgraph.ops[index + 1 :])
        layers.append({"id": index + 1, "name": op.name, "members": list(op.members), "args": list(op.args),
                       "output": op.output, "judged": judged})  # fmt: skip
    return {"tensors": tensors, "layers": layers}
