"""Support checks: one small function per constraint, whose docstring is the reason a user
reads when an op falls back to the CPU.

A target's `[ops.<kind>]` table switches checks on by key, with their limits:

    [ops.conv2d]
    kernel = [1, 7]        # -> kernel_in_range: "Kernel height and width must be ..."
    stride = [1, 4]

Checks under GENERIC apply to every kind. A check returns None when the op passes, or a
short description of what it found ("got 9x9"); `Violation.reason` is then the docstring
formatted with the limits, plus that finding. docs/SUPPORTED_OPS.md is generated from these
docstrings (targets/docgen.py); a test fails when it is stale.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vpuc.targets.model import Hardware
from vpuc.targets.ops import OpView

QUANTIZABLE_DTYPES = ("int8", "float32")


@dataclass(frozen=True)
class Constraint:
    """A registered check: `key` is its TOML key (None for generic), `param` its value type."""

    key: str | None
    param: str  # "range" (two ints lo <= hi), "bool" or "none"
    check: Callable[[OpView, Any, Hardware], str | None]

    @property
    def template(self) -> str:
        return " ".join((self.check.__doc__ or self.check.__name__).split())

    def describe(self, value: Any, hardware: Hardware | None = None) -> str:
        """The reason text with this target's limits filled in."""
        return self.template.format(**_fields(value, hardware))


@dataclass(frozen=True)
class Violation:
    """One failed check on one op."""

    constraint: Constraint
    finding: str
    reason: str


