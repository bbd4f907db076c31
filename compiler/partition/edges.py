"""The profitability rule, layer by layer at a subgraph's edge: a layer that begins or ends
a VPU subgraph moves to the CPU when that lowers the modelled latency.

Moving layer L (one composite) from the edge of subgraph S to the CPU changes

    VPU time        - L's cycles on the VPU (the code generator's layer planner, alone)
    CPU time        + L's ops on the CPU (the target's [host] figures, cost.py)
    transfer time   + the boundaries of the assignment without L - those with it

(placement.transfer_change, over L's own tensors: the tensors L reads from the host stop
crossing, its output crosses instead, or its input crosses and its output no longer does). Greedy, to a
fixpoint, as the subgraph rule: while some edge layer's move lowers the total, the one
that lowers it most moves. A layer is at the edge when none of its inputs comes from its
own subgraph (it begins it) or none of its outputs is read inside it (it ends it). The views
(reshapes) of its subgraph that touch it move with it: views never cut a subgraph, and
one left alone would only add transfers. Only layers of the kinds the host figures are
fitted on (fitted_kinds) are priced so: another kind's host estimate is no price (a
Softmax's counts no exponential).
"""

from __future__ import annotations

from dataclasses import dataclass

from vpuc.compiler.partition import cost
from vpuc.compiler.partition.graph import HOST, Composite, Graph, core_of
from vpuc.compiler.partition.placement import (
    cpu_seconds,
    subgraph_members,
    transfer_change,
    vpu_cycles_of,
    vpu_cycles_upper_of,
)
from vpuc.compiler.partition.views import VIEW_COMPOSITES
from vpuc.targets import Target


@dataclass(frozen=True)
class EdgeMove:
    """One edge layer judged: what moving it to the CPU changes, in seconds."""

    composite: Composite
    members: tuple[str, ...]  # its own and those of the views that go with it
    vpu_s: float  # its time on the VPU (saved by the move)
    cpu_s: float  # its time on the CPU (added by the move)
    transfer_s: float  # transfer time the move adds (negative: removes)
    vpu_s_is_upper_bound: bool = False  # vpu_s is at least the layer's time (judge_move)

    @property
    def saving(self) -> float:
        return self.vpu_s - self.cpu_s - self.transfer_s

    @property
    def reason(self) -> str:
        return (
            f"kept on the CPU: at the edge of VPU subgraph {self.composite.subgraph}, it costs less "
            f"here (CPU {self.cpu_s * 1e6:.2f} us + host<->VPU transfers {self.transfer_s * 1e6:+.2f} us "
            f"vs VPU {self.vpu_s * 1e6:.2f} us)"
        )


def move_edge_layers(
    graph: Graph, current: dict[str, int], composites: list[Composite], target: Target
) -> tuple[dict[str, int], dict[str, str]]:
    """(the assignment with the edge layers that cost more on the VPU moved off it, {binding
    name: reason} of every binding moved)."""
    moved: dict[str, str] = {}
    while True:
        best = _best_move(graph, current, composites, target)
        if best is None:
            return current, moved
        members = set(best.members)
        current = {n: s for n, s in current.items() if n not in members}
        moved.update({name: best.reason for name in best.members})


def _best_move(graph, current, composites, target) -> EdgeMove | None:
    best = None
    sizes = {s: len(names) for s, names in subgraph_members(current).items()}
    holder = {name: c for c in composites for name in c.members}
    for composite in composites:
        if composite.name in VIEW_COMPOSITES or not _on_vpu(current, composite):
            continue  # a view moves with the layer beside it; this one moved already
        core = core_of(graph, list(composite.members))
        if core is None or core.view is None or core.view.kind not in fitted_kinds():
            continue  # the host figures say nothing true of it
        members = _with_views(current, composite, holder, graph)
        if sizes[composite.subgraph] == len(members) or not _at_edge(
            graph, current, members, composite.subgraph
        ):
            continue  # the subgraph rule judges a subgraph of one layer
        move = judge_move(graph, current, composite, members, target)
        if move.saving > 0 and (best is None or move.saving > best.saving):
            best = move
    return best


def fitted_kinds() -> frozenset[str]:
    """The op kinds `vpuc calibrate-host` fits the [host] figures on (its probes: convs,
    dense layers, Relu, Add, MaxPool). Other kinds' host time is a lower bound at best (a
    Softmax's exponentials are not in the model), not a price to move a layer by."""
    return cost.HOST_FITTED_KINDS


def judge_move(graph: Graph, current, composite: Composite, members: set[str], target: Target) -> EdgeMove:
    """What moving `composite` (with the views in `members`) from its subgraph to the CPU
    changes. Views compute nothing on the VPU: its cycles are the layer's alone. Its VPU
    time is first taken from an upper bound of its cycles (oracle.most: a conv's own tiling
    planned, its im2cols not): when the move saves nothing even so, it saves nothing at its
    exact cycles either, which _best_move would then not take, so the bound's move is
    returned (vpu_s_is_upper_bound) and the layer's im2cols are not planned alone."""
    without = {n: s for n, s in current.items() if n not in members}
    added = transfer_change(graph, current, without, members, target)
    names, cpu_s = tuple(sorted(members)), cpu_seconds(graph, list(members), target)
    upper = vpu_cycles_upper_of(graph, [composite], target)
    if upper is not None:
        bounded = EdgeMove(composite, names, cost.vpu_seconds(upper, target), cpu_s, added, True)
        if bounded.saving <= 0:
            return bounded
    vpu_s = cost.vpu_seconds(vpu_cycles_of(graph, [composite], target), target)
    return EdgeMove(composite, names, vpu_s, cpu_s, added)


def _on_vpu(current: dict[str, int], composite: Composite) -> bool:
    return bool(composite.members) and all(current.get(n) == composite.subgraph for n in composite.members)


def _with_views(current, composite: Composite, holder: dict[str, Composite], graph: Graph) -> set[str]:
    """The layer's members and those of the views of its subgraph that touch it, transitively
    (a KWS net's input reshape before its first conv: views never cut a subgraph)."""
    members, frontier = set(composite.members), list(composite.members)
    while frontier:
        name = frontier.pop()
        op = graph.ops.get(name)
        for other in [*(op.inputs if op else []), *graph.consumers.get(name, [])]:
            view = holder.get(other)
            if view is None or view.name not in VIEW_COMPOSITES or not _on_vpu(current, view):
                continue
            if view.subgraph == composite.subgraph and not set(view.members) <= members:
                members |= set(view.members)
                frontier += list(view.members)
    return members


def _at_edge(graph: Graph, current: dict[str, int], members: set[str], subgraph: int) -> bool:
    inputs = {i for n in members if n in graph.ops for i in graph.ops[n].inputs} - members
    begins = not any(current.get(i) == subgraph for i in inputs)
    readers = {c for n in members for c in graph.consumers.get(n, [])} - members
    ends = not any(c != HOST and current.get(c) == subgraph for c in readers)
    return begins or ends
