"""The shape ops of the fuzzer's graphs (fuzz_graphs.py): the views (Flatten, Reshape,
Squeeze, Unsqueeze), Transpose, Concat, Slice, Pad and Reduce*. Each takes (draw, graph, x)
and returns the new tensor or None, as fuzz_graphs's ops do; moved out of fuzz_graphs.py
unchanged (its draws are the same)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from hypothesis import strategies as st

if TYPE_CHECKING:
    from fuzz_graphs import Graph


def flatten(draw, g: Graph, x: str):
    return g.node("Flatten", [x], axis=draw(st.integers(1, len(g.shapes[x]) - 1)))


def reshape(draw, g: Graph, x: str):
    shape = list(g.shapes[x])
    if len(shape) >= 2 and draw(st.booleans()):  # merge two neighbours
        i = draw(st.integers(0, len(shape) - 2))
        target = [*shape[:i], shape[i] * shape[i + 1], *shape[i + 2 :]]
    else:  # split one dim by a divisor
        i = draw(st.integers(0, len(shape) - 1))
        divisors = [d for d in range(1, shape[i] + 1) if shape[i] % d == 0]
        d = draw(st.sampled_from(divisors))
        target = [*shape[:i], d, shape[i] // d, *shape[i + 1 :]]
    if len(target) > 5:
        return None
    special = draw(st.sampled_from(["none", "minus_one", "zero"]))
    if special == "minus_one":
        target[draw(st.integers(0, len(target) - 1))] = -1
    elif special == "zero" and target[0] == shape[0]:
        target[0] = 0  # "copy this dim from the input"
    return g.node("Reshape", [x, g.const(np.array(target, np.int64), "shape")])


def squeeze(draw, g: Graph, x: str):
    """A view: drop size-1 axes (tinyconv's Squeeze between its pool and its FC)."""
    ones = [i for i, d in enumerate(g.shapes[x]) if d == 1 and i > 0]
    if not ones:
        return None
    axes = draw(st.lists(st.sampled_from(ones), min_size=1, unique=True))
    return g.node("Squeeze", [x, g.const(np.array(sorted(axes), np.int64), "axes")])


def unsqueeze(draw, g: Graph, x: str):
    """A view: a new size-1 axis."""
    rank = len(g.shapes[x])
    if rank >= 5:
        return None
    axis = draw(st.integers(1, rank))
    return g.node("Unsqueeze", [x, g.const(np.array([axis], np.int64), "axes")])


def transpose(draw, g: Graph, x: str):
    perm = draw(st.permutations(range(len(g.shapes[x]))))
    return g.node("Transpose", [x], perm=list(perm))


def concat(draw, g: Graph, x: str):
    shape = g.shapes[x]
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    axis_p = axis % len(shape)

    def fits(t):
        s = g.shapes[t]
        return len(s) == len(shape) and all(
            a == b for i, (a, b) in enumerate(zip(s, shape, strict=True)) if i != axis_p
        )

    partners = [t for t in g.order if fits(t)]
    others = draw(st.lists(st.sampled_from(partners), min_size=1, max_size=2))
    if draw(st.booleans()):
        extra = list(shape)
        extra[axis_p] = draw(st.integers(1, 3))
        others.append(g.const(g.rng.standard_normal(extra).astype(np.float32), "cat"))
    return g.node("Concat", [x, *others], axis=axis)


def slice_(draw, g: Graph, x: str):
    shape = g.shapes[x]
    axes = draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape), unique=True))
    starts, ends, steps = [], [], []
    for axis in axes:
        dim = shape[axis]
        step = draw(st.sampled_from([1, 1, 2, -1, -2]))
        starts.append(draw(st.integers(-dim - 1, dim + 1)))
        ends.append(draw(st.sampled_from([draw(st.integers(-dim - 1, dim + 1)), 2**62, -(2**62)])))
        steps.append(step)
    consts = [g.const(np.array(v, np.int64), "sl") for v in (starts, ends, axes, steps)]
    return g.node("Slice", [x, *consts])


def pad(draw, g: Graph, x: str):
    shape = g.shapes[x]
    mode = draw(st.sampled_from(["constant", "constant", "reflect", "edge"]))
    # reflect mirrors inside the tensor: at most dim - 1 on each side
    limits = [min(2, d - 1) if mode == "reflect" else 2 for d in shape * 2]
    pads = [draw(st.integers(0, limit)) for limit in limits]
    inputs = [x, g.const(np.array(pads, np.int64), "pads")]
    if mode == "constant" and draw(st.booleans()):
        inputs.append(g.const(np.float32(draw(st.floats(-1, 1))), "pv"))
    return g.node("Pad", inputs, mode=mode)


def reduce(draw, g: Graph, x: str):
    rank = len(g.shapes[x])
    op = draw(st.sampled_from(["ReduceMean", "ReduceSum", "ReduceMax"]))
    axes = draw(
        st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=rank, unique_by=lambda a: a % rank)
    )
    return g.node(op, [x], axes=axes, keepdims=draw(st.integers(0, 1)))
