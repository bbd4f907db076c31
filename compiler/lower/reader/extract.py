"""Relax -> the VPU op list: every `Codegen="vpu"` function of the partitioned module
becomes a Subgraph of ops (ops.py). With layers.py, the only code of the code generator
that reads Relax.

    extract_subgraph(func, symbol, provenance) -> Subgraph

Each call of a composite (composite.py parses it) becomes one op, or two where the ISA needs
a rescale first (a concat input or a reshape whose quantisation differs from the output's).
Layer names are the ONNX node of each composite's core binding, through the provenance the
graph passes kept ({Relax var name: [ONNX nodes]}). layers.py lowers each kind of composite.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from tvm import relax

from vpuc.compiler import compat
from vpuc.compiler.lower import ops
from vpuc.compiler.lower.errors import LowerError
from vpuc.compiler.lower.ops import QParams, Subgraph, TensorSpec
from vpuc.compiler.lower.reader.composite import ParsedComposite, parse_composite
from vpuc.compiler.lower.reader.layers import LOWERINGS, LUT_KINDS, core_var, lower_lut
from vpuc.compiler.lower.reader.names import layer_names, result_name


class _Builder:
    """Collects the tensors, constants and ops of one subgraph."""

    def __init__(self, symbol: str, provenance: dict[str, list[str]]) -> None:
        self.symbol = symbol
        self.provenance = provenance
        self.tensors: dict[str, TensorSpec] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.ops: list[ops.Op] = []
        self.tensor_of: dict[relax.Var, str] = {}
        self.float_tensors: dict[str, str] = {}  # tensors the VPU cannot take (not int8)

    def add_tensor(self, name: str, shape, q: QParams | None) -> str:
        unique, k = name, 1
        while unique in self.tensors:
            k += 1
            unique = f"{name}_{k}"
        self.tensors[unique] = TensorSpec(unique, tuple(int(d) for d in shape), q or QParams(1.0, 0))
        return unique

    def set_q(self, name: str, q: QParams) -> None:
        spec = self.tensors[name]
        self.tensors[name] = TensorSpec(spec.name, spec.shape, q, spec.host_layout)

    def add_constant(self, name: str, array: np.ndarray, q: QParams) -> str:
        unique = self.add_tensor(name, array.shape, q)
        self.constants[unique] = np.ascontiguousarray(array, dtype=np.int8)
        return unique

    def layer_names(self, parsed: ParsedComposite, core: relax.Var | None) -> tuple[str, tuple[str, ...]]:
        return layer_names(parsed, core, self.provenance)


def extract_subgraph(
    func: relax.Function,
    symbol: str,
    provenance: dict[str, list[str]],
    index: int = 0,
    refusals: dict[str, str] | None = None,
    param_names: dict[str, str] | None = None,
) -> Subgraph:
    """The Subgraph of one VPU function; LowerError names the layer that cannot be lowered.
    With a `refusals` dict, every layer the reader refuses is recorded there instead
    ({binding: reason}, the reason the partition report gives) and its result read as an
    input from the host, as it will be once that layer runs there; the Subgraph returned is
    then of the other layers. Tensors take ONNX names (names.py); `param_names` gives those
    of params that another VPU function's results feed (names.param_names)."""
    builder = _Builder(symbol, provenance)
    inputs = []
    for param in func.params:
        shape, dtype = _static(param, symbol)
        name = builder.add_tensor((param_names or {}).get(param.name, param.name), shape, None)
        if dtype != "int8":
            builder.float_tensors[name] = dtype
        builder.tensor_of[param] = name
        inputs.append(name)
    functions: dict[relax.Var, relax.Function] = {}
    body = func.body
    for block in body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Function):
                functions[binding.var] = value
            elif isinstance(value, relax.Call) and value.op in functions:
                try:
                    _lower_call(builder, binding.var, value, functions[value.op])
                except LowerError as exc:
                    if refusals is None or not exc.members:
                        raise
                    reason = f"the VPU code generator cannot lower it: {exc}"
                    refusals.update(dict.fromkeys(exc.members, reason))
                    label = result_name(binding.var, functions[value.op], provenance)
                    inputs.append(_from_host(builder, binding.var, label))
            elif isinstance(value, relax.Var) and value in builder.tensor_of:
                builder.tensor_of[binding.var] = builder.tensor_of[value]
            else:
                raise LowerError(f"{symbol}: unexpected binding '{binding.var.name}' in a VPU function")
    outputs = [builder.tensor_of[v] for v in _result_vars(body.body, symbol)]
    _input_quantisation(builder, inputs)
    return Subgraph(symbol, builder.tensors, builder.ops, inputs, outputs, index, builder.constants)


