"""Frontend step 5 and the frontend's entry point: prepared ONNX -> Relax IRModule.

import_model runs the whole frontend (load, shapes, fold, support, import) and returns the
Relax module with the prepared ONNX model beside it: later stages (reports, the partition
report's per-node rows, `--check`) need both. The Relax import itself is memoised within the
process (the same prepared model and input specs import once; each caller gets a copy).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx
import tvm
from onnx import numpy_helper

from vpuc.compiler import compat
from vpuc.compiler.errors import FrontendError, last_line
from vpuc.compiler.frontend.bind import bind_inputs
from vpuc.compiler.frontend.fixes import fix_ops
from vpuc.compiler.frontend.fold import fold_shape_computations
from vpuc.compiler.frontend.index_inputs import index_ranges
from vpuc.compiler.frontend.integer_ops import decompose_integer_ops
from vpuc.compiler.frontend.load import load_model
from vpuc.compiler.frontend.lstm import unroll_lstms
from vpuc.compiler.frontend.names import name_nodes
from vpuc.compiler.frontend.qdq_check import check_qdq_onnx
from vpuc.compiler.frontend.qoperator import rewrite_qoperator_ops
from vpuc.compiler.frontend.shapes import (
    TensorSpec,
    check_static_shapes,
    fix_input_shapes,
    graph_inputs,
    infer_shapes,
    static_shapes,
    tensor_specs,
)
from vpuc.compiler.frontend.support import check_supported


@dataclass
class ImportedModel:
    """The frontend's product."""

    mod: tvm.IRModule
    onnx_model: onnx.ModelProto  # static shapes, shape arithmetic folded
    name: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    folded_nodes: list[tuple[str, str]] = field(default_factory=list)
    # Relax var name -> ONNX node name: every node's result is bound to a var named after it.
    var_to_node: dict[str, str] = field(default_factory=dict)
    # integer ops written as standard ops (frontend/integer_ops.py): (node name, op type)
    decomposed_nodes: list[tuple[str, str]] = field(default_factory=list)
    # --bind-input: the value each bound input became (the artifact keeps it for --check)
    bound_inputs: dict[str, np.ndarray] = field(default_factory=dict)
    # what the Relax import was keyed by (the prepared model's bytes, the input specs): it
    # fixes the module and every name in it (pipeline.py memoises the passes' result by it)
    relax_key: tuple | None = None


def import_model(
    source: str | Path | onnx.ModelProto,
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    bound_inputs: dict[str, str] | None = None,
) -> ImportedModel:
    """Load, check, bind inputs, make static, name nodes, decompose integer ops, fold shape
    arithmetic (and constant Ifs), check support, import into Relax."""
    model, name = load_model(source)
    model = bind_inputs(model, name, bound_inputs or {})
    bound_names = set(bound_inputs or {})
    bound = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.name in bound_names}
    model = fix_input_shapes(model, name, input_shapes or {})  # a copy from here on
    name_nodes(model)
    model, rewritten = rewrite_qoperator_ops(model, name)
    model, decomposed = decompose_integer_ops(model)
    decomposed = rewritten + decomposed
    model, unrolled = unroll_lstms(model)
    decomposed += unrolled
    folded = fold_shape_computations(model, name)
    model, fixed = fix_ops(folded.model)
    if fixed:
        model = infer_shapes(model, name)
    check_supported(model, name)
    check_static_shapes(model, name)
    check_qdq_onnx(model)  # before TVM's importer, which fails unclearly on bad Q/DQ parameters
    ranges = index_ranges(model, static_shapes(model))
    inputs = [
        replace(spec, index_range=ranges.get(spec.name))
        for spec in tensor_specs(model, graph_inputs(model), name)
    ]
    outputs = tensor_specs(model, list(model.graph.output), name)
    mod, var_to_node, key = _relax_import(model, name, inputs)
    imported = ImportedModel(mod, model, name, inputs, outputs, folded.folded, var_to_node)
    imported.decomposed_nodes = decomposed
    imported.bound_inputs = bound
    imported.relax_key = key
    return imported


# The Relax import of a prepared ONNX model within one process, by its bytes and input specs:
# a repeated compile (the regression runner, the sweep) imports the model once. Each caller
# gets its own module (IRModule.clone: a new function table, the same immutable functions),
# so a caller that sets a function in its module leaves the memo's alone. It holds a few
# models' weights at most: emptied when it reaches _MAX_IMPORTED models or _MAX_IMPORTED_BYTES.
_IMPORTED: dict[tuple, tuple[tvm.IRModule, dict[str, str]]] = {}
_MAX_IMPORTED = 8
_MAX_IMPORTED_BYTES = 256 << 20


def _relax_import(
    model: onnx.ModelProto, name: str, inputs: list[TensorSpec]
) -> tuple[tvm.IRModule, dict[str, str], tuple]:
    shape_dict = {spec.name: list(spec.shape) for spec in inputs}
    dtype_dict = {spec.name: spec.dtype for spec in inputs}
    data = model.SerializeToString(deterministic=True)
    specs = (tuple((k, tuple(v)) for k, v in shape_dict.items()), tuple(dtype_dict.items()))
    key = (hashlib.sha256(data).digest(), len(data), *specs)
    if key not in _IMPORTED:
        try:
            imported = compat.relax_from_onnx(model, shape_dict, dtype_dict)
        except Exception as exc:  # the importer raises anything from ValueError to TVMError
            raise FrontendError(f"{name}: Relax import failed{_failing_op(exc)}: {last_line(exc)}") from None
        if len(_IMPORTED) >= _MAX_IMPORTED or sum(k[1] for k in _IMPORTED) + len(data) > _MAX_IMPORTED_BYTES:
            _IMPORTED.clear()
        _IMPORTED[key] = imported
    mod, var_to_node = _IMPORTED[key]
    return mod.clone(), dict(var_to_node), key


def _failing_op(exc: Exception) -> str:
    text = " ".join([str(exc), *getattr(exc, "__notes__", [])])
    node = re.search(r"Node (\S+)", text)
    if node:
        return f" at node '{node[1]}'"
    op = re.search(r"Error converting operator (\w+)", text)
    return f" converting a {op[1]} node" if op else ""
