"""Layout changes at a subgraph's edges, done by the program's DMA instead of a pass over
the data on the host.

A model input in NCHW meets a VPU subgraph (which computes NHWC) as
`permute_dims(x, [0, 2, 3, 1])` then a per-tensor `quantize` on the host. The quantize
commutes with the transpose, so the host can quantise `x` as it is and hand the VPU the
channels-first int8 tensor; the program's loads then gather each channel's rows into the
channels-last tile (transfer.py). Taken only when every layer that reads the input loads it
band by band (conv, dense, pools, elementwise, lookup tables), never when a view or a
matrix product of two activations reads it whole.

    channels_first_inputs(mod)        {VPU function: indices of such parameters}
    take_channels_first(subgraph, k)  marks them (TensorSpec.host_layout = "NCHW")
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


def take_channels_first(subgraph: vops.Subgraph, params: set[int]) -> bool:
    """Mark the parameters the program can take channels-first; whether any was."""
    readers = subgraph.consumers()
    marked = False
    for k in sorted(params):
        name = subgraph.inputs[k]
        spec = subgraph.tensors[name]
        banded = bool(readers[name]) and all(isinstance(op, READ_BY_BANDS) for op in readers[name])
        if len(spec.shape) == 4 and banded and name not in subgraph.outputs:
            subgraph.tensors[name] = replace(spec, host_layout="NCHW")
            marked = True
    return marked


def cheaper_edge(host_transposes, vpu_transposes, target):
    """The program to keep: the one taking its inputs channels-first when the VPU time it
    adds (estimates) is below the host's float32 transposes it saves (the partitioner's host
    model: op overhead + bytes read and written at the host's bandwidth)."""
    added_cycles = vpu_transposes.estimate["cycles"] - host_transposes.estimate["cycles"]
    added_s = added_cycles / (target.hardware.clock_mhz * 1e6)
    host = target.host
    host_cycles = sum(
        host.op_overhead_cycles + math.ceil(8 * math.prod(b.shape) / host.bytes_per_cycle)
        for b in vpu_transposes.inputs
        if b.layout == "NCHW"
    )  # as the partition's host cost of an op (compiler/partition/cost.py)
    chosen = vpu_transposes if added_s < host.seconds(host_cycles) else host_transposes
    chosen.estimate["input_transpose"] = "by the VPU's DMA" if chosen is vpu_transposes else "on the host"
    # the host's part of the end-to-end latency (runtime/stats.py end_to_end): never hidden
    chosen.estimate["input_transpose_host_cycles"] = 0 if chosen is vpu_transposes else host_cycles
    return chosen


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
