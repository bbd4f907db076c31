"""Checkpoints: where `vpuc run --check` reads each tensor of a subgraph while its program
runs (runtime/vpu.py probes them; docs/artifact.md, docs/metrics.md).

A tensor's byte holds its value from its producer's last write of it to the next write of
it by any other layer. Without cascading that is from the producer's last instruction to
after the last consumer's (residency.py keeps a tensor in place that long), so one probe
right after the producer's last instruction reads it all. Cascaded layers interleave
(cascade.py): a band of a tensor may be read by its consumer and its bytes taken by a later
layer's buffer before the producer writes its last band (resnet_mini on vpu-plus: block2's
first conv accumulates over block1/conv2's first rows, 10 instructions before block1/conv2's
last requantisation). Such a tensor gets `pieces`: probes at the fewest pcs that each see
their bytes inside that window, so a checkpoint never reads bytes that are no longer the
tensor's.

    checkpoints(subgraph, placement, storages, program, mode)   once the program is ordered
    Deferred(the same arguments)()                             the same, when first asked (emit._emit)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vpuc.compiler.lower.codegen.residency import Placement
from vpuc.targets.isa.footprint import footprint
from vpuc.targets.isa.program import Program

NEVER = np.iinfo(np.int64).max  # an end of window: no other layer writes the byte again


def checkpoints(subgraph, placement: Placement, storages, program: Program, mode: str) -> dict[str, Any]:
    """{"tensors": every tensor but a channels-first input, with where its bytes are and the
    pc after which they are complete (its producer's last instruction; -1 for inputs and
    constants, the latest of its sources' for a view or a concatenation, which have no
    instructions of their own), and `pieces` [pc, offset, nbytes] when another layer
    overwrites some of its bytes before that pc (`windows`); "layers": every layer with its
    composite's members, the tensors that composite takes in parameter order, the tensor it
    writes, and whether the check judges it (the last op of its composite)}."""
    last_pc: dict[int, int] = {}
    for pc, instruction in enumerate(program.instructions):
        last_pc[instruction.layer] = pc
    ready = {name: -1 for name in (*subgraph.inputs, *subgraph.constants)}
    writers: dict[str, set[int]] = {name: set() for name in ready}  # the layers that write it
    for index, op in enumerate(subgraph.ops):
        sources = max((ready.get(t, -1) for t in op.inputs), default=-1)
        ready[op.output] = last_pc.get(index + 1, sources)
        sourced = set().union(*(writers.get(t, set()) for t in op.inputs))  # a view: its sources' writers
        writers[op.output] = {index + 1} if index + 1 in last_pc else sourced
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
    found = windows(program, mode, tensors, [writers[t["name"]] for t in tensors])
    for spec, (first, end) in zip(tensors, found, strict=True):
        if spec["pc"] >= 0 and bool(np.any(end <= spec["pc"])):
            spec["pieces"] = pieces(first, end, _mask(spec), spec["pc"])
    layers = []
    for index, op in enumerate(subgraph.ops):
        # a composite the op list splits into several ops is judged at its last op's output
        judged = all(later.members != op.members for later in subgraph.ops[index + 1 :])
        layers.append({"id": index + 1, "name": op.name, "members": list(op.members), "args": list(op.args),
                       "output": op.output, "judged": judged})  # fmt: skip
    return {"tensors": tensors, "layers": layers}


class Deferred:
    """`checkpoints(*args)`, worked out on the first call and kept: a compile lowers many
    programs it never writes (the partitioner's estimates of candidate subgraphs: 40 of
    MobileNetV2-224's 41), and only a written one's checkpoints are read. The lowering
    memo's copies of a program share it (deepcopy returns it): the value is the same."""

    def __init__(self, *args) -> None:
        self._args, self._value = args, None

    def __call__(self) -> dict[str, Any]:
        if self._value is None:
            self._value, self._args = checkpoints(*self._args), None
        return self._value

    def __deepcopy__(self, memo) -> Deferred:
        return self


def windows(program: Program, mode: str, tensors: list[dict], writers: list[set[int]]) -> list[tuple]:
    """Per tensor, over the bytes of its span (its first pixel to the end of its last), the
    pc of its writers' last write of each byte (-1: none) and the pc of the first write by
    another layer after it (NEVER: none): a probe after pc p sees the byte's value when
    first <= p < end. The bytes instructions access are the ISA's footprints."""
    spans = [(t["memory"], t["address"], t["address"] + _span(t)) for t in tensors]
    first = [np.full(hi - lo, -1, np.int64) for _, lo, hi in spans]
    end = [np.full(hi - lo, NEVER, np.int64) for _, lo, hi in spans]
    in_memory: dict[str, list[int]] = {}
    for k, (memory, _, _) in enumerate(spans):
        in_memory.setdefault(memory, []).append(k)
    # per memory: the tensors' spans as arrays, so a write finds the ones it touches at once
    index = {m: (np.array([spans[k][1] for k in ks]), np.array([spans[k][2] for k in ks]), ks)
             for m, ks in in_memory.items()}  # fmt: skip
    for pc, instruction in enumerate(program.instructions):
        for access in footprint(instruction, mode):
            if not access.write or access.memory not in index:
                continue
            region = access.region
            los, his, ks = index[access.memory]
            hits = np.flatnonzero((los < region.stop) & (his > region.start))
            # the bytes of its own extent it writes (None: all of them)
            mask = (
                None if not hits.size or region.block is None else region.byte_mask(region.start, region.stop)
            )
            for k in (ks[j] for j in hits):
                _, lo, hi = spans[k]
                a, b = max(lo, region.start), min(hi, region.stop)
                firsts, ends = first[k][a - lo : b - lo], end[k][a - lo : b - lo]  # views: written through
                touched = slice(None) if mask is None else mask[a - region.start : b - region.start]
                if instruction.layer in writers[k]:
                    firsts[touched], ends[touched] = pc, NEVER
                elif mask is None:
                    ends[(ends == NEVER) & (firsts >= 0)] = pc
                else:
                    ends[touched & (ends == NEVER) & (firsts >= 0)] = pc
    return list(zip(first, end, strict=True))


def pieces(first: np.ndarray, end: np.ndarray, mask: np.ndarray, complete: int) -> list[list[int]]:
    """[pc, offset, nbytes] probes that see every byte of `mask` inside its window
    [first, end): the fewest pcs (each the last before the earliest end among the bytes not
    yet seen, or `complete`, the pc after which every byte is written, if that is sooner:
    the greedy that is optimal for points stabbing intervals), each taking the
    runs of bytes whose window holds it (bytes outside `mask` join a run where that joins
    two)."""
    left = mask.copy()
    found = []
    while left.any():
        pc = int(min(end[left].min() - 1, complete))
        seen = left & (first <= pc) & (pc < end)
        left &= ~seen
        take = seen | (~mask & (first <= pc) & (pc < end))  # a gap byte may bridge two runs
        edges = np.flatnonzero(np.diff(np.concatenate(([0], take.astype(np.int8), [0]))))
        for start, stop in zip(edges[::2], edges[1::2], strict=True):
            inside = np.flatnonzero(seen[start:stop])
            if inside.size:  # the run from its first byte seen to its last
                found.append([pc, int(start + inside[0]), int(inside[-1] - inside[0] + 1)])
    return sorted(found)


def _span(spec: dict) -> int:
    return (spec["pixels"] - 1) * spec["pixel_stride"] + spec["channels"] if spec["pixels"] else 0


def _mask(spec: dict) -> np.ndarray:
    """The bytes of the tensor's span that are its values (not the gaps of a pixel stride)."""
    mask = np.zeros(spec["pixels"] * spec["pixel_stride"], bool)
    mask.reshape(spec["pixels"], spec["pixel_stride"])[:, : spec["channels"]] = True
    return mask[: _span(spec)]