def _from_host(builder: _Builder, var: relax.Var, label: str) -> str:
    """A refused layer's result, read by the rest as an input the host provides."""
    found = compat.tensor_type(var)
    shape = found[0] if found is not None else ()
    name = builder.add_tensor(label, shape, None)
    if found is None or found[1] != "int8":
        builder.float_tensors[name] = found[1] if found is not None else "a tuple"
    builder.tensor_of[var] = name
    return name


def _input_quantisation(builder: _Builder, inputs: list[str]) -> None:
    """A subgraph input is quantised as its first reader dequantizes it (the host's quantize)."""
    pending = set(inputs)
    for op in builder.ops:
        for name, q in zip(op.inputs, op.in_q, strict=False):
            if name in pending:
                builder.set_q(name, q)
                pending.discard(name)


def _static(expr, where: str) -> tuple[tuple[int, ...], str]:
    found = compat.tensor_type(expr)
    if found is None:
        raise LowerError(f"{where}: a tensor without a static shape")
    return found


def _result_vars(expr: relax.Expr, symbol: str) -> list[relax.Var]:
    if isinstance(expr, relax.Tuple):
        return [v for field in expr.fields for v in _result_vars(field, symbol)]
    if isinstance(expr, relax.Var):
        return [expr]
    raise LowerError(f"{symbol}: the VPU function returns something other than its tensors")


def _lower_call(builder: _Builder, var: relax.Var, call: relax.Call, func: relax.Function) -> None:
    attrs = func.attrs
    members = tuple(str(attrs["vars"]).split(",")) if attrs is not None and "vars" in attrs else ()
    pattern = str(attrs["Composite"]) if attrs is not None and "Composite" in attrs else "composite"
    args = [builder.tensor_of[a] for a in call.args]
    floats = [f"'{a}' is {builder.float_tensors[a]}" for a in args if a in builder.float_tensors]
    found = compat.tensor_type(var)
    if found is None:  # a tuple: a value inside the composite is also read outside it
        raise LowerError(f"{pattern}: a value computed inside the layer is also read outside it", members)
    shape, dtype = found
    if floats or dtype != "int8":
        what = ", ".join(floats) if floats else f"its result is {dtype}"
        raise LowerError(f"{pattern}: the VPU computes int8 tensors ({what})", members)
    try:
        parsed = parse_composite(func)
    except LowerError as exc:
        raise LowerError(str(exc), members) from None
    kind = parsed.kind
    lower = LOWERINGS.get(kind) or (lower_lut if kind in LUT_KINDS else None)
    if lower is None:
        raise LowerError(f"{builder.symbol}: no VPU lowering for composite {parsed.pattern}")
    core = core_var(parsed)
    name, nodes = builder.layer_names(parsed, core)
    out = builder.add_tensor(name, shape, parsed.output_q)  # (names.result_name)
    builder.tensor_of[var] = out
    first = len(builder.ops)
    try:
        lower(builder, parsed, args, out, name, nodes)
    except LowerError as exc:
        raise LowerError(f"layer '{name}' ({parsed.pattern}): {exc}", parsed.members) from None
    for k in range(first, len(builder.ops)):
        builder.ops[k] = replace(builder.ops[k], members=parsed.members, args=tuple(args))
