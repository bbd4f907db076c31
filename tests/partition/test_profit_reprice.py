"""The profitability rule prices each subgraph's layers once per membership and, after a
move, judges again only the subgraphs that share a tensor with the one moved. Its decisions
must be those of the rule that judged every subgraph afresh each round (kept below as the
reference): the same bindings blocked with the same reasons, the same verdicts."""

from __future__ import annotations

import random
from dataclasses import dataclass

from vpuc.compiler.partition import cost, edges, profit
from vpuc.compiler.partition.edges import move_edge_layers
from vpuc.compiler.partition.graph import HOST, Composite, Graph, Op
from vpuc.compiler.partition.placement import (
    SubgraphCost,
    cpu_seconds,
    onnx_op_count,
    subgraph_members,
    transfer_change,
)
from vpuc.targets import load_target
from vpuc.targets.ops import OpView


def _reference_judge(graph, placement, target, min_ops, estimated, cycles_of):
    """profit.judge as it was: every subgraph judged afresh (cycles summed again) each round."""
    subgraph_of = placement.subgraph_of
    composites = list(placement.composites)

    def verdict(current, subgraph, keep, reason, estimated):
        names = subgraph_members(current)[subgraph]
        cycles = estimated.get(subgraph)
        if cycles is None:
            layers = [c for c in composites if all(current.get(n) == subgraph for n in c.members)]
            cycles = cycles_of(graph, layers, target)
        without = {n: s for n, s in current.items() if s != subgraph}
        return SubgraphCost(
            subgraph, onnx_op_count(graph, names), cycles, cost.vpu_seconds(cycles, target),
            transfer_change(graph, without, current, names, target), cpu_seconds(graph, names, target),
            keep, reason,
        )  # fmt: skip

    def move_whole(current, estimated, verdicts):
        while True:
            best, best_saving = None, 0.0
            for subgraph in sorted(subgraph_members(current)):
                v = verdict(current, subgraph, True, "", estimated)
                if v.vpu_s + v.transfer_s - v.cpu_s > best_saving:
                    best, best_saving = subgraph, v.vpu_s + v.transfer_s - v.cpu_s
            if best is None:
                return current
            verdicts[best] = profit._with_reason(verdict(current, best, False, "", estimated), False)
            current = {n: s for n, s in current.items() if s != best}

    current, verdicts = dict(subgraph_of), {}
    for subgraph, names in subgraph_members(current).items():
        if (count := onnx_op_count(graph, names)) < min_ops:
            reason = f"kept on the CPU: {count} ONNX op(s), below the minimum of {min_ops} for a VPU subgraph"
            verdicts[subgraph] = verdict(current, subgraph, False, reason, estimated)
            current = {n: s for n, s in current.items() if s != subgraph}
    current = move_whole(current, estimated, verdicts)
    current, edge_moves = move_edge_layers(graph, current, composites, target)
    if edge_moves:
        trimmed = {subgraph_of[name] for name in edge_moves}
        estimated = {s: c for s, c in estimated.items() if s not in trimmed}
        current = move_whole(current, estimated, verdicts)
    for subgraph in subgraph_members(current):
        verdicts[subgraph] = profit._with_reason(verdict(current, subgraph, True, "", estimated), True)
    kept = subgraph_members(current)
    blocked = {n: verdicts[s].reason for n, s in subgraph_of.items() if s not in kept}
    blocked.update({n: reason for n, reason in edge_moves.items() if n not in blocked})
    return blocked, [verdicts[s] for s in sorted(verdicts)]


@dataclass(frozen=True)
class _Placement:
    composites: tuple[Composite, ...]

    @property
    def subgraph_of(self) -> dict[str, int]:
        return {name: c.subgraph for c in self.composites for name in c.members}


