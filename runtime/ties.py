"""Rounding ties: the per-quantisation-point differential of the fuzz harness (moved here
from tests/fuzz/fuzz_ties.py so that `vpuc run --check` can use it too).

The contract is 1 LSB per quantised tensor. A value that lands within float32 noise of a
rounding boundary (k + 0.5 steps) may round either way: onnxruntime computes a BatchNorm as
(x - mean) / sqrt(var + eps) * gamma + beta, vpuc's bn_fold as x * a + b, and with
cancellation the two differ by ~1e-3 of a step; an AveragePool's exact mean at -3.5 steps
rounds to -4 or -3 by the engine's float order. Each engine is then within 1 LSB at that
tensor, but later layers carry the step forward with their gains (a finer scale after a
Concat, a BatchNorm's gain), so the model's output can be 2-3 LSB apart. The end-to-end
bound cannot tell that from a wrong answer.

onnxruntime can: `explained_by_ties` runs onnxruntime on the QDQ model with every
QuantizeLinear's input exposed, finds the elements within TIE_STEPS of a rounding boundary,
and reruns onnxruntime with some of them moved to the other side of their boundary (an Add
of a graph input before the QuantizeLinear). If one such choice of roundings gives
onnxruntime's outputs within 1 LSB of vpuc's, vpuc's answer is the model computed with
legitimate roundings: explained, not wrong. The numbers still all come from onnxruntime;
the harness only chooses which side of a tie each near-tie element takes.

Up to ALL_SUBSETS near-tie elements, every choice is tried. Above that (an AveragePool whose
input and output share a scale puts one element in ten on a tie: the mean of 10 values at
k + 0.5 steps), a descent: starting from onnxruntime's own roundings, each near-tie element
in turn is flipped and kept flipped when that lowers the outputs' total excess over 1 LSB,
until a pass changes nothing or the excess is 0. A search, not a proof: it may miss a choice
that explains an answer (a failure to look at by hand), never invent one, since every answer
it accepts is still onnxruntime's on the model with some near-tie roundings flipped
(u55-256: a 10-row pool as a conv, amplified 6.7x by a grouped 1x1 conv, 47 ties).
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
from onnx import TensorProto, helper

# A value this close to k + 0.5 steps may round either way under another float order. The
# largest seen: 0.0011 of a step (vpu-plus-1146de235c, bn_fold against onnxruntime's BatchNorm).
TIE_STEPS = 2e-3
# A BatchNormalization between a DequantizeLinear and a QuantizeLinear is, in int8, a per-channel
# multiply-add: an int8 weight per channel (symmetric, s_w = |a| / 127: the one weight is exact)
# and an int32 bias at s_x * s_w, as any quantised conv's (ONNX QLinearConv, TFLite). The bias
# rounds to that step, so the int8 form may sit up to half of it from the float BatchNorm:
# 0.5 * s_x * |a| / 127 / s_y output steps on channel c, added to TIE_STEPS there
# (vpu-6e4c19e9a6: -0.0038 and +0.0024 steps, three elements 0.0013-0.0035 from a tie).
ALL_SUBSETS = 10  # up to this many near-tie elements every choice is tried; above it, the descent
DESCENT_TIES = 2000  # above this many, only none, each alone and all (each descent pass is one run per tie)
DESCENT_PASSES = 4
DESCENT_RUNS = 4000  # onnxruntime runs the descent may take in all (a wrong answer on a big model: it stops)
FLOAT_RTOL, FLOAT_ATOL = 1e-4, 1e-5  # a float output's tolerance in the descent's measure
FEED_PREFIX = "__tie_nudge_"


def float_tolerance(reference: np.ndarray) -> np.ndarray:
    """Each element's tolerance for an output computed in float: FLOAT_RTOL (|ref| + max |ref|)
    + FLOAT_ATOL (the fuzz harness judges float outputs by it too), in float64 so that a float32
    reference near its largest value keeps a finite tolerance (in float32 the sum overflowed to
    inf and let any value pass)."""
    magnitude = np.abs(np.asarray(reference, np.float64))
    finite = magnitude[np.isfinite(magnitude)]
    scale = float(finite.max()) if finite.size else 0.0
    return FLOAT_RTOL * (magnitude + scale) + FLOAT_ATOL




def _session(model: onnx.ModelProto):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _quantize_points(model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, np.ndarray]]:
    """Every QuantizeLinear with a constant scale, with that scale."""
    constants = _constants(model)
    return [
        (node, constants[node.input[1]].astype(np.float64))
        for node in model.graph.node
        if node.op_type == "QuantizeLinear" and node.input[1] in constants
    ]


def _constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Initializers, Constant nodes, and the DequantizeLinear of constants (onnxruntime's
    quantiser stores a BatchNormalization's gamma as int8 and its beta as int32 behind one:
    without them the BatchNorm window below was 0 for every model it quantised)."""
    found = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            found[node.output[0]] = onnx.numpy_helper.to_array(node.attribute[0].t)
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and all(n in found for n in node.input if n):
            found[node.output[0]] = _dequantized(node, [found[n] if n else None for n in node.input])
    return found


