"""Frontend step 4: list every op the Relax importer cannot take, all at once.

A user with three unsupported ops learns about all three in one run, each by node name and
op type, instead of fixing them one error at a time.
"""

from __future__ import annotations

import onnx

from vpuc.compiler import compat
from vpuc.compiler.errors import FrontendError

# Ops the importer lists but cannot convert (found on ONNX's backend node tests).
KNOWN_BROKEN = {"MatMulInteger", "ConvInteger"}
MAX_LISTED = 12


def unsupported_nodes(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """(node name, op type) for every node of the main graph the importer cannot convert."""
    convertible = compat.onnx_importer_ops()
    found = []
    for index, node in enumerate(model.graph.node):
        domain = node.domain if node.domain not in ("", "ai.onnx") else ""
        op = f"{domain}.{node.op_type}" if domain else node.op_type
        if domain or node.op_type not in convertible or node.op_type in KNOWN_BROKEN:
            found.append((node.name or f"#{index}:{node.output[0]}", op))
    return found


def check_supported(model: onnx.ModelProto, name: str) -> None:
    """Raise one FrontendError naming every unsupported node."""
    found = unsupported_nodes(model)
    if not found:
        return
    listed = ", ".join(f"'{node}' ({op})" for node, op in found[:MAX_LISTED])
    more = f", and {len(found) - MAX_LISTED} more" if len(found) > MAX_LISTED else ""
    kinds = sorted({op for _, op in found})
    raise FrontendError(f"{name}: {len(found)} unsupported node(s) [{', '.join(kinds)}]: {listed}{more}")
