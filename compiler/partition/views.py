"""A VPU subgraph that computes nothing stays on the CPU (step 4 of the partitioner).

Views (Reshape, Flatten, Squeeze, Unsqueeze, and the transposes of size-1 axes the graph
passes turn into reshapes) are VPU ops so that they never cut a subgraph: inside one they
are metadata, a new shape over the same bytes. A subgraph made of views alone, though,
does no work on the VPU and adds two link transfers (a KWS net's input reshape, once its
first conv was refused, became such a subgraph on u55-256: 0 VPU cycles). Its ops run on
the host, where a view costs nothing either.
"""

from __future__ import annotations

VIEW_COMPOSITES = ("vpu.reshape", "vpu.reshape_q")


def computeless(placement) -> dict[str, str]:
    """{binding: reason} for every member of a subgraph whose composites are all views
    (`placement` is a partition.Placement)."""
    by_subgraph: dict[int, list] = {}
    for composite in placement.composites:
        by_subgraph.setdefault(composite.subgraph, []).append(composite)
    blocked: dict[str, str] = {}
    for subgraph, composites in sorted(by_subgraph.items()):
        if not all(c.name in VIEW_COMPOSITES for c in composites):
            continue
        reason = (
            f"kept on the CPU: VPU subgraph {subgraph} would hold only views (reshape, squeeze, "
            "flatten): no compute on the VPU, only link transfers"
        )
        blocked.update({name: reason for c in composites for name in c.members})
    return blocked
