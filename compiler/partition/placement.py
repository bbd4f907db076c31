"""Where each op runs and what crosses between devices, for any assignment of ops to VPU
subgraphs; and the profitability rule that judges each subgraph with the cost model.

A boundary is one tensor crossing once in one direction: CPU->VPU for each VPU subgraph
that reads a host tensor (model inputs are host tensors), VPU->CPU for a VPU tensor that
the host (a CPU op, another VPU subgraph, or a model output) reads. Bytes are the tensor's
int8 size: the VPU side of a boundary is int8 even while the model is still float.
"""

from __future__ import annotations

from dataclasses import dataclass

from vpuc.compiler.lower.codegen.oracle import answer, least, most
from vpuc.compiler.partition import cost
from vpuc.compiler.partition.graph import HOST, Composite, Graph, core_of
from vpuc.targets import Target

CPU = "cpu"


@dataclass(frozen=True)
class Boundary:
    direction: str  # "CPU->VPU" or "VPU->CPU"
    tensor: str  # producing binding (or model input) name
    consumers: tuple[str, ...]  # binding names (or HOST) on the other side
    subgraph: int  # the VPU subgraph on the VPU side
    shape: tuple[int, ...]
    nbytes: int


def _device(name: str, subgraph_of: dict[str, int]) -> str | int:
    return subgraph_of.get(name, CPU)


def boundaries(graph: Graph, subgraph_of: dict[str, int]) -> list[Boundary]:
    """Every crossing of the assignment, in binding order of the producers."""
    return _crossings(graph, subgraph_of, [*graph.inputs, *graph.ops])


def transfer_change(graph: Graph, before: dict[str, int], after: dict[str, int], moved, target: Target):
    """transfer_seconds(boundaries(graph, after)) - transfer_seconds(boundaries(graph, before))
    where `after` differs from `before` only in the ops `moved`: only the tensors they write
    or read can cross differently, so only those are looked at (the whole graph's boundaries
    per candidate made the profitability rule quadratic: 100 s of a 470-node OCR model's
    compile)."""
    touched = set(moved)
    touched.update(i for n in moved if n in graph.ops for i in graph.ops[n].inputs)
    names = [n for n in touched if n in graph.ops or n in graph.inputs]
    cycles = sum(cost.transfer_cycles(b.nbytes, target) for b in _crossings(graph, after, names)) - sum(
        cost.transfer_cycles(b.nbytes, target) for b in _crossings(graph, before, names)
    )
    return cost.vpu_seconds(cycles, target)


def _crossings(graph: Graph, subgraph_of: dict[str, int], names) -> list[Boundary]:
    found = []
    for name in names:
        tensor = graph.tensor(name)
        producer = _device(name, subgraph_of)
        readers: dict[str | int, list[str]] = {}
        for consumer in graph.consumers.get(name, []):
            device = CPU if consumer == HOST else _device(consumer, subgraph_of)
            if device != producer:
                readers.setdefault(device, []).append(consumer)
        if producer != CPU and readers:
            consumers = tuple(c for group in readers.values() for c in group)
            found.append(Boundary("VPU->CPU", name, consumers, producer, tensor.shape, tensor.vpu_bytes))
        for device, consumers in readers.items():
            if device != CPU:
                found.append(
                    Boundary("CPU->VPU", name, tuple(consumers), device, tensor.shape, tensor.vpu_bytes)
                )
    return found


@dataclass(frozen=True)
class SubgraphCost:
    """One VPU subgraph judged: seconds on the VPU, transfers it adds, seconds on the CPU."""

    subgraph: int
    onnx_ops: int
    vpu_cycles: int
    vpu_s: float
    transfer_s: float  # host<->VPU transfer time this subgraph adds
    cpu_s: float
    keep: bool
    reason: str
    vpu_bound: bool = False  # vpu_cycles is a lower bound, which decided the verdict alone

    def to_json(self) -> dict:
        bound = {"vpu_cycles_are_a_lower_bound": True} if self.vpu_bound else {}
        return {
            "subgraph": self.subgraph,
            "onnx_ops": self.onnx_ops,
            "vpu_cycles": self.vpu_cycles,
            "vpu_us": round(self.vpu_s * 1e6, 3),
            "transfer_us": round(self.transfer_s * 1e6, 3),
            "cpu_us": round(self.cpu_s * 1e6, 3),
            "decision": "vpu" if self.keep else "cpu",
            "reason": self.reason,
            **bound,
        }


def subgraph_members(subgraph_of: dict[str, int]) -> dict[int, list[str]]:
    members: dict[int, list[str]] = {}
    for name, subgraph in subgraph_of.items():
        members.setdefault(subgraph, []).append(name)
    return members


def vpu_cycles_of(graph: Graph, composites: list[Composite], target: Target) -> int:
    """Cycles of a subgraph's composites: each composite's core op as the code generator's
    layer planner estimates it alone, epilogue fused (compiler/lower/codegen/oracle.py)."""
    total = 0
    for composite in composites:
        core = core_of(graph, list(composite.members))
        if core is not None and core.view is not None:
            total += answer(core.view, target).cycles
    return total


def vpu_cycles_bound_of(graph: Graph, composites: list[Composite], target: Target) -> int:
    """A lower bound of vpu_cycles_of, none of the layers planned: each core op's
    oracle.least (the least busy time of the tilings its planner may choose)."""
    total = 0
    for composite in composites:
        core = core_of(graph, list(composite.members))
        if core is not None and core.view is not None:
            total += least(core.view, target)
    return total


def vpu_cycles_upper_of(graph: Graph, composites: list[Composite], target: Target) -> int | None:
    """An upper bound of vpu_cycles_of, or None where a layer has none as cheap: each core
    op's oracle.most (a conv's own tiling planned, not its im2cols)."""
    total = 0
    for composite in composites:
        core = core_of(graph, list(composite.members))
        if core is not None and core.view is not None:
            upper = most(core.view, target)
            if upper is None:
                return None
            total += upper
    return total


def cpu_seconds(graph: Graph, names: list[str], target: Target) -> float:
    return target.host.seconds(sum(cost.op_cpu_cycles(graph.ops[n], target) for n in names if n in graph.ops))


def transfer_seconds(found: list[Boundary], target: Target) -> float:
    return cost.vpu_seconds(sum(cost.transfer_cycles(b.nbytes, target) for b in found), target)


def onnx_op_count(graph: Graph, names: list[str]) -> int:
    return len({node for n in names for node in graph.ops[n].onnx_nodes})
