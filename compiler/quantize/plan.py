"""What to quantise: the VPU composites the partitioner chose, with the role of each binding.

    Placement (partition_for_vpu on the float module)   ->   QuantPlan

The quantiser quantises exactly the composites of the final placement, so it and the
partitioner cannot disagree: an op on the VPU is int8 in, int8 out; an op on the CPU stays
float. For each composite the plan names

    core        the op doing the work (conv2d, matmul, add, max_pool2d, ...)
    bias        the bias add after a conv2d/dense core, if the composite took one
    activation  the relu/clip fused after the core, if any: it bounds the output range
    root        the last binding: its output is what the composite's quantize reads
    inputs      the activation tensors it reads from outside (bindings or model inputs)

and the tensors to calibrate: every input not produced by another composite, and every
root, except the roots of ops that move values without computing new ones (max pooling,
reshape), which keep their input's parameters exactly as onnxruntime's quantiser does.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import relax

from vpuc.compiler import compat
from vpuc.compiler.partition import Placement
from vpuc.compiler.partition.opview import kind_of
from vpuc.compiler.quantize.bindings import BindingView

MAC_KINDS = ("conv2d", "dense")
PARAMS_PASS_THROUGH = ("max_pool2d", "reshape")  # output parameters = input parameters
ACTIVATION_OPS = ("relax.nn.relu", "relax.clip")


@dataclass(frozen=True)
class CompositePlan:
    """One VPU composite of the float module, by binding name."""

    name: str  # e.g. "vpu.conv2d_bias_act"
    subgraph: int
    kind: str  # the core's VPU op kind
    members: tuple[str, ...]  # in binding order
    core: str
    bias: str | None
    activation: str | None
    root: str
    inputs: tuple[str, ...]
    output_bounds: tuple[float, float]  # what the activation (or a relu/clip core) allows

    @property
    def keeps_input_params(self) -> bool:
        return self.kind in PARAMS_PASS_THROUGH and len(self.inputs) == 1


@dataclass(frozen=True)
class QuantPlan:
    composites: tuple[CompositePlan, ...]

    @property
    def member_of(self) -> dict[str, CompositePlan]:
        return {name: c for c in self.composites for name in c.members}

    @property
    def root_of(self) -> dict[str, CompositePlan]:
        return {c.root: c for c in self.composites}

    def tensors_to_calibrate(self) -> list[str]:
        """Composite inputs that no composite produces, and roots with their own range."""
        roots = self.root_of
        names: dict[str, None] = {}
        for composite in self.composites:
            for tensor in composite.inputs:
                if tensor not in roots:
                    names[tensor] = None
            if not composite.keeps_input_params:
                names[composite.root] = None
        return list(names)


def plan_quantization(func: relax.Function, placement: Placement) -> QuantPlan:
    """The plan for `func` (main of the float module the placement was computed on)."""
    view = BindingView.of(func)
    plans = [_composite_plan(view, c.name, c.subgraph, c.members) for c in placement.composites]
    return QuantPlan(tuple(sorted(plans, key=lambda p: view.order[p.root])))


def _composite_plan(view: BindingView, name: str, subgraph: int, members) -> CompositePlan:
    ordered = tuple(sorted(members, key=view.order.__getitem__))
    core = ordered[0]
    bias = next((m for m in ordered[1:] if _is_bias_add(view, m, core)), None)
    activation = next((m for m in ordered[1:] if view.op(m) in ACTIVATION_OPS), None)
    inputs = _external_inputs(view, ordered)
    kind = kind_of(view.values[core]) or "unknown"
    bounds = _bounds(view, activation or (core if view.op(core) in ACTIVATION_OPS else None))
    return CompositePlan(name, subgraph, kind, ordered, core, bias, activation, ordered[-1], inputs, bounds)


def _is_bias_add(view: BindingView, name: str, core: str) -> bool:
    value = view.values[name]
    if view.op(name) != "relax.add":
        return False
    names = [a.name for a in value.args if isinstance(a, relax.Var)]
    constants = [a for a in value.args if compat.is_constant(a)]
    return names == [core] and len(constants) == 1


def _external_inputs(view: BindingView, members: tuple[str, ...]) -> tuple[str, ...]:
    inside = set(members)
    found: dict[str, None] = {}
    for member in members:
        for arg in _tensor_args(view.values[member]):
            if isinstance(arg, relax.Var) and arg.name not in inside:
                found[arg.name] = None
    return tuple(found)


def _tensor_args(value: relax.Expr) -> list[relax.Expr]:
    """A call's tensor arguments, tuple fields (concat) included."""
    args = []
    for arg in getattr(value, "args", []):
        args.extend(arg.fields if isinstance(arg, relax.Tuple) else [arg])
    return [a for a in args if isinstance(a.ty, relax.TensorType)]


def _bounds(view: BindingView, activation: str | None) -> tuple[float, float]:
    if activation is None:
        return (-float("inf"), float("inf"))
    value = view.values[activation]
    if view.op(activation) == "relax.nn.relu":
        return (0.0, float("inf"))
    low, high = compat.scalar_value(value.args[1]), compat.scalar_value(value.args[2])
    return (
        low if low is not None else -float("inf"),
        high if high is not None else float("inf"),
    )
