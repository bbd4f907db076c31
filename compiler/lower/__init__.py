"""VPU lowering, the code generator: every `Codegen="vpu"` function of the partitioned
module becomes an int8 instruction stream with its weight blob, and the host module calls
it as an external function.

    extract.py    Relax composites -> the VPU op list (ops.py), one lowering per kind in
                  layers.py: the only Relax readers
    residency.py  where each tensor lives: SRAM-resident (cascaded) or DRAM
    tiling.py     per layer: tiles, loop order, buffers (tile_mac.py, tile_matmul.py,
                  tile_vector.py)
    estimate.py   cycles of a layer's tiles on the three units (chooses among tilings)
    memory.py     SRAM/DRAM addresses by lifetime; the weight blob
    emit.py       tiles -> instructions; sync.py orders them and sets their tokens
    memo.py       a subgraph's program, lowered once per content, target and switches

    lower_partitioned(mod, target, provenance) -> [VpuProgram]  (LowerError names the layer)
    join_host(mod, programs) -> the host module: VPU calls become call_dps_packed(symbol);
        with `reference=True` it also holds REFERENCE_ENTRY, the same graph with every VPU
        subgraph run on the host in float QDQ semantics (functions REFERENCE_PREFIX<i>),
        which `vpuc run --check` compares the VPU's int8 outputs with, and one function per
        layer (reference_layer_name: the layer's composite alone), which it feeds the
        layer's inputs as the simulator held them
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

import tvm
from tvm import relax

from vpuc.compiler.lower import memo
from vpuc.compiler.lower.codegen.emit import Binding, VpuProgram, lower_subgraph
from vpuc.compiler.lower.errors import LowerError
from vpuc.compiler.lower.reader.edges import (
    channels_first_inputs,
    drop_host_transposes,
    mark_edge,
    take_channels_first,
)
from vpuc.compiler.lower.reader.extract import extract_subgraph
from vpuc.compiler.lower.reader.names import param_names
from vpuc.targets import Target

__all__ = [
    "Binding",
    "LowerError",
    "VpuProgram",
    "join_host",
    "lower_function",
    "lower_partitioned",
    "lower_subgraph",
    "reference_layer_name",
    "reference_module",
    "vpu_functions",
]

REFERENCE_ENTRY = "reference"
REFERENCE_PREFIX = "vpu_reference_sg"


def reference_layer_name(subgraph: int, layer_id: int) -> str:
    """The QDQ reference function of one layer (layer ids as the program numbers them)."""
    return f"{REFERENCE_PREFIX}{subgraph}_layer{layer_id}"


def vpu_functions(mod: tvm.IRModule) -> list[tuple[relax.GlobalVar, relax.Function]]:
    """The VPU functions in the order main calls them."""
    found = {gv: f for gv, f in mod.functions.items() if _is_vpu(f)}
    ordered = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar) and value.op in found:
                if value.op not in [gv for gv, _ in ordered]:
                    ordered.append((value.op, found[value.op]))
    return ordered


def _is_vpu(func) -> bool:
    return isinstance(func, relax.Function) and func.attrs is not None and func.attrs.get("Codegen") == "vpu"


def lower_partitioned(
    mod: tvm.IRModule, target: Target, provenance: dict[str, list[str]], lowered: dict | None = None
) -> list[VpuProgram]:
    """One program per VPU function; symbols are unique to the program's content. `lowered`
    holds programs already made for the same function, edge set and index (the
    partitioner's questions about the raw cut): they are not lowered again."""
    programs = []
    edges, names = channels_first_inputs(mod), param_names(mod, provenance)
    for index, (gv, func) in enumerate(vpu_functions(mod)):
        channels_first = edges.get(gv, set())
        program = (lowered or {}).get((func, frozenset(channels_first), index))
        if program is None:
            program = lower_function(func, index, channels_first, target, provenance, names.get(gv))
        digest = hashlib.sha256(program.program.to_bytes() + program.blob).hexdigest()[:12]
        program.symbol = f"vpuc_{digest}_sg{index}"
        programs.append(program)
    return programs


def lower_function(
    func: relax.Function,
    index: int,
    channels_first: set[int],
    target: Target,
    provenance: dict[str, list[str]],
    names: dict[str, str] | None = None,
) -> VpuProgram:
    """The program of VPU function `index` of a module. `channels_first` are the parameters
    the host quantises right after transposing them NCHW -> NHWC (channels_first_inputs):
    the program takes them channels-first, its DMA doing the transpose (edges.py; join_host
    drops the host's), wherever it can; the others the host transposes (the report says
    why). The partitioner's profitability rule estimates a subgraph with this same function.
    `names`: the names of params another VPU function's results feed (reader/names.py)."""
    subgraph = extract_subgraph(func, f"vpu_sg{index}", provenance, index, param_names=names)
    if not channels_first:
        return memo.lower(subgraph, target)  # lowered once per content within a process
    shapes = {subgraph.inputs[k]: subgraph.tensors[subgraph.inputs[k]].shape for k in channels_first}
    nhwc = replace(subgraph, tensors=dict(subgraph.tensors))  # take_channels_first marks a copy
    refused = take_channels_first(subgraph, channels_first)
    if len(refused) < len(channels_first):
        try:
            return mark_edge(memo.lower(subgraph, target), refused, shapes, target)
        except LowerError as exc:  # the NHWC program may still lower: the host transposes
            refused = {name: f"the program cannot load '{name}' channels-first ({exc})" for name in shapes}
    return mark_edge(memo.lower(nhwc, target), refused, shapes, target)


def join_host(mod: tvm.IRModule, programs: list[VpuProgram], reference: bool = False) -> tvm.IRModule:
    """RunCodegen: each VPU call becomes `call_dps_packed(symbol, ...)`; the VPU functions
    and their constants leave the host module."""
    _register_codegen()
    functions = vpu_functions(mod)
    original_main = mod["main"]
    for (gv, func), program in zip(functions, programs, strict=True):
        mod[gv] = func.with_attr("global_symbol", program.symbol)
    host = relax.transform.RunCodegen()(mod)
    if host.attrs is not None and "const_name_to_constant" in host.attrs:
        host = host.without_attr("const_name_to_constant")
    host = drop_host_transposes(host, {p.symbol: p for p in programs})
    if reference:
        host = _with_reference(host, original_main, functions, programs)
    return host


def reference_module(mod: tvm.IRModule, programs: list[VpuProgram]) -> tvm.IRModule:
    """The QDQ reference alone: REFERENCE_ENTRY and the host copies of the VPU functions,
    nothing the VPU runs. The artifact carries it serialised (tvm.ir.save_json) and
    `vpuc run --check` builds it when it first needs it (runtime/reference.py)."""
    joined = join_host(mod, programs, reference=True)
    kept = {gv: f for gv, f in joined.functions.items() if gv.name_hint != "main"}
    alone = tvm.IRModule(kept, attrs=joined.attrs)
    layers = [
        reference_layer_name(p.index, layer["id"]) for p in programs for layer in p.checkpoints["layers"]
    ]
    entries = [REFERENCE_ENTRY, *(gv.name_hint for gv in kept if gv.name_hint in layers)]
    return relax.transform.DeadCodeElimination(entries)(alone)


def layer_references(func: relax.Function, index: int, program: VpuProgram) -> dict[str, relax.Function]:
    """{reference_layer_name: the layer's composite as a plain function} for each layer the
    check judges (emit.py's checkpoints: the last op of each composite)."""
    standalone = func.without_attr("Codegen").with_attr("global_symbol", "main")
    lifted = relax.transform.LambdaLift()(tvm.IRModule({"main": standalone}))
    composites = {}
    for f in lifted.functions.values():
        if isinstance(f, relax.Function) and f.attrs is not None and "Composite" in f.attrs:
            composites[tuple(str(f.attrs["vars"]).split(","))] = f.without_attr("Composite").without_attr(
                "vars"
            )
    found = {}
    for layer in program.checkpoints.get("layers", []):
        members = tuple(layer["members"])
        if members in composites and layer["judged"]:
            name = reference_layer_name(index, layer["id"])
            found[name] = composites[members].with_attr("global_symbol", name)
    return found


def _with_reference(host: tvm.IRModule, main: relax.Function, functions, programs) -> tvm.IRModule:
    """Add REFERENCE_ENTRY: main again, each VPU call going to a host copy of its function
    (composites lifted to plain functions) instead of the VPU; and each layer's function."""
    builder = relax.BlockBuilder(host)
    copies = {}
    for index, (gv, func) in enumerate(functions):
        name = f"{REFERENCE_PREFIX}{index}"
        copies[gv] = builder.add_func(func.without_attr("Codegen").with_attr("global_symbol", name), name)
        for layer_name, layer in layer_references(func, index, programs[index]).items():
            builder.add_func(layer, layer_name)
    redirected = _redirect(main, copies).with_attr("global_symbol", REFERENCE_ENTRY)
    builder.add_func(redirected, REFERENCE_ENTRY)
    host = relax.transform.LambdaLift()(builder.get())
    for gv, func in list(host.functions.items()):
        if isinstance(func, relax.Function) and func.attrs is not None and "Composite" in func.attrs:
            host[gv] = func.without_attr("Composite").without_attr("vars")
    return host


def _redirect(main: relax.Function, copies: dict) -> relax.Function:
    @relax.expr_functor.mutator
    class Redirect(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if isinstance(call.op, relax.GlobalVar) and call.op in copies:
                return relax.Call(copies[call.op], call.args, call.attrs, call.ty_args)
            return call

    return Redirect().visit_expr(main)


def _register_codegen() -> None:
    """`relax.ext.vpu`: RunCodegen asks it for runtime modules; the programs travel in the
    artifact instead, so it returns none."""
    import tvm_ffi

    if tvm_ffi.get_global_func("relax.ext.vpu", allow_missing=True) is None:
        tvm_ffi.register_global_func("relax.ext.vpu", lambda functions, options, constant_names: [])
