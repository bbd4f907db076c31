"""Fixes of conversions TVM's importer fails on (it raised, and vpuc refused the model): the
same computation in the ONNX form the importer converts (frontend/fixes/__init__.py lists
them). Found by ONNX's backend node tests (tests/onnx_node)."""

from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from vpuc.compiler.frontend.fixes.rewrite import Rewrite, attributes, make, remake

ROI, SCALES, SIZES = 1, 2, 3  # Resize's inputs after X


def eye_like_dtype(node, ctx: Rewrite, label: str):
    """EyeLike(x, dtype=D) with D not x's type: the importer wants them equal, so the identity
    is made in x's type and cast (0 and 1 are exact in every type)."""
    attrs = attributes(node)
    x = node.input[0]
    if "dtype" not in attrs or attrs["dtype"] == ctx.types.get(x):
        return None
    others = {k: v for k, v in attrs.items() if k != "dtype"}
    eye = make(ctx, label, "EyeLike", [x], **others)
    return [eye, make(ctx, label, "Cast", [eye.output[0]], [node.output[0]], to=attrs["dtype"])]


def resize_full_rank(node, ctx: Rewrite, label: str):
    """Resize with `axes` (the importer indexes roi/scales/sizes by rank) -> the full-rank
    form: scale 1, the input's size and roi [0, 1] on the other axes (ONNX's own expansion).
    keep_aspect_ratio_policy not_larger / not_smaller -> the sizes it gives (stretch), where
    they are exactly the common scale times the input (else the interpolation's coordinate
    map would differ: support.py refuses those)."""
    attrs = attributes(node)
    axes, policy = attrs.get("axes"), _text(attrs.get("keep_aspect_ratio_policy", b"stretch"))
    shape = ctx.shapes.get(node.input[0])
    if (axes is None and policy == "stretch") or shape is None:
        return None
    rank = len(shape)
    axes = [a % rank for a in axes] if axes is not None else list(range(rank))
    inputs = list(node.input) + [""] * (4 - len(node.input))
    arrays = {}
    for position in (ROI, SCALES, SIZES):
        name = inputs[position]
        if name and name not in ctx.constants:
            return None  # computed at run time: left to the importer (and its refusal)
        arrays[position] = numpy_helper.to_array(ctx.constants[name]) if name else None
    roi, scales, sizes = (
        arrays[p] if arrays[p] is not None and arrays[p].size else None for p in (ROI, SCALES, SIZES)
    )
    if sizes is not None:
        full = np.array(shape, np.int64)
        full[axes] = sizes
        if policy != "stretch":
            ratios = full[axes] / np.array(shape, np.float64)[axes]
            scale = ratios.min() if policy == "not_larger" else ratios.max()
            full[axes] = [int(scale * shape[a] + 0.5) for a in axes]
            if any(full[a] != scale * shape[a] for a in axes):
                return None
        inputs[SIZES] = ctx.const(full, f"{label}/sizes")
    if scales is not None:
        full_scales = np.ones(rank, scales.dtype)
        full_scales[axes] = scales
        inputs[SCALES] = ctx.const(full_scales, f"{label}/scales")
    if roi is not None:
        full_roi = np.concatenate([np.zeros(rank), np.ones(rank)]).astype(roi.dtype)
        full_roi[axes] = roi[: len(axes)]
        full_roi[[rank + a for a in axes]] = roi[len(axes) :]
        inputs[ROI] = ctx.const(full_roi, f"{label}/roi")
    while inputs and not inputs[-1]:
        inputs.pop()
    kept = {k: v for k, v in attrs.items() if k not in ("axes", "keep_aspect_ratio_policy")}
    return [remake(node, inputs, list(node.output), **kept)]


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def slice_bounds(node, ctx: Rewrite, label: str):
    """Slice starts/ends in ONNX's own clamped form: start in [0, dim] (step > 0) or
    [0, dim - 1] (step < 0), end in [start, dim] or [-1, start], "before index 0" (-1) written
    -(dim + 1). The importer narrows the values to 32 bits (-2^62 became 0: an empty slice where
    ONNX takes the whole axis backwards, a fuzzer finding, cpu-e4c8ee58bf) and TVM's build
    fails on an end before the start (ONNX: empty)."""
    shape = ctx.shapes.get(node.input[0])
    if len(node.input) < 3 or shape is None:
        return None
    names = list(node.input) + [""] * (5 - len(node.input))
    if any(name and name not in ctx.constants for name in names[1:5]):
        return None
    starts, ends = (numpy_helper.to_array(ctx.constants[n]).astype(np.int64) for n in names[1:3])
    rank = len(shape)
    axes = numpy_helper.to_array(ctx.constants[names[3]]) if names[3] else np.arange(len(starts))
    steps = numpy_helper.to_array(ctx.constants[names[4]]) if names[4] else np.ones(len(starts), np.int64)
    new_starts, new_ends = starts.copy(), ends.copy()
    for i, (start, end, axis, step) in enumerate(zip(starts, ends, axes, steps, strict=True)):
        dim = shape[int(axis) % rank]
        start, end = int(start) + dim * (start < 0), int(end) + dim * (end < 0)
        if step > 0:
            start = min(max(start, 0), dim)
            end = min(max(end, start), dim)
        else:
            start = min(max(start, 0), dim - 1)
            end = min(max(end, -1), start)
        new_starts[i], new_ends[i] = start, end if end >= 0 else -(dim + 1)
    if np.array_equal(new_starts, starts) and np.array_equal(new_ends, ends):
        return None
    names[1] = ctx.const(new_starts, f"{label}/starts")
    names[2] = ctx.const(new_ends, f"{label}/ends")
    while not names[-1]:
        names.pop()
    return [remake(node, names, list(node.output))]