def _dequantized(node: onnx.NodeProto, inputs: list) -> np.ndarray:
    """(q - zero point) * scale in float64, a per-axis scale along the node's axis."""
    q, scale = inputs[0].astype(np.float64), inputs[1].astype(np.float64)
    zero = inputs[2].astype(np.float64) if len(inputs) > 2 and inputs[2] is not None else np.zeros_like(scale)
    if scale.size > 1 and q.ndim > 1:
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1) % q.ndim
        shape = [1] * q.ndim
        shape[axis] = scale.size
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return (q - zero) * scale


def _affine_window(model: onnx.ModelProto, quantize: onnx.NodeProto, rank: int) -> np.ndarray | float:
    """The bias resolution of the int8 multiply-add a BatchNormalization feeding `quantize`
    becomes, in output steps per channel (shape broadcastable to the tensor), else 0."""
    producers = {out: node for node in model.graph.node for out in node.output}
    bn = producers.get(quantize.input[0])
    if bn is None or bn.op_type != "BatchNormalization" or len(bn.input) < 5:
        return 0.0
    dq = producers.get(bn.input[0])
    constants = _constants(model)
    names = [*bn.input[1:5], quantize.input[1]]
    if (
        dq is None
        or dq.op_type != "DequantizeLinear"
        or any(n not in constants for n in [dq.input[1], *names])
    ):
        return 0.0
    x_scale = constants[dq.input[1]].astype(np.float64)
    if x_scale.size != 1:
        return 0.0
    gamma, _, _, var, y_scale = (constants[n].astype(np.float64) for n in names)
    if y_scale.size != 1:
        return 0.0
    eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
    a = np.abs(gamma) / np.sqrt(var + eps)
    half_bias_step = 0.5 * float(x_scale.reshape(())) * a / 127 / float(y_scale.reshape(()))
    shape = [1] * rank
    shape[1 % rank] = a.size
    return half_bias_step.reshape(shape)


def _broadcast_scale(node: onnx.NodeProto, scale: np.ndarray, rank: int) -> np.ndarray:
    if scale.ndim == 0 or scale.size == 1:
        return scale.reshape(())
    axis = next((a.i for a in node.attribute if a.name == "axis"), 1) % rank
    shape = [1] * rank
    shape[axis] = scale.size
    return scale.reshape(shape)


