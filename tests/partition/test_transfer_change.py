"""placement.transfer_change, the profitability rule's price of a move's transfers, looks
only at the tensors the moved ops write or read; its answer must be the definition's: the
whole graph's boundaries after the move less those before, on any assignment and move."""

from __future__ import annotations

import random

from vpuc.compiler.partition.graph import HOST, Graph, Op
from vpuc.compiler.partition.placement import boundaries, transfer_change, transfer_seconds
from vpuc.targets import load_target


def _chain_with_branches(count: int, rng: random.Random) -> Graph:
    """`count` ops, each reading one or two earlier tensors (or the input), sizes varied,
    two of them model outputs."""
    inputs = {"x": Op("x", None, [], (1, 8, 8, 4), "float32", None)}
    ops: dict[str, Op] = {}
    for i in range(count):
        earlier = ["x", *ops]
        reads = rng.sample(earlier, k=min(len(earlier), rng.choice((1, 2))))
        shape = (1, rng.choice((2, 4, 8)), 8, rng.choice((4, 16)))
        ops[f"op{i}"] = Op(f"op{i}", "relax.nn.relu", reads, shape, "float32", None, [f"n{i}"])
    outputs = [f"op{count - 1}", f"op{count // 2}"]
    consumers: dict[str, list[str]] = {}
    for name, op in ops.items():
        for read in op.inputs:
            consumers.setdefault(read, []).append(name)
    for name in outputs:
        consumers.setdefault(name, []).append(HOST)
    return Graph(ops, inputs, outputs, consumers)


def test_a_moves_transfers_are_the_whole_graphs_difference():
    target = load_target("vpu")
    rng = random.Random(7)
    checked = 0
    for _ in range(40):
        graph = _chain_with_branches(rng.randint(3, 14), rng)
        before = {n: rng.randint(0, 2) for n in graph.ops if rng.random() < 0.7}
        moved = set(rng.sample(list(graph.ops), k=rng.randint(1, 3)))
        after = {n: s for n, s in before.items() if n not in moved}  # moved to the CPU
        after.update({n: 5 for n in moved if rng.random() < 0.3})  # or into another subgraph
        whole = transfer_seconds(boundaries(graph, after), target) - transfer_seconds(
            boundaries(graph, before), target
        )
        local = transfer_change(graph, before, after, moved, target)
        assert abs(local - whole) <= 1e-12 * max(1.0, abs(whole)), (before, after, moved)
        checked += whole != 0
    assert checked >= 20  # most moves change what crosses: the comparison saw real figures
