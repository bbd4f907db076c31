"""Cross-layer equalisation (Nagel et al., 2019): balance the per-channel weight ranges of
two consecutive layers by a positive scale per channel, before quantisation.

    y = A(x) + b_A -> act -> [max_pool] -> B(.)         A, B conv2d / dense, constant weights
 => W_A[i] / s_i, b_A[i] / s_i  ...  W_B[:, i] * s_i     s_i = sqrt(r_A,i / r_B,i)

    r_A,i = max |W_A| over output channel i,  r_B,i = max |W_B| over input channel i.
    act(z / s) = act(z) / s for s > 0 when act is relu (or a clip to [0, +inf), or nothing),
    max pooling commutes with a positive per-channel scale, and B's input channel i is
    multiplied back by s_i: the float module computes the same function (exact up to
    float rounding; tests/quantize/test_equalize.py checks it against onnxruntime).

Depthwise-separable blocks are chains of such pairs (conv -> dw, dw -> pw): a depthwise B
scales its own channel i, and is then the A of the next pair. Pairs are equalised in graph
order, over and over (at most ROUNDS times) until no scale differs from 1 by more than
CONVERGED, each with the weights the previous pairs left. Relu6 (a clip to
[0, 6]) is not scale-equivariant (relu6(z / s) != relu6(z) / s), so chains through it are
left alone: equalising them would change what the model computes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm

from vpuc.compiler import compat
from vpuc.compiler.quantize.bindings import BindingView, replace_constants
from vpuc.compiler.quantize.layouts import bias_channels

ROUNDS = 8  # at most; stops when no scale moves by more than CONVERGED
CONVERGED = 1e-4
SCALE_LIMITS = (1e-3, 1e3)
MAC_OPS = {"relax.nn.conv2d": "conv2d", "relax.matmul": "dense"}
PASS_THROUGH = ("relax.nn.relu", "relax.nn.max_pool2d")


@dataclass(frozen=True)
class Pair:
    first: str  # A's conv2d / matmul binding
    first_bias: str | None  # A's bias add, if any
    second: str  # B's conv2d / matmul binding
    through: tuple[str, ...]  # the bindings between them


@dataclass
class Equalized:
    mod: tvm.IRModule
    pairs: list[Pair] = field(default_factory=list)
    scales: dict[str, np.ndarray] = field(default_factory=dict)  # A binding -> s (last round's product)

    def summary(self) -> dict:
        spread = [float(s.max() / s.min()) for s in self.scales.values() if s.size]
        return {"pairs": len(self.pairs), "max_scale_spread": round(max(spread), 3) if spread else None}


def pairs(func) -> list[Pair]:
    """Every A -> [bias] -> [relu | clip(0, inf) | max_pool]* -> B chain (see the docstring)."""
    view = BindingView.of(func)
    found = []
    for name in sorted(view.values, key=view.order.__getitem__):
        if not _mac(view, name):
            continue
        current, bias, through = name, None, []
        while True:
            readers = view.readers.get(current, [])
            if len(readers) != 1 or current in view.outputs:
                break
            reader = readers[0]
            if bias is None and not through and _is_bias(view, reader, current):
                bias, current = reader, reader
                continue
            if _passes_scale(view, reader) and _reads_first(view, reader, current):
                through.append(reader)
                current = reader
                continue
            if _mac(view, reader) and _reads_first(view, reader, current):
                found.append(Pair(name, bias, reader, tuple(through)))
            break
    return found


def equalize(mod: tvm.IRModule) -> Equalized:
    """The module with every pair equalised (see the module docstring)."""
    view = BindingView.of(mod["main"])
    found = pairs(mod["main"])
    weights = {
        n: view.constant(view.values[n].args[1]).astype(np.float64)
        for p in found
        for n in (p.first, p.second)
    }
    biases = {p.first_bias: _bias(view, p) for p in found if p.first_bias}
    total: dict[str, np.ndarray] = {}
    for _ in range(ROUNDS):
        changed = False
        for pair in found:
            first_call, second_call = view.values[pair.first], view.values[pair.second]
            r_first = _ranges(weights[pair.first], _out_axis(first_call))
            r_second = _input_ranges(weights[pair.second], second_call)
            usable = (r_first > 0) & (r_second > 0)
            scale = np.where(usable, np.sqrt(r_first / np.where(usable, r_second, 1.0)), 1.0)
            scale = np.clip(scale, *SCALE_LIMITS)
            if np.allclose(scale, 1.0, rtol=0.0, atol=CONVERGED):
                continue
            changed = True
            weights[pair.first] = _divided(weights[pair.first], _out_axis(first_call), scale)
            weights[pair.second] = _scale_inputs(weights[pair.second], second_call, scale)
            if pair.first_bias:
                vector, restore = biases[pair.first_bias]
                biases[pair.first_bias] = (vector / scale, restore)
            total[pair.first] = total.get(pair.first, 1.0) * scale
        if not changed:
            break
    new: dict[str, dict[int, np.ndarray]] = {n: {1: w.astype(np.float32)} for n, w in weights.items()}
    for name, (vector, restore) in biases.items():
        index = 0 if view.constant(view.values[name].args[0]) is not None else 1
        new[name] = {index: restore(vector)}
    return Equalized(replace_constants(mod, new) if found else mod, found, total)


def _mac(view: BindingView, name: str) -> bool:
    value = view.values.get(name)
    return (
        view.op(name) in MAC_OPS
        and view.constant(value.args[1]) is not None
        and (view.op(name) != "relax.matmul" or len(compat.tensor_type(value.args[1])[0]) == 2)
    )


def _kind(view: BindingView, name: str) -> str:
    return MAC_OPS[view.op(name)]


def _is_bias(view: BindingView, name: str, core: str) -> bool:
    value = view.values[name]
    if view.op(name) != "relax.add":
        return False
    args = list(value.args)
    return sum(view.constant(a) is not None for a in args) == 1 and any(
        getattr(a, "name", None) == core for a in args
    )


def _passes_scale(view: BindingView, name: str) -> bool:
    op = view.op(name)
    if op in PASS_THROUGH:
        return True
    if op == "relax.clip":
        low, high = (compat.scalar_value(a) for a in view.values[name].args[1:3])
        return low == 0.0 and (high is None or high == float("inf"))
    return False


def _reads_first(view: BindingView, name: str, tensor: str) -> bool:
    first = view.values[name].args[0]
    return getattr(first, "name", None) == tensor


def _out_axis(call) -> int:
    if MAC_OPS[call.op.name] == "dense":
        return 1
    return str(call.attrs.kernel_layout).index("O")


def _ranges(weight: np.ndarray, axis: int) -> np.ndarray:
    moved = np.moveaxis(np.abs(weight), axis, 0)
    return moved.reshape(moved.shape[0], -1).max(axis=1)


def _divided(weight: np.ndarray, axis: int, scale: np.ndarray) -> np.ndarray:
    shape = [1] * weight.ndim
    shape[axis] = -1
    return weight / scale.reshape(shape)


def _grouped(weight: np.ndarray, call) -> tuple[np.ndarray, int, int]:
    """B's conv weight as (O, H, W, I per group), with its groups and output channels per group."""
    layout = str(call.attrs.kernel_layout)
    ohwi = np.transpose(weight, [layout.index(a) for a in "OHWI"])
    groups = max(int(call.attrs.groups), 1)
    return ohwi, groups, ohwi.shape[0] // groups


