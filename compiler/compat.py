"""The one place that touches TVM APIs likely to move between versions (TVM 0.27 today).

See ../shared/notes/tvm-0.27.md: StructInfo became `.ty`, relax.Constant moved to
tvm.ir.expr.Constant, tvm.nd became tvm.runtime.tensor.
"""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from functools import cache

import numpy as np
import onnx
import tvm
from tvm import relax


@cache
def onnx_importer_ops() -> frozenset[str]:
    """Op types tvm.relax.frontend.onnx can convert (plus Constant and If, handled inline)."""
    from tvm.relax.frontend.onnx import onnx_frontend

    return frozenset(onnx_frontend._get_convert_map()) | {"Constant", "If"}


def relax_from_onnx(
    model: onnx.ModelProto, shape_dict: dict[str, list[int]], dtype_dict: dict[str, str]
) -> tuple[tvm.IRModule, dict[str, str]]:
    """Import with constants bound; returns (module, {Relax var name: ONNX node name}).

    Each ONNX node's result is bound to a var named after the node (sanitised, unique), so
    passes, reports and the partitioner can speak in ONNX node names. The importer prints on
    failure: that text becomes a note on the exception (it names the op being converted).
    """
    from tvm.relax.frontend.onnx import onnx_frontend

    importer = _node_naming_importer(onnx_frontend)(shape_dict, dtype_dict, keep_params_in_input=False)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = importer.from_onnx(model.graph, _default_opset(model))
    except Exception as exc:
        exc.add_note(printed.getvalue())
        raise
    return mod, importer.var_to_node


def _default_opset(model: onnx.ModelProto) -> int:
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            return opset.version
    return 1


def _node_naming_importer(onnx_frontend):
    """A subclass of TVM's ONNX importer that binds every node's result to a named var."""

    class NodeNamingImporter(onnx_frontend.ONNXGraphImporter):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.var_to_node: dict[str, str] = {}

        def _convert_operator(self, op_name, inputs, attrs, opset):
            result = super()._convert_operator(op_name, inputs, attrs, opset)
            node_name = attrs["tvm_custom"]["name"] or op_name
            if isinstance(result, relax.Tuple):  # multi-output nodes (BatchNormalization, Split)
                return relax.Tuple([self._bind(field, node_name, inputs) for field in result.fields])
            return self._bind(result, node_name, inputs)

        def _bind(self, expr, node_name, inputs):
            computed = isinstance(expr, relax.Call | relax.TupleGetItem)
            if computed and isinstance(expr.ty, relax.TensorType | relax.TupleType):
                var_name = self._unique_var_name(node_name)
                self.var_to_node[var_name] = node_name
                return self.bb.emit(expr, name_hint=var_name)
            if isinstance(expr, relax.Var) and not any(expr.same_as(i) for i in inputs if i is not None):
                self.var_to_node.setdefault(expr.name, node_name)  # the converter bound it itself
            return expr

        def _unique_var_name(self, node_name: str) -> str:
            base = re.sub(r"\W", "_", node_name)
            base = base if base and not base[0].isdigit() else f"n_{base}"
            name, suffix = base, 1
            while name in self.var_to_node:
                suffix += 1
                name = f"{base}_{suffix}"
            return name

    return NodeNamingImporter


def build_host(mod: tvm.IRModule, llvm_target: str) -> relax.VMExecutable:
    """relax.build for the host CPU."""
    return relax.build(mod, target=tvm.target.Target(llvm_target))


def load_host_library(path: str) -> tvm.runtime.Module:
    return tvm.runtime.load_module(path)


def virtual_machine(executable, device=None) -> relax.VirtualMachine:
    return relax.VirtualMachine(executable, device or tvm.cpu())


def to_tvm(array: np.ndarray):
    return tvm.runtime.tensor(np.ascontiguousarray(array))


def flatten_outputs(value) -> list[np.ndarray]:
    """A VM result (tensor or nested tuple) as a flat list of numpy arrays."""
    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    if isinstance(value, list | tuple) or hasattr(value, "__len__"):
        return [array for item in value for array in flatten_outputs(item)]
    raise TypeError(f"unexpected VM result {type(value).__name__}")


def tensor_type(expr) -> tuple[tuple[int, ...], str] | None:
    """(static shape, dtype) of a Relax expression, or None when not a static tensor."""
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    try:
        shape = tuple(int(v) for v in ty.shape.values)
    except (TypeError, AttributeError):
        return None
    return shape, str(ty.dtype)


# --- graph passes (compiler/passes) ------------------------------------------------------


