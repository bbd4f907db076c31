"""Bias absorption: move the part of a relu layer's output that is always there into the
next layer's bias, so the quantised range of that output starts where its values do.

    y = relu(A(x) + b_A);  B(y) + b_B          (A conv/dense; B a 1x1 unpadded conv or dense)
 => y' = relu(A(x) + b_A - c);  B(y') + (b_B + W_B c)      c_i = max(0, min over samples y_i)

    relu(z - c) + c = relu(z) wherever z >= c, so B(y') + W_B c = B(y) on every input where
    each channel's pre-activation stays above its calibration minimum: on every calibration
    sample, by construction, and not necessarily elsewhere. The accuracy report compares
    with the unchanged float model, so any difference on the held-out samples shows there.

Nagel et al. (2019) take c from BatchNorm statistics (beta - 3 gamma); after BatchNorm
folding vpuc has the calibration samples instead. A channel whose activation reaches 0
gets c = 0 (nothing moves). B must be a 1x1 conv without padding or a dense: with zero
padding, a constant input channel does not give a constant contribution at the borders.
Only when y has no other reader.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm

from vpuc.compiler.quantize.bindings import BindingView, replace_constants
from vpuc.compiler.quantize.layouts import bias_channels, output_channel_axis
from vpuc.compiler.quantize.measurement.derived import Derived
from vpuc.compiler.quantize.plan import MAC_KINDS, QuantPlan


@dataclass(frozen=True)
class Candidate:
    relu: str  # A's relu output y (A's root)
    axis: int  # its channel axis
    first_bias: str  # A's bias add
    first_kind: str
    second_core: str  # B's conv2d/matmul
    second_bias: str  # B's bias add
    second_kind: str


@dataclass
class Absorbed:
    mod: tvm.IRModule
    derived: dict[str, Derived] = field(default_factory=dict)
    shifts: dict[str, np.ndarray] = field(default_factory=dict)

    def summary(self) -> dict:
        return {
            "layers": len(self.shifts),
            "channels_shifted": int(sum((c > 0).sum() for c in self.shifts.values())),
        }


def candidates(func, plan: QuantPlan) -> list[Candidate]:
    view = BindingView.of(func)
    by_input = {c.inputs[0]: c for c in plan.composites if c.kind in MAC_KINDS and c.inputs}
    found = []
    for first in plan.composites:
        if first.kind not in MAC_KINDS or first.bias is None or first.activation is None:
            continue
        if view.op(first.activation) != "relax.nn.relu" or len(view.readers.get(first.root, [])) != 1:
            continue
        second = by_input.get(first.root)
        if second is None or second.bias is None or not _pointwise(view, second):
            continue
        axis = output_channel_axis(view.values[first.core], first.kind)
        found.append(
            Candidate(first.root, axis, first.bias, first.kind, second.core, second.bias, second.kind)
        )
    return found


def _pointwise(view: BindingView, composite) -> bool:
    """A dense, or a 1x1 conv without padding or groups."""
    if composite.kind == "dense":
        return True
    call = view.values[composite.core]
    weight = view.constant(call.args[1])
    layout = str(call.attrs.kernel_layout)
    spatial = (weight.shape[layout.index("H")], weight.shape[layout.index("W")])
    padding = [int(p) for p in call.attrs.padding]
    return spatial == (1, 1) and not any(padding) and int(call.attrs.groups) == 1


def channel_min(value: np.ndarray, axis: int, running: np.ndarray | None) -> np.ndarray:
    axis = axis % value.ndim
    low = value.min(axis=tuple(i for i in range(value.ndim) if i != axis)).astype(np.float64)
    return low if running is None else np.minimum(running, low)


def absorb(mod: tvm.IRModule, found: list[Candidate], minimum: dict[str, np.ndarray]) -> Absorbed:
    view = BindingView.of(mod["main"])
    new: dict[str, dict[int, np.ndarray]] = {}
    result = Absorbed(mod)
    for candidate in found:
        shift = np.maximum(minimum[candidate.relu], 0.0)
        if not (shift > 0).any():
            continue
        first_bias, restore_first = _bias(view, candidate.first_bias, candidate.first_kind)
        second_bias, restore_second = _bias(view, candidate.second_bias, candidate.second_kind)
        contribution = _through(view, candidate.second_core, candidate.second_kind, shift)
        new[candidate.first_bias] = {
            _constant_index(view, candidate.first_bias): restore_first(first_bias - shift)
        }
        new[candidate.second_bias] = {
            _constant_index(view, candidate.second_bias): restore_second(second_bias + contribution)
        }
        shape = [1] * len(view.tensor_type(candidate.relu)[0])
        shape[candidate.axis] = -1
        result.derived[candidate.relu] = Derived(
            candidate.relu, relu_shift=shift.astype(np.float32).reshape(shape)
        )
        result.shifts[candidate.relu] = shift
    result.mod = replace_constants(mod, new) if new else mod
    return result


def _bias(view: BindingView, name: str, kind: str):
    """(per-channel bias, restore) of the bias add `name` (add(core, constant), either order)."""
    value = view.values[name]
    index = _constant_index(view, name)
    core_call = view.values[value.args[1 - index].name]
    return bias_channels(view.constant(value.args[index]), core_call, kind)


def _constant_index(view: BindingView, name: str) -> int:
    return 0 if view.constant(view.values[name].args[0]) is not None else 1


def _through(view: BindingView, core: str, kind: str, shift: np.ndarray) -> np.ndarray:
    """W_B c: what a constant input c adds to each output channel of B."""
    call = view.values[core]
    weight = view.constant(call.args[1]).astype(np.float64)
    if kind == "dense":
        return shift @ weight  # (K,) @ (K, N)
    layout = str(call.attrs.kernel_layout)
    oi = np.transpose(weight, [layout.index(a) for a in "OHWI"]).reshape(weight.shape[layout.index("O")], -1)
    return oi @ shift
