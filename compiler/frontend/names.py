"""Frontend step: every node gets a name, and every name is unique.

Every report speaks ONNX node names (the partition report, the fusion audit, errors), and
the import binds each node's result to a var named after its node. Exporters may leave
names empty (onnxruntime's quantisers write nameless Reshape nodes; onnx.helper models often
have none) or repeat them. Such nodes are named at import, stably:

    ""         ->  <OpType>_<index>      the node's position in the graph (Conv_3)
    a repeat   ->  <name>_<index>        the first node keeps the name

Run on the model's own copy: the caller's ModelProto is never changed.
"""

from __future__ import annotations

import onnx


def name_nodes(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """Name nameless and repeated nodes in place; returns [(old name, new name)]."""
    taken = {node.name for node in model.graph.node if node.name}
    seen: set[str] = set()
    renamed = []
    for index, node in enumerate(model.graph.node):
        if node.name and node.name not in seen:
            seen.add(node.name)
            continue
        base = f"{node.op_type}_{index}" if not node.name else f"{node.name}_{index}"
        name, k = base, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        seen.add(name)
        renamed.append((node.name, name))
        node.name = name
    return renamed
