"""The layer planner as the one oracle: does this layer fit the VPU, and what does it cost?

    answer(view, target) -> LayerAnswer(reason, cycles, sram_bytes)
    least(view, target)  -> cycles answer's are at least, without planning the layer
    most(view, target)   -> cycles answer's are at most, planning only a conv's own tiling

The partitioner asks this before it fixes a partition (its SRAM fit check and the VPU side
of its profitability rule), and so does the quantiser's partition of the float module: the
same code generator that will lower the layer plans it, so the question has one answerer
(DESIGN.md, contract 6). The layer is planned alone, as a one-layer subgraph whose input and
output live in DRAM: what it costs when nothing around it is resident, which a subgraph's
residency can only improve.

The partitioner sees an op as an OpView (shapes, attributes, no values): the op is built
from it with zero weights and unit requantisation, which decide nothing the planner
chooses (tiles, buffers and cycles depend on shapes alone). An OpView's 4-D shapes are
logical NCHW; the code generator's are NHWC, as the VPU stores them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from vpuc.compiler.lower import ops as vops
from vpuc.compiler.lower.codegen import prefetch
from vpuc.compiler.lower.codegen.emit import ATTEMPTS, lower_subgraph
from vpuc.compiler.lower.codegen.layer_bound import least_cycles, most_cycles
from vpuc.compiler.lower.codegen.layer_plan import min_working_set
from vpuc.compiler.lower.codegen.residency import place
from vpuc.compiler.lower.codegen.tiling import Context
from vpuc.compiler.lower.errors import LowerError, SramError
from vpuc.targets import Target
from vpuc.targets.ops import OpView

UNIT = vops.QParams(1.0, 0)
LUT_KINDS = ("sigmoid", "tanh", "leaky_relu", "gelu", "silu")


@dataclass(frozen=True)
class LayerAnswer:
    """The planner's answer for one layer: `reason` is None when it fits, else why not;
    `cycles` the estimated cycles of the layer alone (0 when it does not fit)."""

    reason: str | None
    cycles: int = 0
    sram_bytes: int = 0
    sram_limited: bool = False  # it does not fit because no tiling fits SRAM

    @property
    def fits(self) -> bool:
        return self.reason is None


def answer(view: OpView, target: Target) -> LayerAnswer:
    """Plan `view` as the code generator would lower it alone: tiled, emitted, estimated
    (cached per op shape and target)."""
    key = ("answer", target_fingerprint(target), _switches(), _key(view))
    if key not in _ANSWERS:
        _ANSWERS[key] = _answer(view, target)
    return _ANSWERS[key]


def fit(view: OpView, target: Target) -> LayerAnswer:
    """Whether the planner can tile `view` into SRAM at all: its smallest working set (one
    output row, the narrowest channel chunks) against what the target has, as the
    code generator's residency asks it before it plans; no tiling search (cached).
    `sram_bytes` is that smallest working set; `cycles` is not computed (0)."""
    key = ("fit", target_fingerprint(target), _switches(), _key(view))
    if key not in _ANSWERS:
        _ANSWERS[key] = _fit(view, target)
    return _ANSWERS[key]


def least(view: OpView, target: Target) -> int:
    """A lower bound of answer(view, target).cycles from the shapes of the tilings the
    planner may choose, none of them built, and of its compulsory transfers
    (layer_bound.py; cached): the
    partitioner's profitability rule sends a subgraph to the CPU on it when even this
    costs more than the subgraph saves. 0 where the planner has nothing to plan or no tiling
    fits (the answer's cycles are 0 then too)."""
    key = ("least", target_fingerprint(target), _switches(), _key(view))
    if key not in _ANSWERS:
        _ANSWERS[key] = _least(view, target)
    return _ANSWERS[key]


def most(view: OpView, target: Target) -> int | None:
    """An upper bound of answer(view, target).cycles, or None where there is none as cheap
    (layer_bound.most_cycles: a conv's or dense layer's own tiling planned, its im2cols
    not; cached): the partitioner's edge rule keeps a layer on the VPU on it when even this
    costs less than moving the layer. The exact cycles where the answer is known already."""
    known = _ANSWERS.get(("answer", target_fingerprint(target), _switches(), _key(view)))
    if known is not None:
        return known.cycles
    key = ("most", target_fingerprint(target), _switches(), _key(view))
    if key not in _ANSWERS:
        _ANSWERS[key] = _most(view, target)
    return _ANSWERS[key]


_ANSWERS: dict[tuple, LayerAnswer | int | None] = {}
_FINGERPRINTS: dict[int, tuple[Target, str]] = {}


def target_fingerprint(target: Target) -> str:
    """The target's figures as one string (a Target holds dicts, so it has no hash)."""
    known = _FINGERPRINTS.get(id(target))
    if known is None or known[0] is not target:
        known = (target, json.dumps(target.to_json(), sort_keys=True, default=str))
        _FINGERPRINTS[id(target)] = known
    return known[1]


def _switches() -> tuple:
    """The code generator's switches now (switches.py): a patched switch changes what a
    layer lowers to, so an answer cached under another value is not this one."""
    from vpuc.compiler.lower.codegen.switches import switches  # it imports emit, as this does

    return switches()


def _key(view: OpView) -> tuple:
    """What the planner's answer depends on: the op's shapes and attributes, not its name
    (the same layer in the float module and in the QDQ module gets one answer)."""
    attrs = tuple(sorted((k, _hashable(v)) for k, v in view.attrs.items()))
    return (view.kind, view.inputs, view.output, view.constant_inputs, attrs, view.activation)


def _hashable(value):
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    return value


def _answer(view: OpView, target: Target) -> LayerAnswer:
    try:
        subgraph = one_layer_subgraph(view)
    except _NotPlannable:
        return LayerAnswer(None)  # nothing to plan (a reshape): it moves no data
    try:
        program = lower_subgraph(subgraph, target)
    except LowerError as exc:
        return LayerAnswer(str(exc), sram_limited=isinstance(exc, SramError))
    return LayerAnswer(None, int(program.estimate["cycles"]), int(program.estimate["sram_peak_bytes"]))


def _fit(view: OpView, target: Target) -> LayerAnswer:
    try:
        subgraph = one_layer_subgraph(view)
    except _NotPlannable:
        return LayerAnswer(None)
    op = subgraph.ops[0]
    try:
        placement = place(subgraph, target.hardware.sram_bytes, lambda o, p: min_working_set(o, p, target))
        need = min_working_set(op, placement, target)
    except LowerError as exc:
        return LayerAnswer(str(exc), sram_limited=isinstance(exc, SramError))
    return LayerAnswer(None, 0, int(need))


def _least(view: OpView, target: Target) -> int:
    """The layer placed and given its SRAM as lower_subgraph's first attempt gives them."""
    try:
        subgraph = one_layer_subgraph(view)
    except _NotPlannable:
        return 0
    try:
        return least_cycles(subgraph.ops[0], _first_context(subgraph, target))
    except LowerError:
        return 0


def _most(view: OpView, target: Target) -> int | None:
    """The layer placed and given its SRAM as lower_subgraph's first attempt gives them."""
    try:
        subgraph = one_layer_subgraph(view)
    except _NotPlannable:
        return 0  # nothing to plan: answer's cycles are 0
    try:
        return most_cycles(subgraph.ops[0], _first_context(subgraph, target))
    except LowerError:
        return None


def _first_context(subgraph: vops.Subgraph, target: Target) -> Context:
    """The context emit._plan_layers plans a one-layer subgraph's layer in first."""
    hw = target.hardware
    working_set = lambda o, p: min_working_set(o, p, target)  # noqa: E731
    placement = place(subgraph, hw.sram_bytes, working_set, hw.feature_maps_in == "sram")
    budget = int((hw.sram_bytes - placement.resident_bytes_at(0)) * ATTEMPTS[0][0])
    return Context(target, placement, 0, budget, 0.0, (), prefetch.PREFETCH_ROLES)


class _NotPlannable(Exception):
    """An op the planner has nothing to plan for."""


def one_layer_subgraph(view: OpView) -> vops.Subgraph:
    """A subgraph of the one op `view` describes, its activations in DRAM and its constant
    operands (beside a MAC op's own weights) in the weight blob."""
    out_shape = _nhwc(view.output_shape)
    tensors, constants, inputs, data = {}, {}, [], []
    for index in range(len(view.inputs)):
        if view.kind in ("conv2d", "dense") and index >= 1:
            continue  # weights and bias are the op's own constants
        name, shape = f"in{index}", _nhwc(view.input_shape(index))
        tensors[name] = vops.TensorSpec(name, shape, UNIT)
        inputs.append(name)
        if _is_constant(view, index) and view.kind != "matmul":
            constants[name] = np.zeros(shape, dtype=np.int8)
        else:
            data.append(name)
    tensors["out"] = vops.TensorSpec("out", out_shape, UNIT)
    op = _op(view, inputs, out_shape)
    return vops.Subgraph(f"plan_{view.kind}", tensors, [op], data, ["out"], constants=constants)


def _is_constant(view: OpView, index: int) -> bool:
    flags = view.constant_inputs
    return bool(flags[index]) if index < len(flags) else False


def _nhwc(shape: tuple[int, ...]) -> tuple[int, ...]:
    if len(shape) == 4:
        n, c, h, w = shape
        return (n, h, w, c)
    return tuple(shape)


def _common(view: OpView, inputs: list[str]) -> dict:
    return {
        "name": view.kind,  # answers are shared by every op of one shape: no op's own name
        "nodes": (view.kind,),
        "inputs": tuple(inputs),
        "output": "out",
        "in_q": tuple(UNIT for _ in inputs),
        "out_q": UNIT,
    }


def _requant(channels: int) -> vops.Requantize:
    return vops.Requantize(np.ones(channels, dtype=np.float32), 0)


def _op(view: OpView, inputs: list[str], out_shape) -> vops.Op:
    kind, attrs, common = view.kind, view.attrs, _common(view, inputs)
    if kind == "conv2d":
        groups = int(attrs.get("groups", 1))
        kh, kw = attrs.get("kernel", (1, 1))
        out_c, in_c = int(out_shape[-1]), int(view.input_shape(0)[1])
        return vops.Conv(
            **common,
            weights=np.zeros((out_c, kh, kw, max(in_c // groups, 1)), dtype=np.int8),
            bias=np.zeros(out_c, dtype=np.int32),
            requant=_requant(out_c),
            strides=tuple(attrs.get("strides", (1, 1))),
            padding=tuple(attrs.get("padding", (0, 0, 0, 0))),
            dilation=tuple(attrs.get("dilation", (1, 1))),
            groups=groups,
        )
    if kind == "dense":
        k, n = int(view.input_shape(0)[-1]), int(out_shape[-1])
        return vops.Dense(
            **common,
            weights=np.zeros((n, k), dtype=np.int8),
            bias=np.zeros(n, dtype=np.int32),
            requant=_requant(n),
        )
    if kind == "matmul":
        return vops.Matmul(**common, requant=_requant(1))
    if kind in ("max_pool2d", "avg_pool2d"):
        return vops.Pool(
            **common,
            mode="max" if kind == "max_pool2d" else "avg",
            kernel=tuple(attrs.get("pool", (1, 1))),
            strides=tuple(attrs.get("strides", (1, 1))),
            padding=tuple(attrs.get("padding", (0, 0, 0, 0))),
        )
    if kind == "global_avg_pool":
        shape = view.input_shape(0)
        return vops.Pool(**common, mode="avg", kernel=(int(shape[2]), int(shape[3])))
    if kind in ("relu", "clip"):
        return vops.Rescale(**common)
    if kind == "add":
        return vops.Add(**common)
    if kind == "mul":
        broadcast = len(view.inputs) > 1 and view.input_shape(1) != view.input_shape(0)
        return vops.Mul(**common, broadcast=broadcast)
    if kind in LUT_KINDS:
        return vops.Lut(**common, table=np.zeros(256, dtype=np.int8), function=kind)
    if kind == "softmax":
        return vops.Softmax(**common, table=np.zeros(256, dtype=np.int32))
    if kind == "concat":
        return vops.Concat(**common)
    raise _NotPlannable(kind)
