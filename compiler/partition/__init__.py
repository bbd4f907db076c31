"""The VPU partitioner (BYOC): which op runs where, the subgraphs, and what crosses.

    partition_for_vpu(mod, target, ...) -> PartitionResult(mod, report)

Steps:
  0. prepare    every dequantize gets one reader (prepare.py)
  1. annotate   FuseOpsByPattern over the VPU pattern table, every match checked against
                the target's op list and constraints; MergeCompositeFunctions   (raw cut)
  2. ask        the code generator (quantised modules): each raw subgraph's estimated
                cycles, and every layer it refuses, before the cut is final
  3. profit     the profitability rule judges each raw subgraph with the cost model
  4. annotate   again, with the refused layers, the losing subgraphs and the subgraphs that
                compute nothing (views only: views.py) blocked (final cut)
  5. report     every ONNX node with device and reason, subgraphs, boundaries, totals
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import onnx
import tvm

from vpuc.compiler.partition.annotate import annotate
from vpuc.compiler.partition.graph import Composite, build_graph, vpu_composites
from vpuc.compiler.partition.placement import subgraph_members
from vpuc.compiler.partition.prepare import duplicate_shared_dequantize
from vpuc.compiler.partition.profit import judge
from vpuc.compiler.partition.report import build_report
from vpuc.compiler.partition.views import computeless
from vpuc.targets import Target

DEFAULT_MIN_SUBGRAPH_OPS = 1


@dataclass(frozen=True)
class Placement:
    """An assignment of bindings to VPU subgraphs, read off a partitioned module."""

    composites: tuple[Composite, ...]

    @property
    def subgraph_of(self) -> dict[str, int]:
        return {name: c.subgraph for c in self.composites for name in c.members}

    @property
    def composite_of(self) -> dict[str, Composite]:
        return {name: c for c in self.composites for name in c.members}


@dataclass(frozen=True)
class VpuAnswers:
    """What the code generator says of a raw cut: estimated cycles per raw subgraph it
    lowers whole, and {binding: reason} for every layer it refuses."""

    cycles: dict[int, int] = field(default_factory=dict)
    refusals: dict[str, str] = field(default_factory=dict)


@dataclass
class PartitionResult:
    mod: tvm.IRModule  # main calls functions with Codegen="vpu"
    report: dict[str, Any]
    placement: Placement  # the final decision: which bindings of the input `mod` go where


def partition_for_vpu(
    mod: tvm.IRModule,
    target: Target,
    onnx_model: onnx.ModelProto,
    provenance: dict[str, list[str]],
    min_subgraph_ops: int = DEFAULT_MIN_SUBGRAPH_OPS,
    profitability: bool = True,
    blocked: dict[str, str] | None = None,
    vpu_estimate: Callable[[tvm.IRModule], VpuAnswers] | None = None,
    notes: dict[str, str] | None = None,
    exact_figures: bool = True,
) -> PartitionResult:
    """Partition `mod` (after the graph passes) for a VPU target. `blocked` names bindings
    to keep on the CPU whatever the op list says, with the reason (the quantiser's float
    layers). `vpu_estimate(raw module)` asks the code generator about the raw cut (compile
    passes it for a quantised module): the layers it refuses are blocked in the final cut,
    and the profitability rule uses its cycles (the layer planner's, layer by layer,
    elsewhere). `notes` says, per ONNX node, what an earlier stage made of it
    (decompose.py), and the report shows it. `exact_figures` False (a caller that reads
    only the placement): the profitability rule sends a subgraph to the CPU on a lower bound
    of its cycles when that suffices, without planning its layers, and its verdict shows
    the bound (profit.py; the same placement)."""
    real = {node.name for node in onnx_model.graph.node}
    # Bindings the passes inserted (layout transposes) carry pseudo-nodes: they compute no
    # ONNX node, and the report names them by the tensor they transform.
    provenance = {var: [n for n in nodes if n in real] for var, nodes in provenance.items()}
    mod = duplicate_shared_dequantize(mod)
    graph = build_graph(mod["main"], provenance)
    refused = dict(blocked or {})
    raw_mod, raw_annotation = annotate(mod, target, refused)
    raw = _placement(raw_mod)
    answers = vpu_estimate(raw_mod) if vpu_estimate is not None else VpuAnswers()
    unprofitable, verdicts = {}, []
    if profitability:
        # judged on the raw cut as it stands: a subgraph the rule sends to the CPU gets its
        # verdict as the reason (a layer the quantiser left in float for that reason is also
        # one the code generator refuses); the code generator's refusals block the rest
        refused_whole = _refused_whole(raw, answers.refusals)
        unprofitable, verdicts = judge(
            graph, raw, target, min_subgraph_ops, answers.cycles, exact_figures, refused_whole
        )
    idle = computeless(raw)
    blocked_now = {**refused, **answers.refusals, **unprofitable, **idle}
    if len(blocked_now) > len(refused):
        final_mod, annotation = annotate(mod, target, blocked_now)
    else:
        final_mod, annotation = raw_mod, raw_annotation
    final = _placement(final_mod)
    # blocking a subgraph's compute can leave its views alone in a subgraph: block those too
    while idle := computeless(final):
        blocked_now.update(idle)
        final_mod, annotation = annotate(mod, target, blocked_now)
        final = _placement(final_mod)
    report = build_report(graph, onnx_model, target, raw, final, annotation, verdicts, notes or {})
    return PartitionResult(final_mod, report, final)


def _refused_whole(raw: Placement, refusals: dict[str, str]) -> frozenset[int]:
    """The raw subgraphs the code generator refuses every binding of: blocked in the final
    cut whatever the profitability rule says of them (ocr_cls: the float ops the quantiser
    left on the CPU, matched again in their float form), so the rule may judge them on the
    bound of their cycles where that suffices (profit.py), as the quantiser's partition does,
    rather than plan their layers for their verdicts' figures."""
    members = subgraph_members(raw.subgraph_of)
    return frozenset(s for s, names in members.items() if all(n in refusals for n in names))


def _placement(mod: tvm.IRModule) -> Placement:
    return Placement(tuple(vpu_composites(mod)))