def _input_ranges(weight: np.ndarray, call) -> np.ndarray:
    """max |W_B| over everything that reads input channel i."""
    if MAC_OPS[call.op.name] == "dense":
        return np.abs(weight).max(axis=1)
    ohwi, groups, per_group = _grouped(weight, call)
    per_input = np.abs(ohwi).max(axis=(1, 2))  # (O, I/g)
    return per_input.reshape(groups, per_group, -1).max(axis=1).reshape(-1)


def _scale_inputs(weight: np.ndarray, call, scale: np.ndarray) -> np.ndarray:
    if MAC_OPS[call.op.name] == "dense":
        return weight * scale[:, None]
    layout = str(call.attrs.kernel_layout)
    ohwi, groups, per_group = _grouped(weight, call)
    factor = np.repeat(scale.reshape(groups, -1), per_group, axis=0)  # (O, I/g)
    scaled = ohwi * factor[:, None, None, :]
    return np.transpose(
        scaled,
        [  # back to the kernel layout
            "OHWI".index(a) for a in layout
        ],
    )


def _bias(view: BindingView, pair: Pair):
    value = view.values[pair.first_bias]
    index = 0 if view.constant(value.args[0]) is not None else 1
    return bias_channels(view.constant(value.args[index]), view.values[pair.first], _kind(view, pair.first))
