"""Graph pass: constant folding with a size guard (runs first, and again after the layout).

    y = op(c1, c2, ...), every tensor input constant   ->   y = const(op(c1, c2, ...))
    unless  size(y) > max(growth * (size(c1) + size(c2) + ...), free_elements)

Quantize and dequantize are never folded: they carry a QDQ model's int8 weights and scales.

The guard keeps an Expand/Tile/broadcast_to/ConstantOfShape of a small constant as the small
constant plus the op: folding would put the large tensor into the weights (and, on the VPU,
into DRAM traffic) for nothing. Each refusal is a `constant_fold` near miss in the audit.

Folding runs in numpy for the ops in NUMPY_OPS (layout ops above all: the weight
transposes ConvertLayout inserts). TVM's FoldConstant compiles every expression with LLVM
(seconds on a ResNet, notes/tvm-0.27.md), so it is only the fallback for other ops.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import tvm
from tvm import relax

from vpuc.compiler import compat
from vpuc.compiler.passes.audit import Audit
from vpuc.compiler.passes.options import PassOptions
from vpuc.compiler.passes.rebind import Replacement, replace_bindings
from vpuc.compiler.passes.rewrite import attrs_of

PASS_NAME = "fold_constants"
PATTERN = "constant_fold"
MAX_TVM_FALLBACKS = 8  # each one compiles with LLVM; beyond this, leave expressions unfolded
# Never folded: a QDQ model's dequantize(int8 constant) is how its weights keep their
# int8 values and scales for the VPU; folding would turn them into float weights.
KEEP_OPS = ("relax.quantize", "relax.dequantize")

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _axis(attrs: dict):
    axis = attrs.get("axis")
    return None if axis is None else (tuple(int(a) for a in axis) if not isinstance(axis, int) else axis)


def _shape(arg) -> tuple[int, ...]:
    return tuple(int(v) for v in arg.values)


def _reduce(fn):
    return lambda a, at: fn(a[0], axis=_axis(at), keepdims=bool(at.get("keepdims", False)))


NUMPY_OPS: dict[str, Callable[[list, dict], np.ndarray]] = {
    # layout and shape: exact
    "relax.reshape": lambda a, at: a[0].reshape(_shape(a[1])),
    "relax.permute_dims": lambda a, at: np.transpose(a[0], None if at["axes"] is None else list(at["axes"])),
    "relax.expand_dims": lambda a, at: np.expand_dims(a[0], _axis(at)),
    "relax.squeeze": lambda a, at: np.squeeze(a[0], _axis(at)),
    "relax.broadcast_to": lambda a, at: np.broadcast_to(a[0], _shape(a[1])),
    "relax.tile": lambda a, at: np.tile(a[0], list(at["repeats"])),
    "relax.concat": lambda a, at: np.concatenate(a[0], axis=int(at["axis"])),
    "relax.flatten": lambda a, at: a[0].reshape(-1),
    "relax.astype": lambda a, at: a[0].astype(str(at["dtype"])),
    # elementwise
    "relax.add": lambda a, at: a[0] + a[1],
    "relax.subtract": lambda a, at: a[0] - a[1],
    "relax.multiply": lambda a, at: a[0] * a[1],
    "relax.divide": lambda a, at: a[0] / a[1],
    "relax.power": lambda a, at: np.power(a[0], a[1]),
    "relax.maximum": lambda a, at: np.maximum(a[0], a[1]),
    "relax.minimum": lambda a, at: np.minimum(a[0], a[1]),
    "relax.equal": lambda a, at: a[0] == a[1],
    "relax.less": lambda a, at: a[0] < a[1],
    "relax.greater": lambda a, at: a[0] > a[1],
    "relax.where": lambda a, at: np.where(a[0], a[1], a[2]),
    "relax.negative": lambda a, at: -a[0],
    "relax.sqrt": lambda a, at: np.sqrt(a[0]),
    "relax.rsqrt": lambda a, at: 1.0 / np.sqrt(a[0]),
    "relax.exp": lambda a, at: np.exp(a[0]),
    "relax.log": lambda a, at: np.log(a[0]),
    "relax.tanh": lambda a, at: np.tanh(a[0]),
    "relax.sigmoid": lambda a, at: 1.0 / (1.0 + np.exp(-a[0])),
    "relax.erf": lambda a, at: _erf(a[0]),
    "relax.abs": lambda a, at: np.abs(a[0]),
    "relax.isnan": lambda a, at: np.isnan(a[0]),
    "relax.isinf": lambda a, at: np.isinf(a[0]),
    "relax.clip": lambda a, at: np.clip(a[0], float(a[1].value), float(a[2].value)),
    "relax.matmul": lambda a, at: np.matmul(a[0], a[1]),
    # reductions
    "relax.sum": _reduce(np.sum),
    "relax.mean": _reduce(np.mean),
    "relax.max": _reduce(np.max),
    "relax.min": _reduce(np.min),
}


def fold_constants(mod: tvm.IRModule, options: PassOptions) -> tvm.IRModule:
    """main: y = op(constants) -> y = constant, within the size guard."""
    audit = Audit.of(mod)
    func = mod["main"]
    known: dict[relax.Var, np.ndarray] = {}
    replacements, compile_budget = [], [MAX_TVM_FALLBACKS]
    for block in func.body.blocks:
        for binding in block.bindings:
            value = _fold(binding, known, options, audit, compile_budget)
            if value is None:
                continue
            known[binding.var] = value
            folded = relax.const(value, str(binding.var.ty.dtype))
            replacements.append(Replacement(binding.var, folded, folded, [binding.var.name]))
    return replace_bindings(mod, "main", replacements, audit, PASS_NAME)


def _op(value) -> str:
    return value.op.name if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) else ""


def _fold(binding, known, options: PassOptions, audit: Audit, compile_budget: list[int]):
    """The folded value of a binding, or None when it is not (or may not be) folded."""
    call = binding.value
    if not isinstance(binding.var.ty, relax.TensorType) or not _op(call) or _op(call) in KEEP_OPS:
        return None
    inputs = [_constant_input(arg, known) for arg in call.args]
    tensors = [x for x in inputs if isinstance(x, np.ndarray | list)]
    if any(x is None for x in inputs) or not tensors:
        return None
    reason = _too_large(binding.var, tensors, options)
    if reason:
        audit.not_fused(PATTERN, [binding.var.name], reason)
        return None
    op = _op(call)
    if op in NUMPY_OPS:
        with np.errstate(all="ignore"):
            result = NUMPY_OPS[op](inputs, attrs_of(call))
        return np.array(result, dtype=str(binding.var.ty.dtype), order="C")  # keeps 0-d as 0-d
    if compile_budget[0] <= 0 or not op.startswith("relax.") or op.startswith("relax.call"):
        return None  # call_tir & co. read functions of the module: not for a scratch module
    compile_budget[0] -= 1
    return _fold_with_tvm(call, known)


def _constant_input(arg, known):
    """A numpy array for tensor inputs, the arg itself for attribute-like ones, else None."""
    if isinstance(arg, relax.Var):
        return known.get(arg)
    array = compat.constant_array(arg)
    if array is not None:
        return array
    if isinstance(arg, relax.Tuple):
        fields = [_constant_input(f, known) for f in arg.fields]
        return None if any(f is None for f in fields) else fields
    if isinstance(getattr(arg, "ty", None), relax.TensorType | relax.TupleType):
        return None  # a tensor computed at run time
    return arg  # a shape, a prim value or a string: attribute-like


def _elements(value) -> int:
    if isinstance(value, list):
        return sum(_elements(v) for v in value)
    return int(np.asarray(value).size)


def _too_large(var, tensors, options: PassOptions) -> str | None:
    found = compat.tensor_type(var)
    if found is None:
        return None
    out = int(np.prod(found[0], dtype=np.int64))
    given = sum(_elements(t) for t in tensors)
    limit = max(options.fold_max_growth * given, options.fold_free_elements)
    if out <= limit:
        return None
    return (
        f"result of {out} elements would be {out / max(given, 1):.0f}x its constant inputs "
        f"({given} elements); the size guard allows {options.fold_max_growth:g}x"
    )


def _fold_with_tvm(call: relax.Call, known) -> np.ndarray | None:
    """TVM's FoldConstant on a one-binding function (compiles with LLVM: the slow path)."""
    args = [relax.const(known[a]) if isinstance(a, relax.Var) else a for a in call.args]
    builder = relax.BlockBuilder()
    with builder.function("fold", []):
        with builder.dataflow():
            out = builder.emit_output(relax.Call(call.op, args, call.attrs, call.ty_args))
        builder.emit_func_output(out)
    scratch = builder.get()
    try:
        folded = relax.transform.FoldConstant()(scratch)["fold"]
    except Exception:  # an op FoldConstant cannot evaluate stays as it is
        return None
    body = folded.body.body
    if isinstance(body, relax.Var):
        bound = {b.var: b.value for blk in folded.body.blocks for b in blk.bindings}
        body = bound.get(body, body)
    return compat.constant_array(body)
