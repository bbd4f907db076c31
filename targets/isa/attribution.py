"""Which layer a cycle is charged to: the one rule the code generator's estimate
(compiler/lower/codegen/emit.py) and `vpuc run`'s simulated per-layer table
(runtime/stats.py) both call, so the two tables compare row by row and each sums to its
subgraph's cycles.

Layers are taken in program order; a layer is charged the cycles by which it moves the
frontier (the latest end of any layer so far) forward: charged = max(0, end - frontier).
What it ran while earlier layers were still running is its `overlap` = (end - start) -
charged (for a layer entirely inside earlier ones, charged is 0 and overlap its span).
The charges sum to the last end, the subgraph's cycles when it starts at cycle 0.
"""

from __future__ import annotations


def charge_layers(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """[(start, end)] in program order -> [(charged cycles, overlap cycles)]."""
    frontier = 0
    charges = []
    for start, end in spans:
        charged = max(0, end - frontier)
        frontier = max(frontier, end)
        charges.append((charged, max(0, end - start - charged)))
    return charges