def _fields(value: Any, hardware: Hardware | None) -> dict[str, Any]:
    fields: dict[str, Any] = {"value": value}
    if isinstance(value, list | tuple) and len(value) == 2:
        fields["lo"], fields["hi"] = value
    if hardware is not None:
        fields.update(sram_kib=hardware.sram_bytes // 1024, lut_entries=hardware.lut_entries)
    return fields


# ---- generic checks: every kind -------------------------------------------------------


def static_shapes(op: OpView, _value, _hw) -> str | None:
    """Shapes must be static (known at compile time)"""
    return None if op.static else "a dynamic dim"


def int8_tensors(op: OpView, _value, _hw) -> str | None:
    """Tensors must be int8, or float32 that the quantiser turns into int8"""
    dtypes = {dtype for _, dtype in (*op.inputs, op.output)}
    bad = sorted(d for d in dtypes if d not in QUANTIZABLE_DTYPES)
    return f"got {', '.join(bad)}" if bad else None


GENERIC = (Constraint(None, "none", static_shapes), Constraint(None, "none", int8_tensors))


# ---- keyed checks: switched on and bounded by the target's [ops.<kind>] table ---------


def _pair(values) -> tuple[int, int]:
    values = tuple(values)
    return (values[0], values[1]) if len(values) >= 2 else (values[0], values[0])


def _out_of(value, pair) -> bool:
    lo, hi = value
    return not all(lo <= v <= hi for v in pair)


def kernel_in_range(op, limits, _hw):
    """Kernel height and width must be between {lo} and {hi}"""
    kernel = _pair(op.attrs.get("kernel", (1, 1)))
    return f"got {kernel[0]}x{kernel[1]}" if _out_of(limits, kernel) else None


def stride_in_range(op, limits, _hw):
    """Stride must be between {lo} and {hi} in both H and W"""
    stride = _pair(op.attrs.get("strides", (1, 1)))
    return f"got {stride[0]}x{stride[1]}" if _out_of(limits, stride) else None


def dilation_in_range(op, limits, _hw):
    """Dilation must be between {lo} and {hi} in both H and W"""
    dilation = _pair(op.attrs.get("dilation", (1, 1)))
    return f"got {dilation[0]}x{dilation[1]}" if _out_of(limits, dilation) else None


def padding_in_range(op, limits, _hw):
    """Padding must be between {lo} and {hi} on every side"""
    padding = tuple(op.attrs.get("padding", (0, 0, 0, 0)))
    return f"got {list(padding)}" if _out_of(limits, padding) else None


def pool_in_range(op, limits, _hw):
    """Pooling window must be between {lo} and {hi} in both H and W"""
    pool = _pair(op.attrs.get("pool", (1, 1)))
    return f"got {pool[0]}x{pool[1]}" if _out_of(limits, pool) else None


def channels_in_range(op, limits, _hw):
    """Input and output channels must be between {lo} and {hi}"""
    channels = (op.attrs.get("in_channels", 1), op.attrs.get("out_channels", 1))
    return f"got {channels[0]} in, {channels[1]} out" if _out_of(limits, channels) else None


def weights_constant(op, required, _hw):
    """The weights (second input) must be a constant, not an activation"""
    if not required or len(op.constant_inputs) < 2:
        return None
    return None if op.constant_inputs[1] else "the second input is computed at run time"


def relu6_only(op, required, _hw):
    """Clip must be Relu6-style: constant bounds with min 0"""
    if not required:
        return None
    low, high = op.attrs.get("min"), op.attrs.get("max")
    if low is None or high is None:
        return "bounds are not constants"
    return None if low == 0 else f"got [{low:g}, {high:g}]"


def same_shape_inputs(op, required, _hw):
    """Both inputs must have the same shape (no broadcasting)"""
    if not required or len(op.inputs) < 2:
        return None
    shapes = [shape for shape, _ in op.inputs]
    return None if len(set(shapes)) == 1 else f"got {' and '.join(map(str, map(list, shapes)))}"


def channel_broadcast(op, required, _hw):
    """The second input must have the first's shape, or broadcast along channels only
    ([1, C, 1, 1] against [N, C, H, W]) or be a scalar"""
    if not required or len(op.inputs) < 2:
        return None
    first, second = op.input_shape(0), op.input_shape(1)
    if first == second or all(d == 1 for d in second):
        return None
    per_channel = len(second) == len(first) == 4 and second[1] == first[1] and second[2:] == (1, 1)
    return None if per_channel else f"got {list(first)} and {list(second)}"


def spatial_axes_only(op, required, _hw):
    """The mean must be over H and W only (axes 2 and 3 of an NCHW tensor)"""
    if not required:
        return None
    axes = tuple(sorted(a % 4 for a in op.attrs.get("axes", ())))
    return None if axes == (2, 3) and len(op.input_shape()) == 4 else f"got axes {list(axes)}"


def channel_axis_only(op, required, _hw):
    """Concatenation must be along the channel axis"""
    if not required:
        return None
    rank = len(op.output_shape)
    axis = op.attrs.get("axis", 1) % max(rank, 1)
    return None if axis == 1 or (rank == 2 and axis == 1) else f"got axis {axis} of rank {rank}"


def innermost_axis(op, required, _hw):
    """Softmax must be over the innermost axis of the tensor as the VPU stores it (the last
    axis; channels of an NHWC tensor)"""
    if not required:
        return None
    return None if op.attrs.get("innermost", True) else f"got axis {op.attrs.get('axis')}"


def activations_not_both(op, required, _hw):
    """At least one input must be an activation (a matrix product of two constants folds away)"""
    if not required:
        return None
    return "both inputs are constants" if all(op.constant_inputs) else None


def fits_sram(op, required, hw):
    """The layer must fit in SRAM ({sram_kib} KiB) as the VPU code generator tiles it"""
    # Asked of the code generator's layer planner by the partitioner
    # (compiler/lower/codegen/oracle.py, DESIGN.md contract 6): it alone knows the tilings.
    # This entry carries the key and the message; the check itself is never run here.
    return None


KEYED: dict[str, Constraint] = {
    c.key: c
    for c in (
        Constraint("kernel", "range", kernel_in_range),
        Constraint("stride", "range", stride_in_range),
        Constraint("dilation", "range", dilation_in_range),
        Constraint("padding", "range", padding_in_range),
        Constraint("pool", "range", pool_in_range),
        Constraint("channels", "range", channels_in_range),
        Constraint("constant_weights", "bool", weights_constant),
        Constraint("relu6_only", "bool", relu6_only),
        Constraint("same_shape", "bool", same_shape_inputs),
        Constraint("channel_broadcast", "bool", channel_broadcast),
        Constraint("spatial_axes_only", "bool", spatial_axes_only),
        Constraint("channel_axis_only", "bool", channel_axis_only),
        Constraint("two_activations", "bool", activations_not_both),
        Constraint("innermost_axis", "bool", innermost_axis),
        Constraint("fits_sram", "bool", fits_sram),
    )
}


def check_op(op: OpView, limits: dict[str, Any], hardware: Hardware | None) -> list[Violation]:
    """Every violated constraint of `op` under its kind's `limits` (the [ops.<kind>] table)."""
    violations = []
    checks = [(c, None) for c in GENERIC] + [(KEYED[k], v) for k, v in limits.items() if k in KEYED]
    for constraint, value in checks:
        finding = constraint.check(op, value, hardware)
        if finding is not None:
            reason = f"{constraint.describe(value, hardware)} ({finding})"
            violations.append(Violation(constraint, finding, reason))
    return violations