def near_ties(model: onnx.ModelProto, inputs: dict) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(QuantizeLinear input, float values, nudge that moves each near-tie element to the other
    side of its boundary; 0 elsewhere) for every QuantizeLinear with a near-tie element."""
    points = _quantize_points(model)
    if not points:
        return []
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    names = [node.input[0] for node, _ in points]
    for name in dict.fromkeys(names):
        if name not in known and name not in {i.name for i in probe.graph.input}:
            probe.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    session = _session(probe)
    exposed = {o.name for o in session.get_outputs()}
    wanted = [n for n in dict.fromkeys(names) if n in exposed]
    values = dict(zip(wanted, session.run(wanted, inputs), strict=True))
    values.update({k: v for k, v in inputs.items() if k in names})
    found = []
    for node, scale in points:
        x = values.get(node.input[0])
        if x is None or x.dtype != np.float32:
            continue
        step = _broadcast_scale(node, scale, x.ndim)
        v = x.astype(np.float64) / step
        boundary = np.floor(v) + 0.5
        close = np.abs(v - boundary) < TIE_STEPS + _affine_window(model, node, x.ndim)
        if not close.any():
            continue
        # onnxruntime's own rounding (float32 division, half to even), then a target just
        # across the boundary from it: the other rounding for certain
        rounded = np.rint(x / step.astype(np.float32)).astype(np.float64)
        target = np.where(rounded > boundary, boundary - TIE_STEPS, boundary + TIE_STEPS)
        nudge = np.where(close, (target - v) * step, 0.0).astype(np.float32)
        found.append((node.input[0], x, nudge))
    return found


def _nudged_model(model: onnx.ModelProto, ties: list) -> onnx.ModelProto:
    """The model with Add(x, graph input) in front of every QuantizeLinear of a tied tensor."""
    nudged = onnx.ModelProto()
    nudged.CopyFrom(model)
    for index, (name, x, _) in enumerate(ties):
        feed, moved = f"{FEED_PREFIX}{index}", f"{name}__tie_nudged"
        nudged.graph.input.append(helper.make_tensor_value_info(feed, TensorProto.FLOAT, list(x.shape)))
        for node in nudged.graph.node:
            if node.op_type == "QuantizeLinear" and node.input[0] == name:
                node.input[0] = moved
        nudged.graph.node.append(helper.make_node("Add", [name, feed], [moved], name=f"tie_nudge_{index}"))
    # the Adds were appended last: restore a topological order for onnxruntime
    return _sorted(nudged)


def _sorted(model: onnx.ModelProto) -> onnx.ModelProto:
    available = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer} | {""}
    pending, ordered = list(model.graph.node), []
    while pending:
        ready = [n for n in pending if all(i in available for i in n.input)]
        if not ready:
            raise ValueError("the nudged graph has a cycle")
        for node in ready:
            ordered.append(node)
            available.update(node.output)
        pending = [n for n in pending if n not in ready]
    del model.graph.node[:]
    model.graph.node.extend(ordered)
    return model


def _choices(count: int):
    """Subsets of near-tie elements to flip, as boolean masks over their flat list."""
    if count <= ALL_SUBSETS:
        yield from (np.array(bits, bool) for bits in itertools.product((False, True), repeat=count))
        return
    yield np.zeros(count, bool)
    yield np.ones(count, bool)
    for i in range(count):
        mask = np.zeros(count, bool)
        mask[i] = True
        yield mask


def explained_by_ties(model: onnx.ModelProto, inputs: dict, ours: dict, within, lsbs=None) -> int | None:
    """How many near-tie roundings, flipped, make onnxruntime agree with `ours` (by `within`,
    the harness's own 1-LSB comparison: None when it agrees), or None when no choice does.
    `lsbs` ({output: 1 LSB, None for a float output}) lets the descent above ALL_SUBSETS
    measure how far an answer is; without it only the fixed choices are tried."""
    ties = near_ties(model, inputs)
    if not ties:
        return None
    session = _session(_nudged_model(model, ties))
    outputs = [o.name for o in model.graph.output]
    sizes = [int(np.count_nonzero(nudge)) for _, _, nudge in ties]

    def run(mask: np.ndarray) -> dict:
        feeds, start = dict(inputs), 0
        for index, ((_, _, nudge), size) in enumerate(zip(ties, sizes, strict=True)):
            flat = np.zeros(nudge.size, np.float32)
            where = np.flatnonzero(nudge)
            chosen = where[mask[start : start + size]]
            flat[chosen] = nudge.ravel()[chosen]
            feeds[f"{FEED_PREFIX}{index}"] = flat.reshape(nudge.shape)
            start += size
        return dict(zip(outputs, session.run(outputs, feeds), strict=True))

    count = sum(sizes)
    for mask in _choices(count):
        if within(ours, run(mask)) is None:
            return int(mask.sum())
    if lsbs is None or count <= ALL_SUBSETS or count > DESCENT_TIES:
        return None
    # Greedy from the first tie can stall where an upstream flip lowers the excess of a few
    # elements and blocks the downstream flips that explain them all (vpu-a5abb9253f: three
    # ties at a BatchNorm's output behind nine at its conv's): then from the last tie back.
    for order in (range(count), range(count - 1, -1, -1)):
        mask = _descent(count, lambda m: _excess(ours, run(m), lsbs), order)
        if within(ours, run(mask)) is None:
            return int(mask.sum())
    return None


def _excess(ours: dict, reference: dict, lsbs: dict) -> float:
    """The outputs' total distance past their tolerance, in tolerances: 1 LSB for an output in
    `lsbs` with a step; for one in `lsbs` with None (computed in float after the last
    DequantizeLinear: a tie upstream moves it by a step's worth of its function), the fuzz
    harness's float tolerance, 1e-4 (|ref| + max |ref|) + 1e-5; outputs not in `lsbs` are
    not counted."""
    total = 0.0
    for name, expected in reference.items():
        got = ours.get(name)
        if name not in lsbs or got is None or got.shape != expected.shape:
            continue
        ref, lsb = expected.astype(np.float64), lsbs[name]
        tolerance = float_tolerance(ref) if lsb is None else lsb
        off = np.abs(got.astype(np.float64) - ref) / tolerance
        total += float(np.maximum(off - 1.0, 0.0).sum())
    return total


def _descent(count: int, excess, order) -> np.ndarray:
    """Flips that lower `excess`, one near-tie element at a time in `order`, kept when they help."""
    mask = np.zeros(count, bool)
    best, runs = excess(mask), 1
    for _ in range(DESCENT_PASSES):
        changed = False
        for i in order:
            if best == 0.0 or runs >= DESCENT_RUNS:
                return mask
            runs += 1
            mask[i] = not mask[i]
            trial = excess(mask)
            if trial < best:
                best, changed = trial, True
            else:
                mask[i] = not mask[i]
        if not changed:
            break
    return mask
