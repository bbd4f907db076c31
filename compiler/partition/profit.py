"""The profitability rule: a VPU subgraph stays on the CPU when moving it costs more than
it saves, and always when it has fewer ONNX ops than `min_ops`.

Greedy, to a fixpoint: the cost of an assignment is the VPU time of its subgraphs plus the
CPU time of every op left on the CPU plus the host<->VPU transfer time of its boundaries
(cost.py). While some subgraph, moved back to the CPU, lowers that total, the subgraph
that lowers it most moves back. Then layer by layer at the edges of the subgraphs left
(edges.py): a layer that begins or ends one moves to the CPU when that lowers the total,
and the subgraph rule runs again on what is left. Each subgraph's verdict carries its
figures; each layer moved, its own as its reason.

Without `exact_figures` (a partition whose report nobody reads: the quantiser's), a
subgraph is first priced by its layers' lower bounds (placement.vpu_cycles_bound_of, no
layer planned): when even that sends it to the CPU, the exact cycles, which are at least
the bound, would too, so its layers are never planned and its verdict shows the bound
("VPU >= x us"). The decisions are those of the exact rule (the subgraph rule's moves are
independent of each other: each subgraph's saving is its own). With exact figures, the
subgraphs in `refused` are priced so too: the code generator refuses every binding of them
(a float op the quantiser left on the CPU), so they stay on the CPU whatever their verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

from vpuc.compiler.partition import cost
from vpuc.compiler.partition.edges import move_edge_layers
from vpuc.compiler.partition.graph import Graph
from vpuc.compiler.partition.placement import (
    SubgraphCost,
    cpu_seconds,
    onnx_op_count,
    subgraph_members,
    transfer_change,
    vpu_cycles_bound_of,
    vpu_cycles_of,
)
from vpuc.targets import Target


def judge(
    graph: Graph,
    placement,
    target: Target,
    min_ops: int,
    estimated: dict[int, int] | None = None,
    exact_figures: bool = True,
    refused: frozenset[int] = frozenset(),
) -> tuple[dict[str, str], list[SubgraphCost]]:
    """Returns ({binding name: reason} for the ops to keep on the CPU, a verdict per subgraph).
    `placement` is the raw cut (a partition.Placement); `estimated` the code generator's
    cycles per raw subgraph where it could lower it whole (its layer planner's, layer by
    layer, elsewhere). `exact_figures` False: a subgraph its lower bound sends to the CPU
    is judged by that bound; `refused`: the subgraphs the code generator refuses whole, so
    judged even with exact figures (the module's docstring)."""
    estimated = estimated or {}
    subgraph_of = placement.subgraph_of
    composites = list(placement.composites)
    bounded = not exact_figures or bool(refused)
    prices = _Prices(
        _LayerCycles(graph, composites, target, vpu_cycles_of),
        _LayerCycles(graph, composites, target, vpu_cycles_bound_of) if bounded else None,
        None if not exact_figures else frozenset(refused),
    )
    current = dict(subgraph_of)
    verdicts: dict[int, SubgraphCost] = {}
    for subgraph, names in subgraph_members(current).items():
        count = onnx_op_count(graph, names)
        if count < min_ops:
            reason = f"kept on the CPU: {count} ONNX op(s), below the minimum of {min_ops} for a VPU subgraph"
            verdicts[subgraph] = _verdict(
                graph, current, subgraph, prices, target, False, reason, estimated, settled=True
            )
            current = {n: s for n, s in current.items() if s != subgraph}
    current = _move_whole(graph, current, prices, target, estimated, verdicts)
    current, edge_moves = move_edge_layers(graph, current, composites, target)
    if edge_moves:  # a subgraph that lost a layer: its cycles are its layers' from here on
        trimmed = {subgraph_of[name] for name in edge_moves}
        estimated = {s: c for s, c in estimated.items() if s not in trimmed}
        current = _move_whole(graph, current, prices, target, estimated, verdicts)
    for subgraph in subgraph_members(current):
        verdicts[subgraph] = _with_reason(
            _verdict(graph, current, subgraph, prices, target, True, "", estimated), True
        )
    kept = subgraph_members(current)
    blocked = {n: verdicts[s].reason for n, s in subgraph_of.items() if s not in kept}
    blocked.update({n: reason for n, reason in edge_moves.items() if n not in blocked})
    return blocked, [verdicts[s] for s in sorted(verdicts)]


def _move_whole(graph, current, prices, target, estimated, verdicts) -> dict[str, int]:
    """The subgraph rule to its fixpoint: `current` without the subgraphs moved to the CPU,
    each with its verdict in `verdicts`, the one that saves most first. A subgraph moved
    whole changes no other's figures: its cycles, CPU time and op count are its own, and so
    are its transfers (the tensors it reads stop crossing into it; its outputs cross out of
    it when anything outside it reads them, whatever device that is). So each subgraph is
    judged once, not again each round (tests/partition/test_profit_reprice.py holds this to
    the rule that judges every subgraph afresh each round)."""
    judged = {
        s: _verdict(graph, current, s, prices, target, True, "", estimated) for s in subgraph_members(current)
    }
    while (worst := _most_costly(judged)) is not None:
        verdicts[worst] = _with_reason(judged.pop(worst), False)
        current = {n: s for n, s in current.items() if s != worst}
    return current


def _most_costly(judged: dict[int, SubgraphCost]) -> int | None:
    """The subgraph whose move to the CPU saves the most time, if any saves time (the
    lowest-numbered of equals)."""
    best, best_saving = None, 0.0
    for subgraph in sorted(judged):
        saving = _saving(judged[subgraph])
        if saving > best_saving:
            best, best_saving = subgraph, saving
    return best


def _verdict(
    graph, current, subgraph, prices, target, keep, reason, estimated, settled=False
) -> SubgraphCost:
    """The subgraph's figures: its cycles the code generator's (`estimated`), else its
    layers' lower bound where the figures may show one (prices.may_bound) and it sends the
    subgraph to the CPU alone or the verdict is `settled` already, else its layers' exact
    cycles."""
    names = [n for n, s in current.items() if s == subgraph]
    without = {n: s for n, s in current.items() if s != subgraph}
    verdict = SubgraphCost(
        subgraph=subgraph,
        onnx_ops=onnx_op_count(graph, names),
        vpu_cycles=0,
        vpu_s=0.0,
        transfer_s=transfer_change(graph, without, current, names, target),
        cpu_s=cpu_seconds(graph, names, target),
        keep=keep,
        reason=reason,
    )
    cycles = estimated.get(subgraph)
    if cycles is None and prices.may_bound(subgraph):
        bounded = _priced(verdict, prices.least(names), target, bound=True)
        if settled or _saving(bounded) > 0:
            return bounded
    return _priced(verdict, prices.exact(names) if cycles is None else cycles, target)


def _priced(verdict: SubgraphCost, cycles: int, target: Target, bound: bool = False) -> SubgraphCost:
    vpu_s = cost.vpu_seconds(cycles, target)
    return SubgraphCost(**{**verdict.__dict__, "vpu_cycles": cycles, "vpu_s": vpu_s, "vpu_bound": bound})


def _saving(verdict: SubgraphCost) -> float:
    """What moving the subgraph to the CPU saves (> 0: it moves)."""
    return verdict.vpu_s + verdict.transfer_s - verdict.cpu_s


@dataclass(frozen=True)
class _Prices:
    exact: _LayerCycles  # the layer planner's cycles
    least: _LayerCycles | None  # their lower bound, where the figures may show it
    bounded: frozenset[int] | None = None  # the subgraphs whose figures may (None: all)

    def may_bound(self, subgraph: int) -> bool:
        return self.least is not None and (self.bounded is None or subgraph in self.bounded)


class _LayerCycles:
    """The cycles (`cycles_of`: the planner's, or their lower bound) of the composites
    wholly among a subgraph's bindings, memoised by those bindings (a subgraph judged again
    after the edge moves, or for its final verdict, is not summed again)."""

    def __init__(self, graph: Graph, composites, target: Target, cycles_of):
        self.graph, self.composites, self.target, self.cycles_of = graph, composites, target, cycles_of
        self.known: dict[frozenset[str], int] = {}

    def __call__(self, names: list[str]) -> int:
        key = frozenset(names)
        if key not in self.known:
            layers = [c for c in self.composites if all(n in key for n in c.members)]
            self.known[key] = self.cycles_of(self.graph, layers, self.target)
        return self.known[key]


def _with_reason(verdict: SubgraphCost, keep: bool) -> SubgraphCost:
    at_least = ">= " if verdict.vpu_bound else ""
    figures = (
        f"VPU {at_least}{verdict.vpu_s * 1e6:.2f} us + "
        f"host<->VPU transfers {verdict.transfer_s * 1e6:.2f} us vs CPU {verdict.cpu_s * 1e6:.2f} us"
    )
    if keep:
        reason = f"runs on the VPU: {figures}"
    else:
        reason = f"kept on the CPU: moving it to the VPU costs more than it saves ({figures})"
    return SubgraphCost(**{**verdict.__dict__, "keep": keep, "reason": reason})