def relax_from_onnx_named(
    model: onnx.ModelProto, shape_dict: dict[str, list[int]], dtype_dict: dict[str, str]
) -> tuple[tvm.IRModule, dict[relax.Var, str]]:
    """Import like `relax_from_onnx` and say which ONNX node produced every binding.

    Returns the module and {binding var: ONNX node label}. The public `from_onnx` keeps no
    node names, so this subclasses the importer's private `ONNXGraphImporter` (TVM 0.27) and
    overrides `_convert_operator`, which `_construct_nodes` calls once per ONNX node in graph
    order: the converted result is bound at once to a var (named after the node), and every
    binding reachable from it that no earlier node owns was created while converting this
    node, so it is this node's. Graph outputs are left unbound for `emit_output` to bind;
    their binding is found afterwards by identity of the converted expression. Node labels
    are `node.name`, or `#<index>:<first output>` for unnamed nodes; duplicates get `~<k>`.
    """
    from tvm.relax.frontend.onnx import onnx_frontend

    labelled = _label_nodes(model)
    output_nodes = _output_producers(labelled)
    importer = _naming_importer_class(onnx_frontend.ONNXGraphImporter)(
        shape_dict, dtype_dict, keep_params_in_input=False, sanitize=True
    )
    importer.vpuc_setup(output_nodes)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = importer.from_onnx(labelled.graph, _default_opset(labelled))
    except Exception as exc:
        exc.add_note(printed.getvalue())
        raise
    owners = importer.vpuc_owners(mod["main"])
    return mod, owners


def _label_nodes(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose nodes all have unique names (the importer passes node.name along)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    seen: dict[str, int] = {}
    for index, node in enumerate(copy.graph.node):
        label = node.name or f"#{index}:{node.output[0] if node.output else ''}"
        count = seen.get(label, 0)
        seen[label] = count + 1
        node.name = label if count == 0 else f"{label}~{count}"
    return copy


def _output_producers(model: onnx.ModelProto) -> set[str]:
    outputs = {o.name for o in model.graph.output}
    return {node.name for node in model.graph.node if outputs.intersection(node.output)}


def _default_opset(model: onnx.ModelProto) -> int:
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            return opset.version
    return 1


def _naming_importer_class(base: type) -> type:
    class NamingImporter(base):
        def vpuc_setup(self, output_nodes: set[str]) -> None:
            self._vpuc_output_nodes = output_nodes
            self._vpuc_owner: dict = {}  # Var -> node label
            self._vpuc_pending: list = []  # (unbound result expr, node label)

        def _convert_operator(self, op_name, inputs, attrs, opset):
            sym = super()._convert_operator(op_name, inputs, attrs, opset)
            label = attrs["tvm_custom"]["name"]
            if isinstance(sym, relax.Call) and isinstance(sym.ty, relax.TensorType):
                if label in self._vpuc_output_nodes:
                    self._vpuc_pending.append((sym, label))
                else:
                    sym = self.bb.emit(sym, name_hint=_identifier(label))
            self._vpuc_claim(sym, label)
            return sym

        def _vpuc_claim(self, expr, label: str) -> None:
            stack = [expr]
            while stack:
                item = stack.pop()
                if isinstance(item, relax.Var):
                    if item in self._vpuc_owner:
                        continue
                    value = self.bb.lookup_binding(item)
                    if value is None:
                        continue
                    self._vpuc_owner[item] = label
                    stack.append(value)
                elif isinstance(item, relax.Call):
                    stack.extend(item.args)
                elif isinstance(item, relax.Tuple):
                    stack.extend(item.fields)
                elif isinstance(item, relax.TupleGetItem):
                    stack.append(item.tuple_value)

        def vpuc_owners(self, func: relax.Function) -> dict:
            """Owners of every binding of `func`; unclaimed ones inherit from what they read."""
            owners = dict(self._vpuc_owner)
            for block in func.body.blocks:
                for binding in block.bindings:
                    if binding.var in owners:
                        continue
                    value = binding.value
                    label = next((lb for expr, lb in self._vpuc_pending if expr.same_as(value)), None)
                    owners[binding.var] = label or _first_owner(value, owners)
            return {var: label for var, label in owners.items() if label}

    return NamingImporter


def _first_owner(value, owners: dict) -> str | None:
    """The owner of the first var a binding reads (a dead TupleGetItem of a BN, an alias)."""
    if isinstance(value, relax.TupleGetItem):
        value = value.tuple_value
    if isinstance(value, relax.Var):
        return owners.get(value)
    for arg in getattr(value, "args", getattr(value, "fields", [])):
        if isinstance(arg, relax.Var) and arg in owners:
            return owners[arg]
    return None


def _identifier(label: str) -> str:
    """A readable Relax var name from an ONNX node label: `/conv1/Conv` -> `conv1_Conv`."""
    text = "".join(ch if ch.isalnum() else "_" for ch in label).strip("_")
    while "__" in text:
        text = text.replace("__", "_")
    if not text or text[0].isdigit():
        text = f"n_{text}"
    return text


def constant_array(expr) -> np.ndarray | None:
    """The numpy value of a Relax constant (tvm.ir.expr.Constant in 0.27), else None."""
    value = getattr(expr, "value", None)
    if value is None or not hasattr(value, "numpy") or not isinstance(expr, tvm.ir.expr.Constant):
        return None
    return value.numpy()


def module_attr(mod: tvm.IRModule, key: str):
    """A module attribute or None (IRModule.attrs is None on a fresh module)."""
    attrs = mod.attrs
    return None if attrs is None else attrs.get(key)
