"""Hypothesis strategy for the forms real int8 exports have (issue 20): a CNN body in NCHW with
kernels past the conv instruction's limits in either axis (KWS's 10x4, 1x9, 9x1), padding
past the padding limit and asymmetric ([4, 1, 5, 1]), depthwise layers, average pools
larger than the window limits (25x5, whole-map pools and global pools of odd sizes), views
between layers (Squeeze/Unsqueeze, Flatten/Reshape and back, transposes that only move
size-1 axes), and a classifier's head (pool, a view, Gemm, Softmax).

A strategy of its own beside fuzz_graphs.float_graphs, whose draws it leaves as they were
(the long runs' example databases replay those). The graphs are built with fuzz_graphs's
Graph, so ONNX shape inference decides every output shape.
"""

from __future__ import annotations

import numpy as np
import onnx
from fuzz_graphs import MAX_ELEMENTS, Graph, _window_fits, weights
from hypothesis import strategies as st

# kernel sizes within every target's limit (7) and past it (up to 12)
KERNEL = st.one_of(st.integers(1, 5), st.integers(6, 12))
POOL_WINDOW = st.one_of(st.integers(1, 4), st.integers(5, 25))


def _relu_or_clip(draw, g: Graph, x: str | None) -> str | None:
    act = draw(st.sampled_from(["none", "Relu", "Relu6"]))
    if x is None or act == "none":
        return x
    if act == "Relu":
        return g.node("Relu", [x]) or x
    return g.node("Clip", [x, g.const(np.float32(0.0), "lo"), g.const(np.float32(6.0), "hi")]) or x


