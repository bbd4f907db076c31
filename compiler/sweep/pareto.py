"""The Pareto front of a sweep: the points no other point beats on every objective.

A point is dominated when another is no worse on each objective (all minimised: latency,
area, energy) and better on one. O(n^2) over the feasible points of one model, which is
quick for the tens of thousands of points a sweep has.
"""

from __future__ import annotations

OBJECTIVES = ("latency_us", "area_mm2", "energy_uj")


def dominates(a: dict, b: dict, objectives=OBJECTIVES) -> bool:
    return all(a[k] <= b[k] for k in objectives) and any(a[k] < b[k] for k in objectives)


def front(figures: list[dict], objectives=OBJECTIVES) -> list[int]:
    """Indices of the non-dominated entries of `figures` (in their order)."""
    return [
        i
        for i, a in enumerate(figures)
        if not any(dominates(b, a, objectives) for j, b in enumerate(figures) if j != i)
    ]
