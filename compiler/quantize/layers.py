"""Layers as the user names them: VPU composites by ONNX node, and `--keep-float NODE`.

    placement / plan + provenance   ->   [Layer(root, name, nodes, members, kind)]
    --keep-float NODE ...           ->   {binding: reason} for the partitioner to block

A layer is one VPU composite (a conv with its bias and activation is one layer), named
after the ONNX node of its core op. Keeping a node in float keeps every composite that
computes it on the CPU, whole: a conv kept in float takes its fused relu with it.
"""

from __future__ import annotations

import onnx

from vpuc.compiler.errors import CompileError
from vpuc.compiler.partition import Placement
from vpuc.compiler.quantize.measurement.floor import Layer
from vpuc.compiler.quantize.plan import QuantPlan


def plan_layers(plan: QuantPlan, provenance: dict[str, list[str]]) -> list[Layer]:
    layers = []
    for composite in plan.composites:
        nodes = list(dict.fromkeys(n for m in composite.members for n in provenance.get(m, [])))
        core_nodes = provenance.get(composite.core) or nodes or [composite.core]
        layers.append(Layer(composite.root, core_nodes[0], tuple(nodes), composite.members, composite.kind))
    return layers


def keep_float_bindings(
    nodes: tuple[str, ...],
    placement: Placement,
    provenance: dict[str, list[str]],
    onnx_model: onnx.ModelProto,
) -> tuple[dict[str, str], list[str]]:
    """({binding: reason} blocking every composite that computes one of `nodes`, warnings
    for nodes that run on the CPU anyway). An unknown node name is a CompileError."""
    known = [n.name for n in onnx_model.graph.node]
    blocked: dict[str, str] = {}
    warnings = []
    for node in nodes:
        if node not in known:
            close = [k for k in known if node.lower() in k.lower()][:5]
            hint = f" (nodes containing it: {', '.join(close)})" if close else ""
            raise CompileError(f"--keep-float '{node}': the model has no node of that name{hint}")
        composites = [
            c for c in placement.composites if any(node in provenance.get(m, []) for m in c.members)
        ]
        if not composites:
            warnings.append(f"--keep-float '{node}': it runs on the CPU in float anyway")
        for composite in composites:
            for member in composite.members:
                blocked[member] = f"kept in float on the CPU: --keep-float {node}"
    return blocked, warnings