def big_conv(draw, g: Graph, x: str) -> str | None:
    """A conv (dense or depthwise) whose kernel and padding may be past the limits in
    either axis, padding asymmetric; its Relu or Relu6."""
    _, c, h, w = g.shapes[x]
    depthwise = c > 1 and draw(st.booleans())
    groups = c if depthwise else 1
    out_c = c if depthwise else draw(st.integers(1, 8))
    kh, kw = draw(KERNEL), draw(KERNEL)
    strides = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    dilations = [1, 1] if draw(st.integers(0, 3)) else [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    if draw(st.booleans()):  # SAME as TF exports it: the extra row and column at the end
        pads = []
        for size, k, s, d in zip((h, w), (kh, kw), strides, dilations, strict=True):
            total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
            pads.append((total // 2, total - total // 2))
        pads = [pads[0][0], pads[1][0], pads[0][1], pads[1][1]]
    else:
        pads = [draw(st.integers(0, 6)) for _ in range(4)]
    if not _window_fits((h, w), (kh, kw), dilations, pads):
        return None
    attrs = {
        "kernel_shape": [kh, kw],
        "strides": strides,
        "dilations": dilations,
        "pads": pads,
        "group": groups,
    }
    inputs = [x, g.const(weights(g, (out_c, c // groups, kh, kw), c // groups * kh * kw))]
    inputs.append(g.const(weights(g, (out_c,), 1), "b"))
    return _relu_or_clip(draw, g, g.node("Conv", inputs, **attrs))


def large_pool(draw, g: Graph, x: str) -> str | None:
    """An average pool past the window limits: a window of up to 25x25, the whole map (KWS's
    25x5), or GlobalAveragePool; a MaxPool now and then."""
    _, _, h, w = g.shapes[x]
    form = draw(st.sampled_from(["window", "window", "whole", "global", "max"]))
    if form == "global":
        return g.node("GlobalAveragePool", [x])
    if form == "whole":
        return g.node("AveragePool", [x], kernel_shape=[h, w])
    kh, kw = min(draw(POOL_WINDOW), h), min(draw(POOL_WINDOW), w)
    attrs = {
        "kernel_shape": [kh, kw],
        "strides": [draw(st.integers(1, max(1, kh))), draw(st.integers(1, max(1, kw)))],
        "pads": [draw(st.integers(0, min(k - 1, 2))) for k in (kh, kw, kh, kw)],
    }
    if form == "max":
        return g.node("MaxPool", [x], **attrs)
    attrs["count_include_pad"] = draw(st.integers(0, 1))
    return g.node("AveragePool", [x], **attrs)


def size1_transposes(shape) -> list[list[int]]:
    """The permutations (other than the identity) that move only size-1 axes: the other
    axes keep their order, so the bytes do not move."""
    import itertools

    rank, found = len(shape), []
    moving = [i for i in range(rank) if shape[i] != 1]
    for perm in itertools.permutations(range(rank)):
        if list(perm) != list(range(rank)) and [p for p in perm if shape[p] != 1] == moving:
            found.append(list(perm))
    return found


def view_4d(draw, g: Graph, x: str) -> str | None:
    """Views between layers that end where they started (N, C, H, W): Squeeze/Unsqueeze of a
    size-1 axis, Flatten and a Reshape back, a Reshape through (N, C, H*W), a transpose of
    size-1 axes and its inverse."""
    shape = g.shapes[x]
    form = draw(st.sampled_from(["squeeze", "flatten", "reshape", "transpose"]))
    back = g.const(np.array(shape, np.int64), "shape")
    if form == "squeeze":
        ones = [i for i, d in enumerate(shape) if d == 1 and i > 0]
        if not ones:
            return None
        axes = g.const(np.array([draw(st.sampled_from(ones))], np.int64), "axes")
        mid = g.node("Squeeze", [x, axes])
        return mid and g.node("Unsqueeze", [mid, axes])
    if form == "flatten":
        mid = g.node("Flatten", [x], axis=1)
    elif form == "reshape":
        mid = g.node("Reshape", [x, g.const(np.array([shape[0], shape[1], -1], np.int64), "shape")])
    else:
        perms = size1_transposes(shape)
        if not perms:
            return None
        perm = draw(st.sampled_from(perms))
        mid = g.node("Transpose", [x], perm=perm)
        return mid and g.node("Transpose", [mid], perm=[int(i) for i in np.argsort(perm)])
    return mid and g.node("Reshape", [mid, back])


def head(draw, g: Graph, x: str) -> str:
    """A classifier's head: [pool] -> a view to (N, C) -> Gemm -> [Softmax]; x when it does
    not fit."""
    _, c, h, w = g.shapes[x]
    if h * w > 1:
        pool = draw(st.sampled_from(["global", "whole"]))
        pooled = (
            g.node("GlobalAveragePool", [x])
            if pool == "global"
            else g.node("AveragePool", [x], kernel_shape=[h, w])
        )
        if pooled is None:
            return x
        x = pooled
    view = draw(st.sampled_from(["squeeze", "flatten", "reshape", "transpose"]))
    if view == "squeeze":
        flat = g.node("Squeeze", [x, g.const(np.array([2, 3], np.int64), "axes")])
    elif view == "flatten":
        flat = g.node("Flatten", [x], axis=1)
    elif view == "reshape":
        flat = g.node("Reshape", [x, g.const(np.array([1, c], np.int64), "shape")])
    else:  # NHWC's (1, 1, 1, C) then its Reshape, as tf2onnx writes it
        moved = g.node("Transpose", [x], perm=[0, 2, 3, 1])
        flat = moved and g.node("Reshape", [moved, g.const(np.array([1, c], np.int64), "shape")])
    if flat is None:
        return x
    classes = draw(st.integers(2, 12))
    inputs = [flat, g.const(weights(g, (c, classes), c)), g.const(weights(g, (classes,), 1), "bias")]
    logits = g.node("Gemm", inputs)
    if logits is None:
        return flat
    return (g.node("Softmax", [logits], axis=-1) or logits) if draw(st.booleans()) else logits


LAYERS = [big_conv, big_conv, big_conv, large_pool, view_4d]


@st.composite
def export_graphs(draw, max_layers: int = 4) -> tuple[onnx.ModelProto, int]:
    """(model, seed): an exported CNN's form (batch 1, NCHW), see the module docstring."""
    seed = draw(st.integers(0, 2**16))
    g = Graph(np.random.default_rng(seed), quantizable=True)
    c = draw(st.sampled_from([1, 1, 2, 3, 4, 8]))
    h = draw(st.integers(1, 49))
    w = draw(st.integers(1, max(1, min(16, MAX_ELEMENTS // (c * h)))))
    x = g.input((1, c, h, w))
    for _ in range(draw(st.integers(1, max_layers))):
        y = draw(st.sampled_from(LAYERS))(draw, g, x)
        if y is not None and len(g.shapes[y]) == 4:
            x = y
    if draw(st.integers(0, 2)):
        x = head(draw, g, x)
    if not g.nodes:
        x = g.node("Relu", [x])
    return g.model([x]), seed
