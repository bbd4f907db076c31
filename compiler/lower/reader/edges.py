"""Layout changes at a subgraph's edges, done by the program's DMA instead of a pass over
the data on the host.

A model input in NCHW meets a VPU subgraph (which computes NHWC) as
`permute_dims(x, [0, 2, 3, 1])` then a per-tensor `quantize` on the host. The quantize
commutes with the transpose, so the host can quantise `x` as it is and hand the VPU the
channels-first int8 tensor; the program's loads then gather each channel's rows into the
channels-last tile (transfer.py: one interleaving load a band). Taken whenever every layer
that reads the input loads it band by band (conv, dense, pools, elementwise, lookup tables);
the host transposes it only when a view or a matrix product of two activations reads it
whole (the report says which).

    channels_first_inputs(mod)        {VPU function: indices of such parameters}
    take_channels_first(subgraph, k)  marks them (TensorSpec.host_layout = "NCHW"), says
                                      why of the others
    mark_edge(program, refused, ...)  the report's input_transpose: by the VPU's DMA
                                      whenever the program can, never a host transpose by
                                      choice (issue 20)
    drop_host_transposes(host, progs) after RunCodegen: the packed call takes quantize(x),
                                      or x itself when x = dequantize(x_int8) with the
                                      quantize's parameters (a QDQ model's int8 NCHW input)
"""

from __future__ import annotations

import math
from dataclasses import replace

import tvm
from tvm import relax

from vpuc.compiler import compat
from vpuc.compiler.lower import ops as vops

TO_CHANNELS_LAST = [0, 2, 3, 1]
READ_BY_BANDS = (vops.Conv, vops.Dense, vops.Pool, vops.Add, vops.Lut, vops.Softmax, vops.Rescale)


def _bindings(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    return {b.var: b.value for block in func.body.blocks for b in block.bindings}


def _op(expr) -> str | None:
    return expr.op.name if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) else None


def _transposed_quantize(arg, values) -> relax.Expr | None:
    """x when `arg` is quantize(permute_dims(x, [0, 2, 3, 1])) per tensor, else None."""
    quantize = values.get(arg)
    if _op(quantize) != "relax.quantize" or compat.constant_array(quantize.args[1]) is None:
        return None
    if compat.constant_array(quantize.args[1]).size != 1:
        return None
    permute = values.get(quantize.args[0])
    if _op(permute) != "relax.permute_dims" or permute.attrs.axes is None:
        return None
    if [int(a) for a in permute.attrs.axes] != TO_CHANNELS_LAST:
        return None
    return permute.args[0]


def _int8_source(source, quantize: relax.Call, values) -> relax.Var | None:
    """q when `source` is dequantize(q, s, z) with the quantize's own per-tensor s and z: an
    int8 NCHW input (a QDQ model's) then goes to the VPU as it is, quantize(dequantize(q)) = q."""
    dequantize = values.get(source)
    if _op(dequantize) != "relax.dequantize" or not isinstance(dequantize.args[0], relax.Var):
        return None
    pairs = [(dequantize.args[i], quantize.args[i]) for i in (1, 2)]
    arrays = [(compat.constant_array(a), compat.constant_array(b)) for a, b in pairs]
    if any(a is None or b is None or a.size != 1 or b.size != 1 for a, b in arrays):
        return None
    if any(a.item() != b.item() for a, b in arrays):
        return None
    return dequantize.args[0]


def channels_first_inputs(mod: tvm.IRModule) -> dict[relax.GlobalVar, set[int]]:
    values = _bindings(mod["main"])
    found: dict[relax.GlobalVar, set[int]] = {}
    for value in values.values():
        if isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar):
            for k, arg in enumerate(value.args):
                if _transposed_quantize(arg, values) is not None:
                    found.setdefault(value.op, set()).add(k)
    return found


def take_channels_first(subgraph: vops.Subgraph, params: set[int]) -> dict[str, str]:
    """Mark the parameters the program can take channels-first; {input: why not} for the
    others (each a sentence the report gives after "on the host: ")."""
    readers = subgraph.consumers()
    refused = {}
    for k in sorted(params):
        name = subgraph.inputs[k]
        spec = subgraph.tensors[name]
        whole = sorted({type(op).__name__ for op in readers[name] if not isinstance(op, READ_BY_BANDS)})
        if len(spec.shape) != 4:
            refused[name] = f"the VPU takes only 4-D inputs channels-first ('{name}' is {len(spec.shape)}-D)"
        elif name in subgraph.outputs:
            refused[name] = f"'{name}' is also an output of the VPU subgraph"
        elif not readers[name] or whole:
            kinds = ", ".join(whole) or "nothing"
            refused[name] = f"'{name}' is read whole (by {kinds}), not band by band by the program's loads"
        else:
            subgraph.tensors[name] = replace(spec, host_layout="NCHW")
    return refused


def host_transpose_cycles(shapes: list[tuple[int, ...]], target) -> int:
    """The host's cycles for float32 NCHW -> NHWC transposes of these shapes, as the
    partition prices a host op (compiler/partition/cost.py): op overhead + bytes read and
    written at the host's bandwidth."""
    host = target.host
    return sum(host.op_overhead_cycles + math.ceil(8 * math.prod(s) / host.bytes_per_cycle) for s in shapes)


def mark_edge(program, refused: dict[str, str], shapes: dict[str, tuple[int, ...]], target):
    """Write into the program's estimate who transposes its NCHW inputs: "by the VPU's DMA"
    when it takes every one channels-first, else "on the host: <why>" with the host's
    cycles for those it does not take (the host's part of the end-to-end latency,
    runtime/stats.py end_to_end: never hidden)."""
    if refused:
        program.estimate["input_transpose"] = "on the host: " + "; ".join(refused.values())
    else:
        program.estimate["input_transpose"] = "by the VPU's DMA"
    program.estimate["input_transpose_host_cycles"] = host_transpose_cycles(
        [shapes[name] for name in refused], target
    )
    return program


def drop_host_transposes(host: tvm.IRModule, programs: dict) -> tvm.IRModule:
    """Each packed call whose program takes an input channels-first gets quantize(x) there;
    the transpose and the NHWC quantize die (dead-code elimination)."""
    main = host["main"]
    values = _bindings(main)
    replaced = {}
    for value in values.values():
        if _op(value) != "relax.call_dps_packed":
            continue
        program = programs.get(str(value.args[0].global_symbol))
        if program is None:
            continue
        for binding, arg in zip(program.inputs, value.args[1].fields, strict=True):
            source = _transposed_quantize(arg, values) if binding.layout == "NCHW" else None
            if source is not None:
                int8 = _int8_source(source, values[arg], values)
                replaced[arg] = (
                    int8
                    if int8 is not None
                    else relax.op.quantize(
                        source, values[arg].args[1], values[arg].args[2], axis=1, out_dtype="int8"
                    )
                )
    if not replaced:
        return host

    @relax.expr_functor.mutator
    class Replace(relax.PyExprMutator):
        def visit_var_binding_(self, binding):
            if binding.var in replaced:
                value = replaced[binding.var]
                if isinstance(value, relax.Var):  # the int8 tensor itself: no host op at all
                    self.set_var_remap(binding.var, self.visit_expr(value))
                    return
                new = self.builder_.emit(value, name_hint=binding.var.name + "_nchw")
                self.set_var_remap(binding.var, new)
                return
            super().visit_var_binding_(binding)

    host["main"] = Replace().visit_expr(main)
    return relax.transform.DeadCodeElimination(["main"])(host)