def _random_case(rng: random.Random):
    """A chain with branches of relu/add layers of varied sizes, cut into runs of VPU
    subgraphs (one composite per op), a few ops left on the CPU; seeded cycles per layer."""
    shape = (1, 8, 8, 4)
    inputs = {"x": Op("x", None, [], shape, "float32", None)}
    ops: dict[str, Op] = {}
    for i in range(rng.randint(6, 30)):
        earlier = ["x", *ops]
        reads = rng.sample(earlier, k=min(len(earlier), rng.choice((1, 1, 2))))
        out = (1, rng.choice((4, 8, 32)), 8, rng.choice((4, 16, 64)))
        kind = "add" if len(reads) == 2 else rng.choice(("relu", "conv2d"))
        read_shapes = tuple(((inputs.get(r) or ops[r]).shape, "int8") for r in reads)
        attrs = {"kernel": (3, 3), "in_channels": read_shapes[0][0][1]} if kind == "conv2d" else {}
        view = OpView(kind, f"op{i}", read_shapes, (out, "int8"), attrs=attrs)
        ops[f"op{i}"] = Op(f"op{i}", f"relax.{kind}", reads, out, "float32", view, [f"n{i}"])
    consumers: dict[str, list[str]] = {}
    for name, op in ops.items():
        for read in op.inputs:
            consumers.setdefault(read, []).append(name)
    outputs = [list(ops)[-1]]
    consumers.setdefault(outputs[0], []).append(HOST)
    graph = Graph(ops, inputs, outputs, consumers)
    composites, subgraph = [], 0
    for name in ops:
        if rng.random() < 0.15:
            continue  # on the CPU in the raw cut
        if rng.random() < 0.35:
            subgraph += 1
        composites.append(Composite(subgraph, "vpu.relu", (name,)))
    layer_cycles = {name: rng.choice((50, 400, 3000, 20000)) for name in ops}
    subgraphs = sorted({c.subgraph for c in composites})
    estimated = {s: rng.randint(100, 40000) for s in subgraphs if rng.random() < 0.3}
    return graph, _Placement(tuple(composites)), layer_cycles, estimated


def test_repricing_only_what_a_move_changes_decides_as_pricing_everything(monkeypatch):
    target = load_target("vpu")
    rng = random.Random(23)
    asked = {"new": 0, "old": 0}
    cases = moved = edge_moved = 0
    for _ in range(60):
        graph, placement, layer_cycles, estimated = _random_case(rng)

        def priced(graph, layers, target, who, layer_cycles=layer_cycles):
            asked[who] += len(layers)
            return sum(layer_cycles[c.members[0]] for c in layers)

        monkeypatch.setattr(edges, "vpu_cycles_of", lambda g, ls, t: priced(g, ls, t, "edge"))
        asked["edge"] = 0
        monkeypatch.setattr(profit, "vpu_cycles_of", lambda g, ls, t: priced(g, ls, t, "new"))
        min_ops = rng.choice((1, 1, 2))
        new = profit.judge(graph, placement, target, min_ops, dict(estimated))
        old = _reference_judge(
            graph, placement, target, min_ops, dict(estimated), lambda g, ls, t: priced(g, ls, t, "old")
        )
        assert new[0] == old[0]
        assert [v.to_json() for v in new[1]] == [v.to_json() for v in old[1]]
        cases += 1
        moved += sum(not v.keep for v in new[1])
        edge_moved += any("at the edge" in r for r in new[0].values())
    assert moved >= 30 and edge_moved >= 3  # the cases moved subgraphs and edge layers
    assert asked["new"] * 3 < asked["old"], asked  # each membership's layers priced once


def test_a_models_partition_asks_the_planner_less_and_places_the_same(monkeypatch, partition):
    """opzoonet's shape on vpu (subgraphs between ops the vpu lacks, some moved back to the
    CPU): the same report with the old rule, the planner's memo asked fewer times."""
    from partition_models import opzoonet_shaped

    import vpuc.compiler.partition as partition_module
    from vpuc.compiler.partition import placement

    asked = []
    real_answer = placement.answer
    monkeypatch.setattr(
        placement, "answer", lambda view, target: asked.append(1) or real_answer(view, target)
    )
    new = partition(opzoonet_shaped())
    new_asked, asked[:] = len(asked), []

    def reference(graph, raw, target, min_ops, estimated=None, exact_figures=True, refused=frozenset()):
        return _reference_judge(graph, raw, target, min_ops, dict(estimated or {}), placement.vpu_cycles_of)

    monkeypatch.setattr(partition_module, "judge", reference)
    old = partition(opzoonet_shaped())
    assert new == old
    assert sum(s["decision"] == "cpu" for s in new["profitability"]) >= 1, new["profitability"]
    assert new_asked < len(asked), (new_asked, len(asked))
