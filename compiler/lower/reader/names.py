"""The names a VPU function's tensors take in its Subgraph, and so in every reason the code
generator gives (extract.py reads them): ONNX names through the provenance the graph passes
kept ({Relax var name: [ONNX nodes]}), never the names the partitioning made ('gv', 'lv12').

    layer_names(parsed, core, provenance)  -> (layer name, ONNX nodes)
    result_name(var, func, provenance)     -> the name of a composite's result: its layer's
    param_names(mod, provenance)           -> {VPU function: {param: name}}: a param that
        main feeds with another VPU function's result takes that result's name
"""

from __future__ import annotations

from tvm import relax

from vpuc.compiler.lower.errors import LowerError
from vpuc.compiler.lower.reader.composite import ParsedComposite, parse_composite
from vpuc.compiler.lower.reader.layers import core_var


def layer_names(
    parsed: ParsedComposite, core: relax.Var | None, provenance: dict[str, list[str]]
) -> tuple[str, tuple[str, ...]]:
    """(the layer's name: the ONNX node of its core binding, the ONNX nodes of its members)."""
    nodes: list[str] = []
    for member in parsed.members:
        for node in provenance.get(member, []):
            if node not in nodes:
                nodes.append(node)
    core_nodes = provenance.get(core.name, []) if core is not None else []
    fallback = core.name if core is not None else parsed.pattern  # (bool() of a Relax var raises)
    name = core_nodes[0] if core_nodes else (nodes[0] if nodes else fallback)
    return name, tuple(nodes) or (name,)


def result_name(var: relax.Var, func: relax.Function, provenance: dict[str, list[str]]) -> str:
    """The name of composite `func`'s result, bound to `var`: its layer's; for a composite
    that does not parse (a float one), the ONNX node most of its members come from (a
    conv's conv2d, bias add and reshapes against one node each for its Q and DQs)."""
    try:
        parsed = parse_composite(func)
    except LowerError:
        attrs = func.attrs
        members = str(attrs["vars"]).split(",") if attrs is not None and "vars" in attrs else []
        nodes = [node for member in members for node in provenance.get(member, [])[:1]]
        return max(nodes, key=nodes.count) if nodes else var.name
    return layer_names(parsed, core_var(parsed), provenance)[0]


def param_names(mod, provenance: dict[str, list[str]]) -> dict[relax.GlobalVar, dict[str, str]]:
    """For each VPU function of `mod` that main calls, the names of the params main feeds
    with another VPU function's result (that result's name, result_name); the other params
    keep their own (main's bindings, named after their ONNX nodes)."""
    results = {
        gv: _result_names(func, provenance)
        for gv, func in mod.functions.items()
        if isinstance(func, relax.Function) and func.attrs is not None and func.attrs.get("Codegen") == "vpu"
    }
    produced: dict[relax.Var, str] = {}  # main's var -> the name of the VPU result it holds
    tuples: dict[relax.Var, list[str]] = {}  # main's var -> the names of a VPU call's results
    found: dict[relax.GlobalVar, dict[str, str]] = {}
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and value.op in results:
                names = results[value.op]
                if len(names) == 1:
                    produced[binding.var] = names[0]
                else:
                    tuples[binding.var] = names
                own = found.setdefault(value.op, {})
                for param, arg in zip(mod[value.op].params, value.args, strict=False):
                    if isinstance(arg, relax.Var) and arg in produced:
                        own[param.name] = produced[arg]
            elif isinstance(value, relax.TupleGetItem) and value.tuple_value in tuples:
                names = tuples[value.tuple_value]
                if value.index < len(names):
                    produced[binding.var] = names[value.index]
    return found


def _result_names(func: relax.Function, provenance: dict[str, list[str]]) -> list[str]:
    """The names of a VPU function's results, in order (a composite call's: result_name)."""
    composites: dict[relax.Var, relax.Function] = {}
    names: dict[relax.Var, str] = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Function):
                composites[binding.var] = value
            elif isinstance(value, relax.Call) and value.op in composites:
                names[binding.var] = result_name(binding.var, composites[value.op], provenance)
    body = func.body.body
    fields = body.fields if isinstance(body, relax.Tuple) else [body]
    return [names.get(f, f.name) if isinstance(f, relax.Var) else "" for f in fields]
