"""A host graph with nothing to compute: the VPU calls in order, instead of a host library.

    host module (after RunCodegen)   ->   {"calls": [...], "returns": [...]}   every op on the VPU
                                     ->   None                                 anything else

When every op of a model runs on the VPU (the anchors' int8-io QDQ models on vpu-plus), the
host main only passes its inputs to `call_dps_packed(symbol)` and returns what they write:

    main(x) { a = call_dps_packed("sg0", (x,)); b = call_dps_packed("sg1", (a, x)); return b }
        ->  calls   [{"symbol": "sg0", "args": [{"input": 0}], "outputs": [{shape, dtype}]},
                     {"symbol": "sg1", "args": [{"call": 0, "output": 0}, {"input": 0}], ...}]
            returns [{"call": 1, "output": 0}]

(an item of a call's tuple of outputs, `a[1]`, is {"call": 0, "output": 1}).

The artifact then carries this plan in its manifest (`host.calls`, docs/artifact.md) and the
runtime makes the calls itself: no relax.build, no LLVM, no library to load.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax

_CALL_DPS_PACKED = "relax.call_dps_packed"


def vpu_call_plan(mod: tvm.IRModule) -> dict[str, Any] | None:
    """The plan of `mod`'s main when it is only VPU calls on its inputs, else None."""
    if any(gv.name_hint != "main" for gv in mod.functions):
        return None  # host kernels or other functions: there is host code
    func = mod["main"]
    refs: dict[str, list[dict[str, int]]] = {p.name: [{"input": i}] for i, p in enumerate(func.params)}
    calls: list[dict[str, Any]] = []
    for block in func.body.blocks:
        for binding in block.bindings:
            item = binding.value
            if isinstance(item, relax.TupleGetItem) and isinstance(item.tuple_value, relax.Var):
                written = refs.get(item.tuple_value.name, [])  # an output of a multi-output call
                if not 0 <= item.index < len(written):
                    return None
                refs[binding.var.name] = [written[item.index]]
                continue
            call = _vpu_call(binding.value, refs, len(calls))
            if call is None:
                return None
            calls.append(call)
            written = range(len(call["outputs"]))
            refs[binding.var.name] = [{"call": len(calls) - 1, "output": j} for j in written]
    returned = _returned(func.body.body, refs)
    if not calls or returned is None:
        return None
    return {"calls": calls, "returns": returned}


def _vpu_call(value, refs: dict[str, list[dict[str, int]]], index: int) -> dict[str, Any] | None:
    """A call_dps_packed of an external symbol on known tensors, as a plan entry."""
    if not isinstance(value, relax.Call) or getattr(value.op, "name", None) != _CALL_DPS_PACKED:
        return None
    callee, args = value.args
    if not isinstance(callee, relax.ExternFunc) or not isinstance(args, relax.Tuple):
        return None
    arg_refs = []
    for arg in args.fields:
        if not isinstance(arg, relax.Var) or len(refs.get(arg.name, ())) != 1:
            return None  # a constant, a tuple or a value computed on the host
        arg_refs.append(refs[arg.name][0])
    outputs = _tensor_types(value.ty)
    if outputs is None:
        return None
    return {"symbol": str(callee.global_symbol), "args": arg_refs, "outputs": outputs}


def _tensor_types(ty) -> list[dict[str, Any]] | None:
    """[{shape, dtype}] of a tensor or a flat tuple of tensors with static shapes."""
    fields = ty.fields if isinstance(ty, relax.TupleType) else [ty]
    specs = []
    for field_ in fields:
        if not isinstance(field_, relax.TensorType) or field_.shape is None:
            return None
        try:
            shape = [int(d) for d in field_.shape.values]
        except (TypeError, AttributeError):  # a symbolic dimension
            return None
        specs.append({"shape": shape, "dtype": str(field_.dtype)})
    return specs


def _returned(body, refs: dict[str, list[dict[str, int]]]) -> list[dict[str, int]] | None:
    """The references main returns (a var, or a flat tuple of vars), in order."""
    items = body.fields if isinstance(body, relax.Tuple) else [body]
    returned = []
    for item in items:
        if not isinstance(item, relax.Var) or item.name not in refs:
            return None
        returned.extend(refs[item.name])
    return returned
